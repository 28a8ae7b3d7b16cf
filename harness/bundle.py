"""The bundle: manifest, content-addressed artifacts and test data (host -> remote contract).

Layout of ``build/<target>/<kernel>/`` (docs/contracts.md has every field):

    manifest.json          what to run: target, variants, shapes, jobs, pruned configs
    artifacts/<hash>.elf   one per variant (or .cubin / .hsaco on GPUs); named by content hash
    artifacts/lib-<hash>/  a shared library an artifact loads through its rpath (the library row's
                           OpenBLAS), listed with its hash in the variant's ``launch["libs"]``
    data/<sha256>.bin      test data, named by the sha256 of its bytes
    src/, objs/            rendered sources and objects, kept for inspection (not pushed)
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Optional

from remote_agent.contract import MANIFEST_SCHEMA

from . import __version__
from .errors import HarnessError

@dataclass
class Variant:
    id: str
    config: dict
    dtype: str
    specialization: list  # what the artifact is specialized for; shapes sharing it share the artifact
    status: str  # ok | compile_error | compile_timeout
    artifact: Optional[str] = None  # path relative to the bundle
    sha256: Optional[str] = None
    message: str = ""
    launch: dict = field(default_factory=dict)
    compile_seconds: float = 0.0


@dataclass
class ShapeEntry:
    id: str
    dims: dict  # the kernel's problem dimensions in order, e.g. {"M": 64, "N": 64, "K": 64}
    dtype: str
    layout: str  # "" for kernels without layouts
    weight: float = 1.0
    flops: int = 0
    bytes: int = 0
    operands: list = field(default_factory=list)  # per operand: name, role, dtype, shape, strides, elements, bytes
    scalars: dict = field(default_factory=dict)  # the kernel's integer arguments after its pointers, in order
    data: dict = field(default_factory=dict)  # operand name ("a", "b", "ref") -> path relative to the bundle
    sha256: dict = field(default_factory=dict)  # operand name -> sha256 of the file
    extra: dict = field(default_factory=dict)

    def to_shape(self, problem):
        """The Shape this entry was written from (``problem``: the kernel's)."""
        from .shapes import make_problem_shape

        return make_problem_shape(problem, self.dims, self.dtype, self.layout, weight=self.weight,
                                  extra=tuple((self.extra or {}).items()))


@dataclass
class Job:
    variant: str
    shape: str
    grid: list


@dataclass
class FailedPair:
    """A (variant, shape) pair the plan wanted whose variant did not compile: the agent writes one
    row for it with the variant's status instead of measuring it."""

    variant: str
    shape: str


@dataclass
class PrunedEntry:
    variant: str
    config: dict
    shape: str
    rule: str
    why: str


@dataclass
class Manifest:
    kernel: str
    target: dict
    toolchain: dict
    variants: list
    shapes: list
    jobs: list
    pruned: list
    seed: int
    config_names: list
    tolerances: dict
    checks: list = field(default_factory=list)  # {"output", "reference", "kind"}: what the agent compares
    device_reference: str = ""  # GPU bundles: how the worker computes the reference ("matmul")
    data_on_device: bool = False  # GPU bundles: inputs are generated on the device from the seed
    schema_version: int = MANIFEST_SCHEMA
    harness_version: str = __version__
    created: str = ""
    # GPU bundles: vendor library -> shape ids the GPU agent also measures it on (``lib:<name>`` rows);
    # written only when set, so a bundle without it reads the same to any agent
    library: dict = field(default_factory=dict)
    # GPU bundles: the kernel's device plug-in the worker loads ({"file", "sha256"}; written only when set)
    device_plugin: dict = field(default_factory=dict)
    # the pairs of failed compiles (FailedPair), written only when there are some
    failed: list = field(default_factory=list)
    # shape id -> variant ids (``lib:<name>`` included) in the order the GPU agent measures that
    # shape's jobs (a winners' re-measure round; the CPU agent interleaves them instead); written
    # only when set
    order: dict = field(default_factory=dict)

    def to_json(self) -> str:
        """The manifest's JSON, one line: a tune writes one per round, and the host's time per
        round (its one interpreter builds every round) went mostly to writing manifests with
        ``dataclasses.asdict`` and the indenting encoder, which is pure Python."""
        data = _plain(self)
        for optional in ("library", "device_plugin", "failed", "order"):
            if not data[optional]:
                del data[optional]
        return json.dumps(data)

    @staticmethod
    def load(path: Path) -> "Manifest":
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise HarnessError("no bundle at %s; run harness build first" % Path(path).parent)
        except ValueError as exc:  # not JSON, or not UTF-8
            raise HarnessError("manifest is not valid JSON (%s)" % exc, where=str(path))
        if not isinstance(data, dict):
            raise HarnessError("manifest is not a JSON object; rebuild the bundle", where=str(path))
        if data.get("schema_version") != MANIFEST_SCHEMA:
            raise HarnessError("manifest schema %.40r, this harness reads %s; rebuild the bundle"
                               % (data.get("schema_version"), MANIFEST_SCHEMA), where=str(path))
        try:
            data["variants"] = [Variant(**v) for v in data["variants"]]
            data["shapes"] = [ShapeEntry(**s) for s in data["shapes"]]
            data["jobs"] = [Job(**j) for j in data["jobs"]]
            data["pruned"] = [PrunedEntry(**p) for p in data["pruned"]]
            data["failed"] = [FailedPair(**f) for f in data.get("failed", [])]
            return Manifest(**data)
        except (TypeError, KeyError, AttributeError) as exc:  # a field missing, unknown or of the wrong kind
            raise HarnessError("manifest does not have this harness's fields (%s); rebuild the bundle"
                               % str(exc).replace("\n", " "), where=str(path))

    def save(self, bundle_dir: Path) -> Path:
        """Write manifest.json, unless the one there says the same (then a push sends nothing)."""
        path = Path(bundle_dir) / "manifest.json"
        remember_built(bundle_dir, self)  # report.results_reader checks results rows against it
        if path.exists():
            try:
                old = json.loads(path.read_text())
            except ValueError:
                old = {}
            self.created = old.get("created", "") if isinstance(old, dict) else ""
            if old == json.loads(self.to_json()):
                return path
        self.created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        write_atomic(path, self.to_json().encode())
        return path


def _plain(value):
    """``value`` as JSON data: dataclasses as dicts of their fields, in lists and dicts too; the
    other values as they are (not copied, unlike ``dataclasses.asdict``: written out at once)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


KNOWN_FILE = "known.json"  # every variant and shape built in a bundle folder, across rebuilds and rounds


def read_known(bundle_dir: Path) -> dict:
    """The bundle folder's ledger: {"variants": {id: config}, "shapes": {id: {dims, dtype,
    layout}}}; empty where there is none or it cannot be read."""
    try:
        data = json.loads((Path(bundle_dir) / KNOWN_FILE).read_text())
        if isinstance(data.get("variants"), dict) and isinstance(data.get("shapes"), dict):
            return data
    except (OSError, ValueError, AttributeError):
        pass
    return {"variants": {}, "shapes": {}}


_ledgers: dict = {}  # ledger path -> (its file's stat as this process last wrote or read it, the ledger)
_ledger_lock = threading.Lock()  # the rounds of a tune are built in many threads


def remember_built(bundle_dir: Path, manifest: "Manifest") -> None:
    """Add a manifest's variants (built, failed, pruned, library) and shapes to the ledger. A
    tune's rounds each overwrite manifest.json; the ledger keeps what every round built, so that
    the host can tell the rows of its own variants from rows a remote made up. The ledger stays
    in memory between rounds (read again only where its file changed meanwhile), and rounds built
    at once add to it one at a time (else one round's write could drop another's variants)."""
    path = Path(bundle_dir) / KNOWN_FILE
    with _ledger_lock:
        known = _ledger(path)
        variants, shapes = known["variants"], known["shapes"]
        before = (len(variants), len(shapes))
        for v in manifest.variants:
            variants.setdefault(v.id, dict(v.config))
        for p in manifest.pruned:
            variants.setdefault(p.variant, dict(p.config))
        for name in manifest.library or ():
            variants.setdefault("lib:%s" % name, {})
        for sh in manifest.shapes:
            shapes.setdefault(sh.id, {"dims": dict(sh.dims), "dtype": sh.dtype, "layout": sh.layout})
        if before != (len(variants), len(shapes)) or not path.exists():
            write_atomic(path, json.dumps(known, sort_keys=True).encode())
            _ledgers[str(path)] = (_stamp(path), known)


def _ledger(path: Path) -> dict:
    """The ledger at ``path``: the one kept in memory while its file is as this process left it,
    else the file's (none: empty)."""
    stamp = _stamp(path)
    kept = _ledgers.get(str(path))
    if kept is not None and stamp is not None and kept[0] == stamp:
        return kept[1]
    known = read_known(path.parent)
    _ledgers[str(path)] = (stamp, known)
    return known


def _stamp(path: Path):
    """What tells a file changed: its inode, size and modification time (None: no file)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def bundle_dir(root: Path, target: str, kernel: str) -> Path:
    """build/<target>/<kernel> under root; both names checked (harness/names.py)."""
    from .names import check_name, confined

    return confined(root, "build", check_name(target, "target"), check_name(kernel, "kernel"))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp%d.%d" % (os.getpid(), threading.get_ident()))
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_data_file(bundle: Path, array) -> tuple:
    """Store an array's bytes under data/<sha256>.bin; returns (relative path, sha256)."""
    raw = array.tobytes()
    digest = hashlib.sha256(raw).hexdigest()
    rel = "data/%s.bin" % digest[:32]
    path = Path(bundle) / rel
    if not path.exists():
        write_atomic(path, raw)
    return rel, digest


def pushed_files(bundle: Path, manifest: Manifest) -> list:
    """Every file the remote needs, relative to the bundle: artifacts and data of this manifest."""
    files = [v.artifact for v in manifest.variants if v.artifact]
    # shared libraries an artifact loads (the library row's OpenBLAS: artifacts/lib-<hash>/)
    files += [lib["path"] for v in manifest.variants if v.artifact for lib in (v.launch or {}).get("libs", [])]
    # GPU bundles: the agent's support kernels (data fill, error reduction, reference)
    files += [s["artifact"] for s in (manifest.toolchain or {}).get("support", {}).values()]
    if manifest.device_plugin:  # GPU bundles: the kernel's side of the agent
        files.append(manifest.device_plugin["file"])
    for shape in manifest.shapes:
        files += list(shape.data.values())
    return sorted(set(files))
