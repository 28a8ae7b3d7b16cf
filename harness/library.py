"""The library a tuned kernel has to beat, measured in the same run as the kernel's variants.

On CPU boards the library is the *reference build*: the kernel's own template with one fixed,
untuned config (the kernel's ``reference_config``, else the first value of every parameter of
the kernel's own space: for matmul the smallest tiles), compiled by the same toolchain with the
same flags. It is one more variant per dtype, ``lib:reference:<dtype>``, with an empty config, so
its rows are library rows (``harness.report.common``: ``variant_id`` starting with ``lib:``,
empty ``cfg_`` columns): the report computes the uplift over it and tuned files leave it out.

GPU nodes measure cuBLAS / hipBLASLt through torch on the node; that is the GPU agent's part
and nothing is built here for GPU targets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

LIB_REFERENCE = "lib:reference"


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
    per shape to ``manifest`` (not saved). Returns the variant ids added; none on GPU targets."""
    from .build import compiler_for
    from .bundle import Job, Variant, sha256_file

    shapes = list(shapes)
    if target.is_gpu or not shapes:
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
            manifest.jobs += [Job(vid, s.id, list(kernel.grid(cfg, s))) for s in shapes if s.dtype == dtype]
        added.append(vid)
    return added


def reference_description(kernel, target) -> str:
    cfg = reference_config(kernel, target)
    return "%s (%s)" % (LIB_REFERENCE, ", ".join("%s=%s" % kv for kv in cfg.items()))


def is_library_id(variant_id: Optional[str]) -> bool:
    return str(variant_id or "").startswith("lib:")
