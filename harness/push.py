"""harness push: one round trip to learn what the remote has, one tar stream with the rest.

Remote layout under the target's workdir:
    agent/remote_agent/...            the agent's code (sent with every push that sends anything)
    bundles/<target>/<kernel>/        manifest.json, artifacts/, data/ (content-addressed)
    results/<target>/<kernel>/        results.csv, written by the agent
A marker ``bundles/<target>/<kernel>/.pushed-<hash>`` names the manifest and agent code that
were sent last, so a push with nothing new is a single SSH command. It is the stream's last file
and the remote writes each file under a temporary name, checks its size and sha256 and only then
renames it, so the marker exists only when everything before it arrived whole. It holds the
sha256 of the manifest and of each agent file: ``remote_agent run --pushed`` checks them before
it runs anything (docs/security.md).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .bundle import Manifest, pushed_files
from .names import check_name

AGENT_DIR = Path(__file__).resolve().parent.parent / "remote_agent"


@dataclass
class PushSummary:
    sent_files: int
    skipped_files: int
    bytes_sent: int
    commands: int


def remote_bundle_dir(target_name: str, kernel: str) -> str:
    return "bundles/%s/%s" % (check_name(target_name, "target"), check_name(kernel, "kernel"))


def remote_results_dir(target_name: str, kernel: str) -> str:
    return "results/%s/%s" % (check_name(target_name, "target"), check_name(kernel, "kernel"))


def agent_files() -> list:
    return sorted(p for p in AGENT_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def push_marker(manifest_bytes: bytes) -> str:
    h = hashlib.sha256(manifest_bytes)
    for path in agent_files():
        h.update(str(path.relative_to(AGENT_DIR)).encode())
        h.update(path.read_bytes())
    return ".pushed-%s" % h.hexdigest()[:16]


def marker_text(manifest_bytes: bytes) -> str:
    """What the marker holds: the sha256 of manifest.json and of every agent file (by its path
    under agent/), which the agent checks before a run."""
    agent = {"remote_agent/%s" % p.relative_to(AGENT_DIR).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in agent_files()}
    manifest = hashlib.sha256(manifest_bytes).hexdigest()
    return json.dumps({"manifest_sha256": manifest, "agent_sha256": agent}, indent=1, sort_keys=True)


def missing_files(bundle: Path, needed: list, have: dict) -> list:
    """The files of ``needed`` the remote lacks, or holds with another size than here."""
    return [f for f in needed if have.get(f) != (bundle / f).stat().st_size]


def push(bundle: Path, manifest: Manifest, transport, progress=None) -> PushSummary:
    rel = remote_bundle_dir(manifest.target["name"], manifest.kernel)
    have = transport.list_files(rel)
    needed = pushed_files(bundle, manifest)
    missing = missing_files(bundle, needed, have)
    # read once: a tune builds its next rounds meanwhile, each replacing manifest.json, and the
    # file hashed and the file sent must be the same one
    manifest_bytes = (bundle / "manifest.json").read_bytes()
    marker = push_marker(manifest_bytes)
    if not missing and marker in have:
        return PushSummary(0, len(needed), 0, 1)
    pairs = [(bundle / f, "%s/%s" % (rel, f)) for f in missing]
    pairs += [(p, "agent/remote_agent/%s" % p.relative_to(AGENT_DIR).as_posix()) for p in agent_files()]
    with tempfile.TemporaryDirectory(prefix="harness-push-") as tmp:
        staged = Path(tmp) / "manifest.json"
        staged.write_bytes(manifest_bytes)
        pairs.append((staged, "%s/manifest.json" % rel))
        marker_file = Path(tmp) / marker  # its own file per push: pushes to a fleet run at once
        marker_file.write_text(marker_text(manifest_bytes))
        pairs.append((marker_file, "%s/%s" % (rel, marker)))  # last: it stands for the whole push
        total = sum(Path(p).stat().st_size for p, _ in pairs)
        if progress:
            progress.start(total)
        # every marker goes first (this one too, if a push before had the same one), and so
        # does compiled agent code: the agent runs with -B, and a .pyc cut short by a full
        # disk under an older harness would stop every later run
        markers = ["%s/%s" % (rel, f) for f in have if f.startswith(".pushed-")]
        caches = sorted({(Path("agent/remote_agent") / p.parent.relative_to(AGENT_DIR) / "__pycache__").as_posix()
                         for p in agent_files()})
        remove = markers + caches
        sent = transport.put_files(pairs, on_bytes=progress.advance if progress else None, remove=remove)
    return PushSummary(len(missing), len(needed) - len(missing), sent, 2)
