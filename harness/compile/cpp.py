"""C++ toolchain: the kernel rendered from Jinja, compiled natively or cross-compiled to a static ELF.

One ELF per (config, dtype); it serves every shape (sizes, layout and grid are arguments).
The launcher and main are rendered from the kernel's declaration (its operands, scalars and
checks) and compiled once per (target, kernel, dtype), then linked into every ELF.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from pathlib import Path

import jinja2

from remote_agent.contract import DTYPE_BYTES, NAN_BITS

from ..errors import HarnessError
from ..kernels.base import TEMPLATES
from .common import CompileResult, first_error_line, run_compiler
from .toolchain import CROSS_TRIPLES, Toolchain, toolchain_for  # noqa: F401 - callers import them from here too

CHECKABLE = ("fp32", "fp64", "fp16", "bf16")  # dtypes the rendered main reads as numbers
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
        self._support_lock = threading.Lock()

    def describe(self) -> dict:
        return {"kind": "cpp", **self.tc.describe(), "threads": self.target.threads, "vlen": self.target.vlen}

    def _kernel_template_name(self) -> str:
        t = self.kernel.cpu_template
        return "%s/%s" % (t.parent.name, t.name)

    def render_kernel(self, config: dict, dtype: str) -> str:
        from ..cpu_facts import vector_isa

        text = ", ".join("%s=%s" % kv for kv in sorted(config.items()))
        isa = vector_isa(self.target)  # the vector width and registers the template unrolls for
        return self.env.get_template(self._kernel_template_name()).render(
            entry=self.kernel.entry, dtype=dtype, config_text=text, isa=isa, threads=self.target.threads, **config)

    def render_support(self, shape) -> dict:
        params = [{"ctype": c, "name": n} for c, n in self.kernel.cpu_params(shape)]
        ctx = dict(entry=self.kernel.entry, params=params, threads=self.target.threads, dtype=shape.dtype)
        return {
            "launcher.cpp": self.env.get_template("cpu/launcher.cpp.j2").render(**ctx),
            "main.cpp": render_main(self.env, self.kernel, shape),
        }

    def artifact_hash(self, source: str, shape) -> str:
        support = self.render_support(shape)
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
        digest = self.artifact_hash(source, shape)
        artifact = self.out_dir / "artifacts" / ("%s.elf" % digest[:20])
        cached = CompileResult.load_cached(artifact)
        if cached:
            return cached
        src_dir = self.out_dir / "src"
        src_dir.mkdir(parents=True, exist_ok=True)
        kernel_src = src_dir / ("%s.cpp" % digest[:20])
        kernel_src.write_text(source)
        artifact.parent.mkdir(parents=True, exist_ok=True)
        reused = CompileResult.reuse(artifact)  # compiled in another project or tune
        if reused:
            return reused
        with self._support_lock:
            support_objs = self._support_objects(shape, timeout)
        if isinstance(support_objs, CompileResult):
            return support_objs
        artifact.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.tc.cxx + self.tc.flags + ["-I", str(TEMPLATES / "cpu"), str(kernel_src)] + support_objs \
            + self.tc.link_flags + ["-o", str(artifact) + ".tmp"]
        result = run_compiler(cmd, timeout, artifact)
        result.launch = {"entry": self.kernel.entry,
                         "params": ["%s %s" % p for p in self.kernel.cpu_params(shape)],
                         "threads": self.target.threads, "source": str(kernel_src.relative_to(self.out_dir))}
        result.save_cached(artifact)
        return result

    def _support_objects(self, shape, timeout: float):
        """launcher.o and main.o for this shape's dtype, compiled once and reused."""
        return compile_objects(self.tc, self.render_support(shape), self.out_dir / "objs", timeout)


def render_main(env, kernel, shape, dtype: str = None) -> str:
    """The C++ main of a kernel (templates/cpu/main.cpp.j2) for the problem dtype of ``shape``:
    its operands in declaration order, the scalar arguments, the checks. The agent's ELF runner
    passes the files, element counts and scalar values in the same order, from the manifest."""
    dtype = dtype or shape.dtype
    operands = []
    for op in kernel.operands:
        op_dtype = op.dtype_of(dtype)
        if op_dtype not in DTYPE_BYTES:
            raise HarnessError("kernel %s: operand %s has dtype %s, which the harness does not know (known: %s)"
                               % (kernel.name, op.name, op_dtype, ", ".join(DTYPE_BYTES)))
        operands.append({"name": op.name, "role": op.role, "dtype": op_dtype, "elem_bytes": DTYPE_BYTES[op_dtype],
                         "nan_bits": "0x%X" % NAN_BITS.get(op_dtype, 0)})
    index = {op["name"]: i for i, op in enumerate(operands)}
    checks = []
    for c in kernel.checks:
        for name in (c.output, c.reference):
            if operands[index[name]]["dtype"] not in CHECKABLE:
                raise HarnessError("kernel %s: the CPU main checks %s operands only; %s is %s" % (
                    kernel.name, ", ".join(CHECKABLE), name, operands[index[name]]["dtype"]))
        checks.append({"output": c.output, "reference": c.reference, "output_index": index[c.output],
                       "reference_index": index[c.reference], "output_dtype": operands[index[c.output]]["dtype"],
                       "reference_dtype": operands[index[c.reference]]["dtype"]})
    scalars = list(kernel.scalars(shape))
    params = [{"ctype": c, "name": n} for c, n in kernel.cpu_params(shape)]
    call_args = ["op_%d" % index[op.name] for op in kernel.pointer_operands()] + \
        ["sc_%d" % i for i in range(len(scalars))]
    return env.get_template("cpu/main.cpp.j2").render(params=params, operands=operands, scalars=scalars,
                                                      checks=checks, call_args=call_args)


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
            tmp = obj.with_suffix(".o.%d.%d.tmp" % (os.getpid(), threading.get_ident()))
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
