"""The host remembers the last build and push per target in .harness/state.json."""

from __future__ import annotations

import json
import os
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


def record(root: Path, target: str, **facts) -> None:
    state = load(root)
    state.setdefault("targets", {}).setdefault(target, {}).update(facts)
    state["last_target"] = target
    path = _path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("state.json.tmp%d" % os.getpid())
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


def get(root: Path, target: Optional[str]) -> tuple:
    """(target name, facts) for the named target or the last one used."""
    state = load(root)
    name = target or state.get("last_target")
    return name, state.get("targets", {}).get(name, {}) if name else {}
