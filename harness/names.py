"""Names that become folder names (targets, kernels) and the paths made from them.

A target or kernel name is a folder under build/, results/ and tuned/ here and under bundles/
and results/ on a remote, so it is restricted to a safe alphabet: letters, digits, '.', '_'
and '-', not starting with '.' (no '/', no '..', no hidden folders). Paths made from such names
are checked once more against their root after resolution (``confined``).
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import HarnessError

SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}\Z")
RULE = "letters, digits, '.', '_' and '-' only, not starting with '.', at most 128 characters"


def is_safe_name(name) -> bool:
    return isinstance(name, str) and SAFE_NAME.match(name) is not None


def check_name(name, what: str, where=None) -> str:
    """``name`` if it is safe as a folder name, else a HarnessError (file:line in ``where``)."""
    if not is_safe_name(name):
        raise HarnessError("%s name %r: use %s" % (what, name, RULE), where=where)
    return name


def confined(root, *parts) -> Path:
    """root/parts..., refused unless it stays inside root once resolved."""
    base = Path(root).resolve()
    path = base.joinpath(*parts).resolve()
    if path != base and base not in path.parents:
        raise HarnessError("%s leaves %s" % ("/".join(map(str, parts)), base))
    return Path(root).joinpath(*parts)
