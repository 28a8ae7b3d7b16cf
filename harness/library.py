"""The library a tuned kernel has to beat, measured in the same run as the kernel's variants.

On CPU boards the library is the *reference build*: the kernel's own template with one fixed,
untuned config (the kernel's ``reference_config``, else the first value of every parameter of
the kernel's own space: for matmul the smallest tiles), compiled by the same toolchain with the
same flags. It is one more variant per dtype, ``lib:reference:<dtype>``, with an empty config, so
its rows are library rows (``harness.report.common``: ``variant_id`` starting with ``lib:``,
empty ``cfg_`` columns): the report computes the uplift over it and tuned files leave it out.

GPU nodes measure cuBLAS / hipBLASLt through ``torch.matmul`` on the node, on the very device
buffers the kernel's variants use and timed the same way; that is the GPU agent's part and
nothing is built here: ``--library`` only sets the manifest's ``library`` field
(``{"torch.matmul": [shape ids]}``), and the agent adds one ``lib:torch.matmul`` job per shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

LIB_REFERENCE = "lib:reference"
GPU_LIBRARY = "torch.matmul"  # what the GPU agent times for every shape (cuBLAS / hipBLASLt)


def reference_config(kernel, target) -> dict:
    cfg = getattr(kernel, "reference_config", None)
    if callable(cfg):
        cfg = cfg(target)
    if cfg:
        return dict(cfg)
    return {name: values[0] for name, values in kernel.space_for(target).items()}


def reference_id(dtype: str) -> str:
    return "%s:%s" % (LIB_REFERENCE, dtype)


def add_reference(kernel, target, shapes: Iterable, manifest, bundle: Path, compiler=None,
                  compile_timeout: float = 120.0, frontend: str = "auto", from_ir=None) -> list:
    """Compile the reference build (one per dtype of ``shapes``) and add its variants and one job
    per shape to ``manifest`` (not saved). Returns the variant ids added. On GPU targets nothing is
    compiled: the manifest asks the agent for the library instead (``request_gpu_library``)."""
    from .build import compiler_for
    from .bundle import Job, Variant, sha256_file

    shapes = list(shapes)
    if target.is_gpu:
        return request_gpu_library(manifest, shapes, getattr(kernel, "gpu_library", GPU_LIBRARY))
    if not shapes:
        return []
    if compiler is None:
        compiler = compiler_for(kernel, target, Path(bundle), frontend, from_ir)
    cfg = reference_config(kernel, target)
    first_of = {}
    for shape in shapes:
        first_of.setdefault(shape.dtype, shape)
    added = []
    for dtype, shape in first_of.items():
        vid = reference_id(dtype)
        try:
            res = compiler.compile(cfg, shape, compile_timeout)
            status, message, launch, seconds = res.status, res.message, res.launch, res.seconds
            artifact = res.artifact
        except Exception as exc:  # a toolchain that cannot build this config: a recorded status
            status, message, launch, seconds, artifact = "compile_error", "reference build: %s" % exc, {}, 0.0, None
        variant = Variant(id=vid, config={}, dtype=dtype, specialization=list(compiler.specialization(cfg, shape)),
                          status=status, artifact=str(Path(artifact).relative_to(bundle)) if artifact else None,
                          sha256=sha256_file(artifact) if artifact else None, message=message, launch=launch,
                          compile_seconds=round(seconds, 3))
        manifest.variants = [v for v in manifest.variants if v.id != vid] + [variant]
        manifest.jobs = [j for j in manifest.jobs if j.variant != vid]
        if status == "ok":
            manifest.jobs += [Job(vid, s.id, list(kernel.grid(cfg, s, target))) for s in shapes if s.dtype == dtype]
        added.append(vid)
    return added


def request_gpu_library(manifest, shapes: Iterable, name: str = GPU_LIBRARY) -> list:
    """Ask the GPU agent to time ``name`` on ``shapes`` too (the manifest's ``library`` field; not
    saved). Returns the library's variant id, ``lib:<name>``, as the agent will write it."""
    ids = [s.id for s in shapes]
    if not ids:
        return []
    have = list(manifest.library.get(name, []))
    manifest.library = dict(manifest.library, **{name: have + [i for i in ids if i not in have]})
    return ["lib:%s" % name]


def reference_description(kernel, target) -> str:
    cfg = reference_config(kernel, target)
    return "%s (%s)" % (LIB_REFERENCE, ", ".join("%s=%s" % kv for kv in cfg.items()))


def is_library_id(variant_id: Optional[str]) -> bool:
    return str(variant_id or "").startswith("lib:")
