"""C++ toolchain: the kernel rendered from Jinja, compiled natively or cross-compiled to a static ELF.

One ELF per (config, dtype); it serves every shape (sizes, layout and grid are arguments).
The launcher and main are compiled once per (target, dtype) and linked into every ELF.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import jinja2

from ..errors import HarnessError
from ..kernels.base import TEMPLATES
from .common import CompileResult, first_error_line, run_compiler

MATMUL_PARAMS = [
    ("const void*", "a"), ("const void*", "b"), ("void*", "c"),
    ("int32_t", "M"), ("int32_t", "N"), ("int32_t", "K"),
    ("int32_t", "stride_am"), ("int32_t", "stride_ak"), ("int32_t", "stride_bk"),
    ("int32_t", "stride_bn"), ("int32_t", "stride_cm"), ("int32_t", "stride_cn"),
]
ENTRY = "matmul_kernel"
CROSS_TRIPLES = {"riscv64": "riscv64-linux-gnu", "aarch64": "aarch64-linux-gnu", "x86_64": "x86_64-linux-gnu"}


@dataclass
class Toolchain:
    """How to compile and link for one target."""

    name: str  # "gcc" or "clang"
    cxx: list  # the compiler command
    flags: list  # compile flags (arch, vector length, optimization)
    link_flags: list
    version: str

    def describe(self) -> dict:
        return {"name": self.name, "cxx": " ".join(self.cxx), "flags": self.flags,
                "link_flags": self.link_flags, "version": self.version}


def toolchain_for(target) -> Toolchain:
    """Pick and check the compiler for a target; a missing one is a clear error."""
    arch = target.resolved_arch
    native = arch == platform.machine()
    choice = target.toolchain
    if choice == "auto":
        choice = "gcc" if native else "clang"
    flags = ["-O3", "-std=c++17", "-fno-exceptions"] + list(target.cflags)
    link = ["-static"]
    if target.threads > 1:
        flags.append("-fopenmp")
        link.append("-fopenmp")
    if choice == "clang":
        cxx = [_need("clang++", "Debian package clang")]
        if not native:
            triple = CROSS_TRIPLES[arch]
            cxx += ["--target=%s" % triple]
            _need("%s-ld" % triple, "Debian package g++-%s" % triple)
            link += ["-fuse-ld=bfd"]  # lld 14 mislinks riscv64; GNU ld from the cross binutils
            if target.threads > 1:
                flags[-1] = link[-2] = "-fopenmp=libgomp"
    elif choice == "gcc":
        if native:
            cxx = [_need("g++", "Debian package g++")]
        else:
            triple = CROSS_TRIPLES[arch]
            cxx = [_need("%s-g++" % triple, "Debian package g++-%s" % triple)]
    else:
        raise HarnessError("target %s: toolchain %r is not gcc, clang or auto" % (target.name, choice))
    if arch == "riscv64":
        flags += ["-march=%s" % (target.march or "rv64gc"), "-mabi=lp64d"]
        if target.vlen and choice == "clang":
            flags += ["-mllvm", "-riscv-v-vector-bits-min=%d" % target.vlen]
    elif target.march:
        flags += ["-march=%s" % target.march]
    elif native and arch == "x86_64":
        flags += ["-march=native"]
    version = subprocess.run(cxx + ["--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return Toolchain(choice, cxx, flags, link, version)


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise HarnessError("compiler %s not found; install the %s" % (tool, package))
    return tool


class CppCompiler:
    """Renders and compiles the C++ kernel for every config of a build."""

    def __init__(self, kernel, target, out_dir: Path, template_dirs=()):
        self.kernel = kernel
        self.target = target
        self.tc = toolchain_for(target)
        self.out_dir = out_dir
        dirs = [str(Path(d)) for d in template_dirs] + [str(kernel.cpu_template.parent.parent),
                                                         str(TEMPLATES)]
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(dirs),
                                      undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        self.params = [{"ctype": c, "name": n} for c, n in MATMUL_PARAMS]
        self._support_lock = threading.Lock()

    def describe(self) -> dict:
        return {"kind": "cpp", **self.tc.describe(), "threads": self.target.threads, "vlen": self.target.vlen}

    def _kernel_template_name(self) -> str:
        t = self.kernel.cpu_template
        return "%s/%s" % (t.parent.name, t.name)

    def render_kernel(self, config: dict, dtype: str) -> str:
        text = ", ".join("%s=%s" % kv for kv in sorted(config.items()))
        return self.env.get_template(self._kernel_template_name()).render(
            entry=ENTRY, dtype=dtype, config_text=text, **config)

    def render_support(self, dtype: str) -> dict:
        ctx = dict(entry=ENTRY, params=self.params, threads=self.target.threads, dtype=dtype)
        return {
            "launcher.cpp": self.env.get_template("cpu/launcher.cpp.j2").render(**ctx),
            "main.cpp": self.env.get_template("cpu/matmul_main.cpp.j2").render(**ctx),
        }

    def artifact_hash(self, source: str, dtype: str) -> str:
        support = self.render_support(dtype)
        h = hashlib.sha256()
        for part in (source, support["launcher.cpp"], support["main.cpp"], _header_text(),
                     repr(self.tc.describe()), self.target.resolved_arch):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def specialization(self, config: dict, shape) -> tuple:
        """Sizes, layout and grid are run-time arguments: one ELF per (config, dtype)."""
        return (shape.dtype,)

    def resource_rule(self, config: dict, shape):
        return None

    def compile(self, config: dict, shape, timeout: float) -> CompileResult:
        dtype = shape.dtype
        source = self.render_kernel(config, dtype)
        digest = self.artifact_hash(source, dtype)
        artifact = self.out_dir / "artifacts" / ("%s.elf" % digest[:20])
        cached = CompileResult.load_cached(artifact)
        if cached:
            return cached
        src_dir = self.out_dir / "src"
        src_dir.mkdir(parents=True, exist_ok=True)
        kernel_src = src_dir / ("%s.cpp" % digest[:20])
        kernel_src.write_text(source)
        with self._support_lock:
            support_objs = self._support_objects(dtype, timeout)
        if isinstance(support_objs, CompileResult):
            return support_objs
        artifact.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.tc.cxx + self.tc.flags + ["-I", str(TEMPLATES / "cpu"), str(kernel_src)] + support_objs \
            + self.tc.link_flags + ["-o", str(artifact) + ".tmp"]
        result = run_compiler(cmd, timeout, artifact)
        result.launch = {"entry": ENTRY, "params": [p["ctype"] + " " + p["name"] for p in self.params],
                         "threads": self.target.threads, "source": str(kernel_src.relative_to(self.out_dir))}
        result.save_cached(artifact)
        return result

    def _support_objects(self, dtype: str, timeout: float):
        """launcher.o and main.o for this dtype, compiled once and reused."""
        return compile_objects(self.tc, self.render_support(dtype), self.out_dir / "objs", timeout)


def compile_objects(tc: Toolchain, texts: dict, obj_dir: Path, timeout: float):
    """Rendered C++ sources (name -> text) -> objects in obj_dir, each compiled once per content
    (its text, the dtype header, the toolchain). Returns their paths, or the CompileResult of the
    first that fails."""
    obj_dir.mkdir(parents=True, exist_ok=True)
    objs = []
    for name, text in texts.items():
        h = hashlib.sha256((text + _header_text() + repr(tc.describe())).encode()).hexdigest()[:20]
        obj = obj_dir / ("%s-%s.o" % (Path(name).stem, h))
        if not obj.exists():
            src = obj_dir / ("%s-%s.cpp" % (Path(name).stem, h))
            src.write_text(text)
            tmp = obj.with_suffix(".o.%d.tmp" % os.getpid())
            cmd = tc.cxx + tc.flags + ["-I", str(TEMPLATES / "cpu"), "-c", str(src), "-o", str(tmp)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                return CompileResult("compile_timeout", None, "compiling %s took over %gs" % (name, timeout))
            if proc.returncode != 0:
                return CompileResult("compile_error", None, first_error_line(proc.stderr))
            os.replace(tmp, obj)
        objs.append(str(obj))
    return objs


def _header_text() -> str:
    return (TEMPLATES / "cpu" / "harness_dtypes.h").read_text()
