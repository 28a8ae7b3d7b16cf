"""harness push: one round trip to learn what the remote has, one tar stream with the rest.

Remote layout under the target's workdir:
    agent/remote_agent/...            the agent's code (sent with every push that sends anything)
    bundles/<target>/<kernel>/        manifest.json, artifacts/, data/ (content-addressed)
    results/<target>/<kernel>/        results.csv, written by the agent
A marker ``bundles/<target>/<kernel>/.pushed-<hash>`` names the manifest and agent code that
were sent last, so a push with nothing new is a single SSH command.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .bundle import Manifest, pushed_files

AGENT_DIR = Path(__file__).resolve().parent.parent / "remote_agent"


@dataclass
class PushSummary:
    sent_files: int
    skipped_files: int
    bytes_sent: int
    commands: int


def remote_bundle_dir(target_name: str, kernel: str) -> str:
    return "bundles/%s/%s" % (target_name, kernel)


def remote_results_dir(target_name: str, kernel: str) -> str:
    return "results/%s/%s" % (target_name, kernel)


def agent_files() -> list:
    return sorted(p for p in AGENT_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def push_marker(bundle: Path) -> str:
    h = hashlib.sha256((bundle / "manifest.json").read_bytes())
    for path in agent_files():
        h.update(str(path.relative_to(AGENT_DIR)).encode())
        h.update(path.read_bytes())
    return ".pushed-%s" % h.hexdigest()[:16]


def push(bundle: Path, manifest: Manifest, transport, progress=None) -> PushSummary:
    rel = remote_bundle_dir(manifest.target["name"], manifest.kernel)
    have = transport.list_files(rel)
    needed = pushed_files(bundle, manifest)
    missing = [f for f in needed if f not in have]
    marker = push_marker(bundle)
    if not missing and marker in have:
        return PushSummary(0, len(needed), 0, 1)
    pairs = [(bundle / f, "%s/%s" % (rel, f)) for f in missing]
    pairs.append((bundle / "manifest.json", "%s/manifest.json" % rel))
    pairs += [(p, "agent/remote_agent/%s" % p.relative_to(AGENT_DIR)) for p in agent_files()]
    with tempfile.TemporaryDirectory(prefix="harness-push-") as tmp:
        marker_file = Path(tmp) / marker  # its own file per push: pushes to a fleet run at once
        marker_file.write_text("")
        pairs.append((marker_file, "%s/%s" % (rel, marker)))
        total = sum(Path(p).stat().st_size for p, _ in pairs)
        if progress:
            progress.start(total)
        stale = ["%s/%s" % (rel, f) for f in have if f.startswith(".pushed-") and f != marker]
        sent = transport.put_files(pairs, on_bytes=progress.advance if progress else None, remove=stale)
    return PushSummary(len(missing), len(needed) - len(missing), sent, 2)
