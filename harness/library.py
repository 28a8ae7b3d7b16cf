"""The library a tuned kernel has to beat, measured in the same run as the kernel's variants.

On CPU boards the library is OpenBLAS where the build machine has it for the target's arch
(Debian's ``libopenblas-dev``, ``libopenblas-dev:arm64``; ``openblas_for``): fp32 shapes run
``cblas_sgemm`` through templates/cpu/openblas_launcher.cpp.j2 under the same main as every
variant (the answer checked against the reference, then timed the same way), statically linked
by the target's toolchain like the variants; one variant ``lib:openblas:fp32``. OpenBLAS has no
fp16 GEMM (sgemm on converted data would not be the library), and Debian builds it without
bfloat16 (``cblas_sbgemm`` is declared but absent); those dtypes, and arches without OpenBLAS
(riscv64: not a Debian bookworm architecture), fall back to the reference build, and the build
says so in one line each.

The fallback is the *reference build*: the kernel's own template with one fixed,
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
LIB_OPENBLAS = "lib:openblas"
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


def openblas_for(target):
    """(cblas.h folder, libopenblas.a, None) for the target's arch, or (None, None, why not)."""
    from .compile.cpp import CROSS_TRIPLES

    triple = CROSS_TRIPLES.get(target.resolved_arch)
    if triple is None:
        return None, None, "no OpenBLAS for %s" % target.resolved_arch
    for sub in ("openblas-pthread", "openblas-openmp", "openblas-serial", ""):
        lib = Path("/usr/lib") / triple / sub / "libopenblas.a"
        inc = Path("/usr/include") / triple / sub
        if lib.exists() and (inc / "cblas.h").exists():
            return inc, lib, None
    return None, None, ("no static OpenBLAS for %s here (Debian: libopenblas-dev:%s; bookworm has no riscv64)"
                        % (target.resolved_arch, _debian_arch(target.resolved_arch)))


def _debian_arch(arch: str) -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(arch, arch)


def openblas_id(dtype: str) -> str:
    return "%s:%s" % (LIB_OPENBLAS, dtype)


def add_library(kernel, target, shapes: Iterable, manifest, bundle: Path, compile_timeout: float = 120.0,
                frontend: str = "auto", from_ir=None, say=print) -> list:
    """The library to beat for every shape: GPU: ``request_gpu_library``; CPU: OpenBLAS for the
    dtypes it serves, the reference build for the rest (``say`` gets one line per fallback).
    Adds variants and jobs to ``manifest`` (not saved); returns the variant ids added."""
    shapes = list(shapes)
    if target.is_gpu:
        return request_gpu_library(manifest, shapes, getattr(kernel, "gpu_library", GPU_LIBRARY))
    if kernel.cpu_library != "openblas":  # the kernel declares what OpenBLAS computes for it (the matrix product)
        return add_reference(kernel, target, shapes, manifest, bundle, compile_timeout=compile_timeout,
                             frontend=frontend, from_ir=from_ir)
    inc, lib, why = openblas_for(target)
    blas = [s for s in shapes if s.dtype == "fp32"] if lib else []
    rest = [s for s in shapes if s not in blas]
    added = []
    if blas:
        added += add_openblas(kernel, target, blas, manifest, Path(bundle), inc, lib, compile_timeout)
    for dtype in sorted({s.dtype for s in rest}):
        if why:
            say("library for %s shapes: %s; lib:reference instead" % (dtype, why))
        elif dtype == "fp16":
            say("library for fp16 shapes: OpenBLAS has no fp16 GEMM (sgemm on converted data would not be the "
                "library); lib:reference instead")
        else:
            say("library for %s shapes: this OpenBLAS has no %s GEMM (cblas_sbgemm is not built in); "
                "lib:reference instead" % (dtype, dtype))
    if rest:
        added += add_reference(kernel, target, rest, manifest, bundle, compile_timeout=compile_timeout,
                               frontend=frontend, from_ir=from_ir)
    return added


def add_openblas(kernel, target, shapes: list, manifest, bundle: Path, inc: Path, lib: Path,
                 compile_timeout: float = 120.0) -> list:
    """Build ``lib:openblas:fp32`` (the matmul main + cblas_sgemm, linked statically with the
    target's toolchain) and add it with one job per shape to ``manifest``."""
    import hashlib
    import time

    import jinja2

    from .bundle import Job, Variant, sha256_file
    from .compile.common import CompileResult, run_compiler
    from .compile.cpp import compile_objects, render_main, toolchain_for
    from .kernels.base import TEMPLATES

    tc = toolchain_for(target)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    params = [{"ctype": c, "name": n} for c, n in kernel.cpu_params(shapes[0])]
    texts = {"main.cpp": render_main(env, kernel, shapes[0]),
             "openblas_launcher.cpp": env.get_template("cpu/openblas_launcher.cpp.j2").render(
                 params=params, threads=max(1, target.threads))}
    tc_inc = type(tc)(tc.name, tc.cxx, tc.flags + ["-isystem", str(inc)], tc.link_flags, tc.version)
    h = hashlib.sha256(repr((sorted(texts.items()), tc_inc.describe(), str(lib), lib.stat().st_size,
                             lib.stat().st_mtime)).encode()).hexdigest()
    artifact = bundle / "artifacts" / ("%s.elf" % h[:20])
    started = time.time()
    res = CompileResult.load_cached(artifact)
    if res is None:
        objs = compile_objects(tc_inc, texts, bundle / "objs", compile_timeout)
        if isinstance(objs, CompileResult):
            res = objs
        else:
            artifact.parent.mkdir(parents=True, exist_ok=True)
            cmd = tc.cxx + tc.flags + objs + [str(lib)] + tc.link_flags + ["-lpthread", "-lm", "-o",
                                                                           str(artifact) + ".tmp"]
            res = run_compiler(cmd, compile_timeout, artifact)
            res.launch = {"entry": "cblas_sgemm", "library": "OpenBLAS %s" % lib, "threads": max(1, target.threads)}
            res.save_cached(artifact)
    vid = openblas_id("fp32")
    ok = res.status == "ok"
    variant = Variant(id=vid, config={}, dtype="fp32", specialization=["fp32"], status=res.status,
                      artifact=str(Path(res.artifact).relative_to(bundle)) if ok else None,
                      sha256=sha256_file(res.artifact) if ok else None,
                      message=res.message if not ok else "", launch=res.launch,
                      compile_seconds=round(time.time() - started, 3))
    manifest.variants = [v for v in manifest.variants if v.id != vid] + [variant]
    manifest.jobs = [j for j in manifest.jobs if j.variant != vid]
    if ok:
        manifest.jobs += [Job(vid, s.id, [1, 1, 1]) for s in shapes]
    return [vid]


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
