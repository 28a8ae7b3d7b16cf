"""The compile cache kept across projects and tunes: content-addressed artifacts outside any
project's build folder, so a second tune of the same space (in a fresh project too) compiles
nothing it compiled before.

An artifact's file name is a digest of everything that went into it (the kernel source, the
config's options and constants, the specialization, and the toolchain: the Triton version and
the GPU target for GPU kernels, the compiler, its flags and version for C++), so the name is the
key: the same name is the same binary. A bundle's ``artifacts/<name>`` and its ``<name>.json``
sidecar (status, launch facts) are copied into the cache after a compile and copied back into
another bundle instead of compiling. Failed compiles are kept too (a compile error stays one),
timeouts are not (a longer timeout may succeed).

Beside the artifacts' folder, ``../built/<kernel>-<machine>.jsonl`` records which configs each
shape's builds took (``note_built``). A later tune of the same shape searches those first
(``built_for``; the strategies prefer them: ``Problem.prefer``), so a second tune of the same space
compiles nothing, where its adaptive search would otherwise ask other configs than those the first
tune's measurements led it to.

Where: ``$HARNESS_CACHE_DIR/compile/`` when ``HARNESS_CACHE_DIR`` is set, else
``$XDG_CACHE_HOME/harness/compile/`` or ``~/.cache/harness/compile/``; ``HARNESS_CACHE_DIR=off``
turns it off. Entries live in ``<first two hex digits>/<name>``; emptying the folder is always
safe. Writes go through a temporary file and a rename: builds in several processes may share it.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Optional

OFF = ("off", "0", "none")
_counts_lock = threading.Lock()
_counts = {"compiled": 0, "reused": 0}  # this process's compiles and reuses, for the tune's line


def count(kind: str) -> None:
    """One more compile (``compiled``) or one artifact taken from the cache (``reused``)."""
    with _counts_lock:
        _counts[kind] += 1


def counts() -> dict:
    """{"compiled", "reused"} so far in this process (a tune reports the difference)."""
    with _counts_lock:
        return dict(_counts)


def cache_root() -> Optional[Path]:
    """The compile cache folder, or None when HARNESS_CACHE_DIR=off."""
    env = os.environ.get("HARNESS_CACHE_DIR")
    if env is not None and env.strip().lower() in OFF:
        return None
    if env:
        return Path(env).expanduser() / "compile"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "harness" / "compile"


def entry_path(artifact: Path) -> Optional[Path]:
    """Where the cache keeps the artifact named like ``artifact`` (None: the cache is off)."""
    root = cache_root()
    if root is None:
        return None
    name = Path(artifact).name
    return root / name[:2] / name


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _copy(src: Path, dest: Path) -> None:
    """``src`` to ``dest`` through a temporary file and a rename (a hard link where it can)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp%d.%d" % (os.getpid(), threading.get_ident()))
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def restore(artifact: Path) -> bool:
    """Copy the cached artifact (and its sidecar) named like ``artifact`` into the bundle folder
    of ``artifact``; False when the cache has no whole entry for it."""
    entry = entry_path(artifact)
    if entry is None or not _sidecar(entry).exists():
        return False
    try:
        if entry.exists():
            _copy(entry, Path(artifact))
        import json

        data = json.loads(_sidecar(entry).read_text())
        if data.get("status") == "ok" and not entry.exists():
            return False
        if data.get("artifact"):
            data["artifact"] = str(artifact)
        tmp = _sidecar(Path(artifact)).with_name(_sidecar(Path(artifact)).name + ".tmp%d" % os.getpid())
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, _sidecar(Path(artifact)))
    except (OSError, ValueError):
        return False  # a damaged entry: compile instead
    return True


def keep(artifact: Path) -> None:
    """Copy a bundle's freshly compiled ``artifact`` and its sidecar into the cache (the binary
    first: an entry is whole once its sidecar is there). A cache that cannot be written is no
    error: the build goes on."""
    entry = entry_path(artifact)
    if entry is None:
        return
    try:
        if Path(artifact).exists():
            _copy(Path(artifact), entry)
        _copy(_sidecar(Path(artifact)), _sidecar(entry))
    except OSError:
        pass


BUILT = "built"  # the folder of the configs each shape's builds took, per kernel and machine
_built_lock = threading.Lock()
_built_lines = {}  # file -> the lines it holds: read once per process, then what this process added


def _built_file(kernel: str, target) -> Optional[Path]:
    """Where the configs ``kernel``'s builds took for ``target``'s kind of machine are recorded (the
    backend and GPU architecture, or the CPU architecture: the target's name may differ between
    projects on one machine); None when the cache is off."""
    root = cache_root()
    if root is None:
        return None
    machine = "%s-%s" % (target.backend, target.gpu_arch or target.arch)
    return root.parent / BUILT / ("%s-%s.jsonl" % (kernel, machine))


def _read_lines(path: Path) -> list:
    try:
        return path.read_text().splitlines()
    except OSError:  # none yet, or unreadable
        return []


def note_built(kernel: str, target, pairs) -> None:
    """Record the (shape id, config) ``pairs`` a build took (compiled or reused) that the record
    lacks, one JSON line each, appended (a tune's rounds, and its next tunes, build the same pairs
    again: the record holds each once); a cache that cannot be written is no error."""
    path = _built_file(kernel, target)
    if path is None:
        return
    import json

    with _built_lock:
        known = _built_lines.get(path)
        if known is None or not path.exists():
            known = _built_lines[path] = set(_read_lines(path))
        lines = []
        for sid, cfg in pairs:
            line = json.dumps({"shape": sid, "config": cfg}, sort_keys=True)
            if line not in known:
                known.add(line)
                lines.append(line + "\n")
        if not lines:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as f:  # (one write: other processes' lines do not interleave)
                f.write("".join(lines))
        except OSError:
            pass


def built_for(kernel: str, target, shape_ids) -> dict:
    """{shape id: [config, ...]}: the configs earlier builds took for each of ``shape_ids`` on this
    kind of machine (each once, in the order first recorded); a damaged line is skipped."""
    import json

    path = _built_file(kernel, target)
    out = {sid: {} for sid in shape_ids}
    for line in _read_lines(path) if path is not None else []:
        try:
            entry = json.loads(line)
            sid, cfg = entry["shape"], entry["config"]
        except (ValueError, KeyError, TypeError):
            continue
        if sid in out and isinstance(cfg, dict):
            out[sid].setdefault(json.dumps(cfg, sort_keys=True), cfg)
    return {sid: list(cfgs.values()) for sid, cfgs in out.items()}
