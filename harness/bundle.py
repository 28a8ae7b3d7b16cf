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
from dataclasses import asdict, dataclass, field
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
    # the pairs of failed compiles (FailedPair), written only when there are some
    failed: list = field(default_factory=list)
    # shape id -> variant ids (``lib:<name>`` included) in the order the GPU agent measures that
    # shape's jobs (a winners' re-measure round; the CPU agent interleaves them instead); written
    # only when set
    order: dict = field(default_factory=dict)

    def to_json(self) -> str:
        data = asdict(self)
        for optional in ("library", "failed", "order"):
            if not data[optional]:
                del data[optional]
        return json.dumps(data, indent=1, sort_keys=False)

    @staticmethod
    def load(path: Path) -> "Manifest":
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise HarnessError("no bundle at %s; run harness build first" % Path(path).parent)
        except json.JSONDecodeError as exc:
            raise HarnessError("manifest is not valid JSON (%s)" % exc, where=str(path))
        if data.get("schema_version") != MANIFEST_SCHEMA:
            raise HarnessError("manifest schema %s, this harness reads %s; rebuild the bundle"
                               % (data.get("schema_version"), MANIFEST_SCHEMA), where=str(path))
        data["variants"] = [Variant(**v) for v in data["variants"]]
        data["shapes"] = [ShapeEntry(**s) for s in data["shapes"]]
        data["jobs"] = [Job(**j) for j in data["jobs"]]
        data["pruned"] = [PrunedEntry(**p) for p in data["pruned"]]
        data["failed"] = [FailedPair(**f) for f in data.get("failed", [])]
        return Manifest(**data)

    def save(self, bundle_dir: Path) -> Path:
        """Write manifest.json, unless the one there says the same (then a push sends nothing)."""
        path = Path(bundle_dir) / "manifest.json"
        if path.exists():
            try:
                old = json.loads(path.read_text())
            except ValueError:
                old = {}
            self.created = old.get("created", "")
            if old == json.loads(self.to_json()):
                return path
        self.created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        write_atomic(path, self.to_json().encode())
        return path


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
    for shape in manifest.shapes:
        files += list(shape.data.values())
    return sorted(set(files))
