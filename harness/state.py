"""The host remembers, in .harness/state.json, what was last built, pushed and run, so commands
that name no target or kernel carry on from there.

``targets``: per target the kernel last built, pushed or run and the facts commands keep;
``last_target``: the target last used; ``last_build``: the last build's target, kernel and
options (``harness push T`` builds T from them when nothing is built for T); ``last_push`` and
``last_run``: the targets last pushed to and run on.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Optional

STATE_DIR = ".harness"


def _path(root: Path) -> Path:
    return Path(root) / STATE_DIR / "state.json"


def load(root: Path) -> dict:
    path = _path(root)
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}


def _save(root: Path, state: dict) -> None:
    path = _path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("state.json.tmp%d.%d" % (os.getpid(), threading.get_ident()))
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


def record(root: Path, target: str, **facts) -> None:
    """Update the target's facts; ``pushed=True`` makes it the last pushed target, a
    ``results_remote`` fact (a run's) the last run one."""
    state = load(root)
    state.setdefault("targets", {}).setdefault(target, {}).update(facts)
    state["last_target"] = target
    if facts.get("pushed"):
        state["last_push"] = target
    if "results_remote" in facts:
        state["last_run"] = target
    _save(root, state)


def remember(root: Path, target: str, **facts) -> None:
    """Keep facts of a target (e.g. its probed cache sizes) without making it the last one used."""
    state = load(root)
    state.setdefault("targets", {}).setdefault(target, {}).update(facts)
    _save(root, state)


def record_build(root: Path, target: str, kernel: str, options: dict) -> None:
    """The build just made, with the command's options as given."""
    state = load(root)
    state["last_build"] = {"target": target, "kernel": kernel, "options": options}
    _save(root, state)


def last(root: Path, key: str):
    """``last_build``, ``last_push``, ``last_run`` or ``last_target``; None when there is none."""
    return load(root).get(key)


def get(root: Path, target: Optional[str]) -> tuple:
    """(target name, facts) for the named target or the last one used."""
    state = load(root)
    name = target or state.get("last_target")
    return name, state.get("targets", {}).get(name, {}) if name else {}
