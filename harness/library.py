"""The library a tuned kernel has to beat, measured in the same run as the kernel's variants.

On CPU boards the library is OpenBLAS (``openblas_for``): on x86-64, scipy-openblas32 from PyPI
(OpenBLAS 0.3.34, a shared library carried in the bundle) where it is installed, else Debian's
static ``libopenblas-dev`` of the arch (``libopenblas-dev:arm64`` for aarch64 boards). fp32 shapes
run ``cblas_sgemm`` (``cblas_sgemv`` where M or N is 1, as numpy does) through
templates/cpu/openblas_launcher.cpp.j2 under the same main as every variant (the answer checked
against the reference, then timed the same way); one variant ``lib:openblas:fp32``. The launcher
prints which OpenBLAS ran and the kernel core it picked at run time
(``openblas_get_config()``, ``openblas_get_corename()``) on one line ``HARNESS_LIBRARY ...``; the
agent puts it in the row's ``library`` column and every report names it. OpenBLAS has no fp16
GEMM (sgemm on converted data would not be the library); ``cblas_sbgemm`` is absent from both
builds (Debian builds without BFLOAT16; scipy-openblas32 0.3.34 exports no sbgemm); those dtypes,
and arches without OpenBLAS (riscv64: ``RISCV64_WHY``), fall back to the reference build, and the
build says so in one line each.

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

import os
import platform
from dataclasses import dataclass
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


@dataclass(frozen=True)
class OpenBlas:
    """One OpenBLAS build to link the library row against.

    ``shared``: a shared library (scipy-openblas32's ``libscipy_openblas.so``) that travels in the
    bundle next to the ELF (``artifacts/lib-<hash>/``, found through the ELF's rpath); else a static
    archive linked into the ELF. ``prefix``: what the build puts before every symbol (``scipy_``)."""

    include: Path
    lib: Path
    shared: bool = False
    prefix: str = ""
    source: str = ""  # where it came from, for the build's line and the launch record


# Why riscv64 has no OpenBLAS row: bookworm ships no riscv64 packages (riscv64 became a Debian release
# architecture with trixie), and scipy-openblas32 0.3.34's riscv64 wheel (RVV cores
# RISCV64_ZVL128B / ZVL256B) asks for GLIBC_2.38 symbols, newer than bookworm's riscv64 cross glibc.
RISCV64_WHY = ("no OpenBLAS for riscv64 here (Debian bookworm has no riscv64 packages; scipy-openblas32's "
               "riscv64 build needs glibc 2.38, bookworm's riscv64 cross glibc is 2.36)")


def openblas_for(target):
    """(OpenBlas, None) for the target's arch, or (None, why not).

    x86-64 targets built on an x86-64 machine take scipy-openblas32 (PyPI, OpenBLAS 0.3.34) when
    it is installed: a current OpenBLAS picks the right kernels for current CPUs at run time, where
    Debian bookworm's 0.3.21 falls back to its ``Prescott`` (SSE3) core on CPUs newer than it
    (measured on an AVX-512 Xeon: 22-31 GFLOP/s instead of 130-158; docs/notes). Otherwise, and
    for aarch64 (Debian's 0.3.21 picks ``neoversen1``, ``cortexa72`` or its generic NEON ``armv8``
    from the CPU's MIDR, under qemu-aarch64 too), Debian's static ``libopenblas.a`` of the arch."""
    from .compile.cpp import CROSS_TRIPLES

    arch = target.resolved_arch
    triple = CROSS_TRIPLES.get(arch)
    if triple is None:
        return None, "no OpenBLAS for %s" % arch
    if arch == "x86_64" and platform.machine() == "x86_64":
        current = scipy_openblas()
        if current is not None:
            return current, None
    for sub in ("openblas-pthread", "openblas-openmp", "openblas-serial", ""):
        lib = Path("/usr/lib") / triple / sub / "libopenblas.a"
        inc = Path("/usr/include") / triple / sub
        if lib.exists() and (inc / "cblas.h").exists():
            return OpenBlas(inc, lib, source="Debian libopenblas-dev:%s" % _debian_arch(arch)), None
    if arch == "riscv64":
        return None, RISCV64_WHY
    return None, "no static OpenBLAS for %s here (Debian: libopenblas-dev:%s)" % (arch, _debian_arch(arch))


def scipy_openblas() -> Optional[OpenBlas]:
    """scipy-openblas32 of this machine's Python (``pip install scipy-openblas32``), or None."""
    try:
        import scipy_openblas32 as pkg
    except ImportError:
        return None
    lib_dir, inc = Path(pkg.get_lib_dir()), Path(pkg.get_include_dir())
    lib = lib_dir / ("lib%s.so" % pkg.get_library())
    if not lib.is_file() or not (inc / "cblas.h").is_file():
        return None
    return OpenBlas(inc, lib, shared=True, prefix="scipy_",
                    source="scipy-openblas32 %s" % getattr(pkg, "__version__", "?"))


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
    blas_build, why = openblas_for(target)
    blas = [s for s in shapes if s.dtype == "fp32"] if blas_build else []
    if blas and not blas_build.shared and target.resolved_arch == "x86_64":
        say("library: %s, OpenBLAS 0.3.21, runs a generic core on x86-64 CPUs newer than it (the row names "
            "the core it ran); pip install scipy-openblas32 for a current one" % blas_build.source)
    rest = [s for s in shapes if s not in blas]
    added = []
    if blas:
        added += add_openblas(kernel, target, blas, manifest, Path(bundle), blas_build, compile_timeout)
    for dtype in sorted({s.dtype for s in rest}):
        if why:
            say("library for %s shapes: %s; lib:reference instead" % (dtype, why))
        elif dtype == "fp16":
            say("library for fp16 shapes: OpenBLAS has no fp16 GEMM (sgemm on converted data would not be the "
                "library); lib:reference instead")
        else:
            say("library for %s shapes: %s has no %s GEMM (cblas_sbgemm is not built in); "
                "lib:reference instead" % (dtype, blas_build.source, dtype))
    if rest:
        added += add_reference(kernel, target, rest, manifest, bundle, compile_timeout=compile_timeout,
                               frontend=frontend, from_ir=from_ir)
    return added


def add_openblas(kernel, target, shapes: list, manifest, bundle: Path, blas: OpenBlas,
                 compile_timeout: float = 120.0) -> list:
    """Build ``lib:openblas:fp32`` (the matmul main + cblas_sgemm, cblas_sgemv where M or N is 1,
    linked with the target's toolchain) and add it with one job per shape to ``manifest``.
    A shared OpenBLAS is copied into the bundle (``artifacts/lib-<hash>/``, listed with its hash in
    the variant's ``launch["libs"]`` so push sends it and the agent checks it) and the ELF finds it
    through its rpath (``$ORIGIN/lib-<hash>``); the rest of the ELF stays static where it can."""
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
                 params=params, threads=max(1, target.threads), prefix=blas.prefix)}
    tc_inc = type(tc)(tc.name, tc.cxx, tc.flags + ["-isystem", str(blas.include)], tc.link_flags, tc.version)
    libs, lib_dir = [], None
    if blas.shared:
        lib_sha = sha256_file(blas.lib)
        lib_dir = "lib-%s" % lib_sha[:16]
        rel = "artifacts/%s/%s" % (lib_dir, blas.lib.name)
        _copy_atomic(blas.lib, bundle / rel)
        libs = [{"path": rel, "sha256": lib_sha}]
        identity = lib_sha
    else:
        identity = (str(blas.lib), blas.lib.stat().st_size, blas.lib.stat().st_mtime)
    h = hashlib.sha256(repr((sorted(texts.items()), tc_inc.describe(), identity)).encode()).hexdigest()
    artifact = bundle / "artifacts" / ("%s.elf" % h[:20])
    started = time.time()
    res = CompileResult.load_cached(artifact)
    if res is None:
        objs = compile_objects(tc_inc, texts, bundle / "objs", compile_timeout)
        if isinstance(objs, CompileResult):
            res = objs
        else:
            artifact.parent.mkdir(parents=True, exist_ok=True)
            if blas.shared:  # libc and the loader come from the board; the C++ runtime is linked in
                link = [f for f in tc.link_flags if f != "-static"] + [
                    "-static-libstdc++", "-static-libgcc", str(bundle / libs[0]["path"]),
                    "-Wl,-rpath,$ORIGIN/%s" % lib_dir, "-Wl,--enable-new-dtags"]
                cmd = tc.cxx + tc.flags + objs + link
            else:
                cmd = tc.cxx + tc.flags + objs + [str(blas.lib)] + tc.link_flags
            res = run_compiler(cmd + ["-lpthread", "-lm", "-o", str(artifact) + ".tmp"], compile_timeout, artifact)
            res.launch = {"entry": "cblas_sgemm", "library": "OpenBLAS (%s)" % blas.source,
                          "threads": max(1, target.threads)}
            if libs:
                res.launch["libs"] = libs
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


def _copy_atomic(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` unless it is there already (the name holds its content's hash)."""
    import shutil

    if dst.is_file() and dst.stat().st_size == src.stat().st_size:
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


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
