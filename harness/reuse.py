"""Nothing measured twice: what a second run of the same command reuses, and when it may not.

The results of a target and kernel (results/<target>/<kernel>/results.csv and winners.json) are
measurements of given artifacts (each row carries its artifact's sha256) on a given machine with
given timing options. ``measure_key`` sums up the last two: the target's facts (its definition,
and for a target without SSH this machine's CPU model) and the options that change what a time
means (estimator, max noise, max time, iterations, warm-up, interleave, GPU minimum time). The
key is kept beside the results (measure_key.json). A run whose key differs from the one kept, or
one given ``--fresh``, sets the earlier files aside (results/<target>/<kernel>/set-aside/<time>/:
nothing measured is lost) and measures anew; otherwise the search resumes from the rows there
(a shape's budget counts them) and a shape whose finalists are the same as at the last re-measure,
with the same key, keeps its re-measured winner (``reusable_winners``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Optional

KEY_FILE = "measure_key.json"
SET_ASIDE = "set-aside"
TIMING_FIELDS = ("estimator", "max_noise", "max_time", "iters", "warmup", "interleave", "min_time_ms")


def machine_facts(target) -> dict:
    """What identifies the machine a time was taken on: the target's definition, and where it is
    this machine (no ssh), its CPU model."""
    facts = {k: getattr(target, k, None) for k in ("name", "arch", "backend", "toolchain", "march", "vlen",
                                                    "threads", "run_under", "gpu_arch", "multiprocessors")}
    facts["cflags"] = list(getattr(target, "cflags", []) or [])
    ssh = getattr(target, "ssh", None)
    facts["ssh"] = getattr(ssh, "host", None) if ssh else None
    facts["hosts"] = [str(h) for h in (getattr(target, "hosts", None) or [])]
    if not facts["ssh"]:
        facts["cpu"] = _cpu_model()
    return facts


def _cpu_model() -> Optional[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def measure_key(target, run_options) -> dict:
    """The target's facts and the timing options, with their hash (``key``)."""
    timing = {k: getattr(run_options, k, None) for k in TIMING_FIELDS}
    body = {"target": machine_facts(target), "timing": timing}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return dict(body, key=digest)


def key_path(results_path: Path) -> Path:
    return Path(results_path).with_name(KEY_FILE)


def stored_key(results_path: Path) -> Optional[str]:
    try:
        return json.loads(key_path(results_path).read_text()).get("key")
    except (OSError, ValueError, AttributeError):
        return None


def prepare(results_path: Path, key: dict, fresh: bool) -> Optional[str]:
    """Before a tune: set the earlier results aside when ``fresh`` or when they were measured under
    another key (results.csv without a key file counts as reusable: it predates keys), and keep
    ``key`` beside the results. Returns a line saying what was set aside and why, or None."""
    results_path = Path(results_path)
    old = stored_key(results_path)
    have = results_path.exists()
    line = None
    if have and (fresh or (old is not None and old != key["key"])):
        why = "--fresh" if fresh else "measured on another machine or with other timing options (key %s, now %s)" % (
            old, key["key"])
        dest = results_path.parent / SET_ASIDE / time.strftime("%Y%m%d-%H%M%S")
        dest.mkdir(parents=True, exist_ok=True)
        moved = []
        for p in sorted(results_path.parent.iterdir()):
            if p.is_file() and p.name != results_path.name + ".lock":
                shutil.move(str(p), str(dest / p.name))
                moved.append(p.name)
        line = "%s: earlier measurements set aside in %s (%s)" % (why, dest, ", ".join(moved))
    results_path.parent.mkdir(parents=True, exist_ok=True)
    key_path(results_path).write_text(json.dumps(key, indent=1, default=str))
    return line


def reused_rows(rows: list, shape_ids) -> int:
    """Rows of ``shape_ids`` already measured ok, that a resumed search counts."""
    wanted = set(shape_ids)
    return sum(1 for r in rows if r.get("shape_id") in wanted and r.get("status") == "ok")


def _config_set(configs) -> frozenset:
    return frozenset(tuple(sorted((str(k), str(v)) for k, v in c.items())) for c in configs)


def reusable_winners(winners: dict, finalists: dict, key: str) -> dict:
    """{shape id: winners.json entry} of the shapes whose last re-measure had exactly the
    ``finalists`` ({shape id: [config, ...]}) of now, under ``key``: their winner stands."""
    keep = {}
    for sid, configs in finalists.items():
        entry = winners.get(sid)
        if not entry or entry.get("measure_key") != key or not configs:
            continue
        then = _config_set(c.get("config", {}) for c in entry.get("candidates", []))
        if then == _config_set(configs):
            keep[sid] = entry
    return keep
