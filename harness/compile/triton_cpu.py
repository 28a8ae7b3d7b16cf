"""Triton-CPU toolchain: Triton kernels' LLVM IR cross-compiled into one static ELF per variant.

Two sources of IR:

* ``--from-ir DIR``: directories of Triton-CPU dumps made on another machine (the layout users
  already have, see ``ir_import``). Each directory is one config; its IR is made portable to
  LLVM 14, compiled for the target's triple, march and VLEN with ``llc``, and linked with the
  harness's Jinja launcher and main. The variant serves the shapes the IR was specialized for
  (dtype, arguments equal to 1, divisibility, a baked-in shape); the others are pruned with
  the reason.
* Triton-CPU on this host (``--frontend triton-cpu``; the fork is not on PyPI, so it is
  optional): the harness's Triton matmul is compiled for the CPU per (config, specialization
  class) in a child process under the compile timeout; its dumps are written in the users'
  layout under the bundle's ``src/triton-ir/`` and then take the same path as imported IR.

The launcher calls the kernel in Triton-CPU's convention (its ``ty_to_cpp``): pointers as
``void*``, integer scalars at their width, fp16/bf16/fp32 scalars as ``float``, then program
ids x, y, z and grid x, y, z as ``uint32_t``; the grid is walked in parallel with OpenMP when
the target sets ``threads`` (the role ``TRITON_CPU_MAX_THREADS`` plays in Triton-CPU).

Next to every ELF: ``<hash>.elf.s`` (the kernel's functions disassembled with the vector
extension on) and, in ``named/``, a link named like the users' scripts name their binaries
(``VL256_matmul_8_16_8_g_static_O2.elf``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jinja2

from ..errors import HarnessError
from ..kernels.base import TEMPLATES
from ..space import Rule
from . import disasm, ir_import
from .common import CompileResult, first_error_line, run_compiler, run_python_child
from .cpp import compile_objects, render_main, toolchain_for


def kernel_c_params(kernel) -> list:
    """The kernel's C++ arguments as its declaration gives them (pointers, dims, strides):
    the launcher's parameters, in the order the harness's main passes them. Their names do not
    depend on the shape, so a unit shape of the kernel's problem gives them."""
    from ..shapes import make_problem_shape

    problem = kernel.problem
    return kernel.cpu_params(make_problem_shape(problem, {d: 1 for d in problem.dims}, problem.dtypes[0]))


def harness_args(kernel) -> list:
    """The names of ``kernel_c_params``: what the main passes, in order."""
    return [name for _, name in kernel_c_params(kernel)]


def aliases(kernel) -> dict:
    """Triton's pointer argument names -> the kernel's operand names (``a_ptr`` -> ``a``)."""
    return {"%s_ptr" % op.name: op.name for op in kernel.pointer_operands()}

UNIT_ARGS = ("stride_ak", "stride_bn", "stride_cn")  # equal to 1 in the NN layout: Triton drops them
NULL_ARGS = ("ws_ptr", "lock_ptr")  # the split-K workspace of the harness's Triton matmul; SPLIT_K = 1 here
LLC_TRIPLES = {"riscv64": "riscv64-unknown-linux-gnu", "aarch64": "aarch64-unknown-linux-gnu",
               "x86_64": "x86_64-unknown-linux-gnu"}
OPT_LEVEL = "O2"

INSTALL_HINT = ("Triton-CPU is not installed on this host (%s); it is not on PyPI: build it from source "
                "(git clone https://github.com/triton-lang/triton-cpu && cd triton-cpu && pip install -e python), "
                "or make the IR where it is installed and pass --from-ir DIR (directories "
                "<kernel>/<kernel>_<BM>_<BN>_<BK>_<G>/ with blk_constants.json and <kernel>.llir)")


def triton_cpu_status() -> tuple:
    """(installed, what was found): the Triton-CPU fork ships a ``cpu`` backend in triton/backends."""
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return False, "no triton package"
    backends = Path(list(spec.submodule_search_locations)[0]) / "backends"
    found = sorted(p.name for p in backends.iterdir() if (p / "compiler.py").is_file()) if backends.is_dir() else []
    if "cpu" in found:
        return True, "triton with backends %s" % ", ".join(found)
    return False, "triton here has backends %s, no cpu" % (", ".join(found) or "none")


# ---------------------------------------------------------------------------------------------
# The launcher's side of the ABI
# ---------------------------------------------------------------------------------------------
def kernel_params(ir, harness_params) -> list:
    """The launcher's call: each kernel parameter from the harness_launch argument of its name,
    converted to the type Triton-CPU passes (a C cast)."""
    available = {name for _, name in harness_params}
    out = []
    for i, p in enumerate(ir.params):
        if p.name in available:
            expr = "(%s)%s" % (p.ctype, p.name)
        elif p.name in NULL_ARGS and p.is_pointer:
            expr = "(void*)0"
        else:
            raise HarnessError("kernel argument %r (parameter %d of @%s) has no value: the harness's main passes %s"
                               % (p.name, i, ir.function, ", ".join(sorted(available))), where=str(ir.llir))
        out.append({"ctype": p.ctype, "name": "arg%d" % i, "expr": expr})
    return out


def template_env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader([str(TEMPLATES)]), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True)


def render_launcher(ir, harness_params, threads: int, env=None) -> str:
    """harness_launch(grid, harness params...) walking the grid and calling the IR's kernel."""
    env = env or template_env()
    params = [{"ctype": c, "name": n} for c, n in harness_params]
    return env.get_template("cpu/launcher.cpp.j2").render(
        entry=ir.function, params=params, kernel_params=kernel_params(ir, harness_params), threads=threads)


def riscv_mattr(march: str) -> list:
    """rv64gcv_zba -> +m,+a,+f,+d,+c,+v,+zba (llc's -mattr)."""
    march = (march or "rv64gc").lower()
    base, _, rest = march[4:].partition("_")
    feats = []
    for letter in base:
        if letter == "g":
            feats += ["m", "a", "f", "d"]
        elif letter not in ("i", "e"):
            feats.append(letter)
    feats += [x for x in rest.split("_") if x]
    return ["+" + f for f in dict.fromkeys(feats)]


def llc_flags(target) -> list:
    arch = target.resolved_arch
    flags = ["-mtriple=%s" % LLC_TRIPLES[arch], "-%s" % OPT_LEVEL, "-filetype=obj"]
    if arch == "riscv64":
        mattr = riscv_mattr(target.march)
        flags += ["-mattr=" + ",".join(mattr), "-target-abi=lp64d"]
        if target.vlen and "+v" in mattr:
            flags.append("-riscv-v-vector-bits-min=%d" % target.vlen)
    elif arch == "aarch64":
        extra = [p for p in (target.march or "").split("+")[1:] if p]
        if extra:
            flags.append("-mattr=" + ",".join("+" + p for p in extra))
    elif arch == "x86_64":
        native = platform.machine() == "x86_64" and target.arch == "native"
        flags.append("-mcpu=%s" % (target.march or ("native" if native else "x86-64")))
    return flags


# ---------------------------------------------------------------------------------------------
# IR -> object -> static ELF -> disassembly
# ---------------------------------------------------------------------------------------------
class IrElfBuilder:
    """Compiles imported IR for a target and links it with rendered C++ into static ELFs."""

    def __init__(self, target, out_dir: Path):
        if target.resolved_arch not in LLC_TRIPLES:
            raise HarnessError("target %s: no llc triple for arch %s" % (target.name, target.resolved_arch))
        self.target = dataclasses.replace(target, toolchain="clang")  # the IR path is LLVM's
        self.arch = target.resolved_arch
        self.tc = toolchain_for(self.target)
        self.llc = ir_import.llvm_tool("llc")
        self.llc_flags = llc_flags(target)
        self.llc_version = _version_line([self.llc, "--version"], "LLVM version")
        self.out_dir = Path(out_dir)
        self._lock = threading.Lock()

    def describe(self) -> dict:
        return {**self.tc.describe(), "llc": "%s %s" % (self.llc, self.llc_version), "llc_flags": self.llc_flags,
                "threads": self.target.threads, "vlen": self.target.vlen,
                "objdump": " ".join(disasm.objdump_for(self.arch))}

    def kernel_object(self, ir, digest: str, timeout: float):
        """llc the portable IR into objs/kernel-<digest>.o; returns its path or a CompileResult."""
        obj_dir = self.out_dir / "objs"
        obj_dir.mkdir(parents=True, exist_ok=True)
        obj = obj_dir / ("kernel-%s.o" % digest[:20])
        if obj.exists():
            return obj
        tmp = obj.with_name(obj.name + ".%d.%d.tmp" % (os.getpid(), threading.get_ident()))
        cmd = [self.llc] + self.llc_flags + (["-opaque-pointers"] if ir.portable.opaque_pointers else []) \
            + ["-o", str(tmp), "-"]
        try:
            proc = subprocess.run(cmd, input=ir.portable.text, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            _unlink(tmp)
            return CompileResult("compile_timeout", None, "llc took over %gs" % timeout)
        if proc.returncode != 0:
            _unlink(tmp)
            return CompileResult("compile_error", None, "llc: %s" % first_error_line(proc.stderr.replace("<stdin>", str(ir.llir))))
        os.replace(tmp, obj)
        return obj

    def support_objects(self, texts: dict, timeout: float):
        """Rendered C++ sources -> objects in objs/, compiled once per content."""
        with self._lock:
            return compile_objects(self.tc, texts, self.out_dir / "objs", timeout)

    def link(self, objects: list, artifact: Path, timeout: float) -> CompileResult:
        artifact.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.tc.cxx + self.tc.flags + [str(o) for o in objects] + self.tc.link_flags \
            + ["-o", str(artifact) + ".tmp"]
        return run_compiler(cmd, timeout, artifact)

    def build(self, ir, support: dict, artifact: Path, timeout: float) -> CompileResult:
        """Portable IR + rendered launcher/main -> artifact (+ .s next to it); launch facts set."""
        start = time.monotonic()
        digest = artifact.stem
        kobj = self.kernel_object(ir, digest, timeout)
        if isinstance(kobj, CompileResult):
            kobj.seconds = time.monotonic() - start
            return kobj
        objs = self.support_objects(support, timeout)
        if isinstance(objs, CompileResult):
            return objs
        result = self.link([kobj] + objs, artifact, max(1.0, timeout - (time.monotonic() - start)))
        result.seconds = time.monotonic() - start
        if result.status == "ok":
            result.launch.update(disasm.disassemble(artifact, ir.functions, self.arch,
                                                    artifact.with_name(artifact.name + ".s"), ir.function))
            if "disassembly_error" not in result.launch:
                result.launch["disassembly"] = str(artifact.relative_to(self.out_dir)) + ".s"
        return result


# ---------------------------------------------------------------------------------------------
# The compiler harness.build uses
# ---------------------------------------------------------------------------------------------
class TritonCpuCompiler:
    """``compile(config, shape, timeout)`` for Triton-CPU kernels, from imported IR or from
    Triton-CPU on this host."""

    def __init__(self, kernel, target, out_dir: Path, from_ir=None, jobs: int = 0):
        if target.is_gpu:
            raise HarnessError("--frontend triton-cpu builds for CPU boards; target %s is a %s GPU (its frontend "
                               "is triton)" % (target.name, target.backend))
        self.kernel = kernel
        self.target = target
        self.out_dir = Path(out_dir)
        self.from_ir = Path(from_ir) if from_ir else None
        self.triton_version = None
        if self.from_ir is None:
            installed, found = triton_cpu_status()
            if not installed:
                raise HarnessError(INSTALL_HINT % found)
            if not kernel.triton_module:
                raise HarnessError("kernel %s has no Triton source; pass --from-ir DIR" % kernel.name)
            self.triton_version = _triton_version()
        self.builder = IrElfBuilder(target, out_dir)
        self.env = template_env()
        self.irs = []
        self._by_config = {}
        if self.from_ir is not None:
            self._import(jobs)

    # ---- imported IR -------------------------------------------------------------------------
    def _import(self, jobs: int) -> None:
        dirs = ir_import.find_ir_dirs(self.from_ir, self.kernel.name)
        load = lambda d: ir_import.load_ir_dir(d, self.builder.arch, harness_args(self.kernel), aliases(self.kernel),
                                               UNIT_ARGS)
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
            self.irs = list(pool.map(load, dirs))  # the first unusable directory raises, by name
        for ir in self.irs:
            kernel_params(ir, kernel_c_params(self.kernel))  # every argument has a value, or a clear error now
            missing = [k for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if k not in ir.config]
            if missing:
                raise HarnessError("no %s among the block constants (the grid is cdiv(M, BLOCK_M) * cdiv(N, "
                                   "BLOCK_N) programs)" % " or ".join(missing), where=str(ir.dir / "blk_constants.json"))
            ir.config.setdefault("GROUP_M", 1)  # a kernel without grouping walks tiles as GROUP_M = 1 does
            self._by_config.setdefault(_key(ir.config), []).append(ir)
        self._names = _elf_names(self.irs, self.target.vlen)

    @property
    def fixed_configs(self):
        """Imported IR decides the configs (the space does not)."""
        if self.from_ir is None:
            return None
        return [dict(irs[0].config) for irs in self._by_config.values()]

    def _pick(self, config: dict, shape):
        irs = self._by_config.get(_key(config))
        if not irs:
            raise HarnessError("no imported IR has config %s" % json.dumps(config, sort_keys=True))
        values = self._values(shape)
        for ir in irs:
            if ir.serves(shape, values) is None:
                return ir
        return irs[0]

    def _values(self, shape) -> dict:
        values = {"M": shape.M, "N": shape.N, "K": shape.K}
        values.update(self.kernel.strides(shape))
        return values

    # ---- the compiler interface ----------------------------------------------------------------
    def specialization(self, config: dict, shape) -> tuple:
        if self.from_ir is None:
            return self._jit_class(config, shape)
        ir = self._pick(config, shape)
        spec = (ir.dtype, "ir=" + ir.name)
        baked = [n for n in ("M", "N", "K") if n in ir.fixed]
        if baked:  # the IR bakes in the shape: the variant is per shape
            spec += tuple("%s=%d" % (n, ir.fixed[n]) for n in baked)
        return spec

    def resource_rule(self, config: dict, shape):
        if self.from_ir is None:
            return None
        ir = self._pick(config, shape)
        why = ir.serves(shape, self._values(shape))
        return Rule("ir_specialization", why, None) if why else None

    def compile(self, config: dict, shape, timeout: float) -> CompileResult:
        start = time.monotonic()
        if self.from_ir is None:
            ir = self._generate(config, shape, timeout)
            if isinstance(ir, CompileResult):
                return ir
            name = "VL%d_%s_static_%s.elf" % (self.target.vlen, ir.name, OPT_LEVEL) if self.target.vlen \
                else "%s_static_%s.elf" % (ir.name, OPT_LEVEL)
        else:
            ir = self._pick(config, shape)
            name = self._names[ir.name]
        support = {
            "launcher.cpp": render_launcher(ir, kernel_c_params(self.kernel), self.target.threads, self.env),
            "main.cpp": render_main(self.env, self.kernel, shape, dtype=ir.dtype),
        }
        digest = self._digest(ir, support)
        artifact = self.out_dir / "artifacts" / ("%s.elf" % digest[:20])
        cached = CompileResult.load_cached(artifact)
        if cached is not None:
            self._name_link(artifact, name, cached)
            return cached
        src = self.out_dir / "src" / ir.name
        ir_import.copy_dumps(ir, src)
        result = self.builder.build(ir, support, artifact, max(1.0, timeout - (time.monotonic() - start)))
        result.seconds = time.monotonic() - start
        result.launch.update({
            "entry": ir.function,
            "params": ["%s %s" % (p.ctype, p.name) for p in ir.params],
            "fixed": ir.fixed,
            "threads": self.target.threads,
            "source": str(src.relative_to(self.out_dir)),
            "ir": str(ir.dir),
            "ir_dtype_from": ir.dtype_source,
            "ir_divisibility_from": ir.divisibility_from,
            "ir_rewrites": ir.portable.rewrites,
        })
        if result.status == "ok":
            self._name_link(artifact, name, result)
        result.save_cached(artifact)
        return result

    def _digest(self, ir, support: dict) -> str:
        h = hashlib.sha256()
        parts = ir.source_hash_parts() + [support["launcher.cpp"], support["main.cpp"],
                                          (TEMPLATES / "cpu" / "harness_dtypes.h").read_text(),
                                          json.dumps(self.builder.describe(), sort_keys=True), self.builder.arch]
        for part in parts:
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def _name_link(self, artifact: Path, name: str, result: CompileResult) -> None:
        """named/<users' name>.elf (and .s): a hard link to the content-addressed artifact."""
        named = self.out_dir / "named"
        named.mkdir(exist_ok=True)
        for src, dst in ((artifact, named / name), (artifact.with_name(artifact.name + ".s"), named / (name + ".s"))):
            if not src.exists():
                continue
            try:
                if dst.exists() and os.path.samefile(src, dst):
                    continue
                tmp = dst.with_name(dst.name + ".%d.tmp" % threading.get_ident())
                try:
                    os.link(src, tmp)
                except OSError:
                    shutil.copyfile(src, tmp)
                os.replace(tmp, dst)
            except OSError:
                pass
        result.launch["elf_name"] = "named/" + name

    def describe(self) -> dict:
        facts = {"kind": "triton-cpu", "frontend": "ir-import" if self.from_ir else "triton-cpu",
                 **self.builder.describe()}
        if self.from_ir:
            facts["ir_from"] = str(self.from_ir)
            facts["ir_dirs"] = len(self.irs)
        else:
            facts["triton_version"] = self.triton_version
        return facts

    # ---- Triton-CPU on this host -----------------------------------------------------------------
    def _jit_class(self, config: dict, shape) -> tuple:
        """What Triton's JIT keys a compile on: dtype, integers equal to 1 or divisible by 16, EVEN_K."""
        classes = []
        for name, v in self._values(shape).items():
            classes.append("%s=%s" % (name, "1" if v == 1 else "16" if v % 16 == 0 else "x"))
        return (shape.dtype,) + tuple(classes) + ("EVEN_K=%d" % (shape.K % config["BLOCK_K"] == 0),)

    def _generate(self, config: dict, shape, timeout: float):
        """Triton-CPU compiles the matmul for this class into src/triton-ir/<dir> (users' layout)."""
        spec = self._jit_class(config, shape)
        job = _triton_job(self.kernel, config, spec)
        tag = hashlib.sha256((json.dumps(job, sort_keys=True) + (self.triton_version or "")).encode()).hexdigest()[:8]
        dirname = "%s_%d_%d_%d_%d-%s" % (job["fn"].replace("_kernel", ""), config["BLOCK_M"], config["BLOCK_N"],
                                          config.get("BLOCK_K", 0), config.get("GROUP_M", 1), tag)
        out = self.out_dir / "src" / "triton-ir" / dirname
        if not (out / "blk_constants.json").exists():
            result = _run_triton_process(job, out, timeout)
            if result is not None:
                return result
        try:
            return ir_import.load_ir_dir(out, self.builder.arch, harness_args(self.kernel) + list(NULL_ARGS),
                                         aliases(self.kernel), ())
        except HarnessError as exc:
            return CompileResult("compile_error", None, str(exc)[:400])


def _key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def _elf_names(irs: list, vlen) -> dict:
    """dir name -> the users' ELF name: VL256_<kernel>_<BM>_<BN>_<BK>_g_static_O2.elf (with the group
    size kept when two directories would get the same name)."""
    prefix = "VL%d_" % vlen if vlen else ""
    short = {}
    for ir in irs:
        m = ir_import._DIRNAME.match(ir.name)
        stem = "%s_%s_%s_%s_g" % (m.group("kernel"), m.group("m"), m.group("n"), m.group("k")) if m else ir.name
        short.setdefault(stem, []).append(ir.name)
    names = {}
    for stem, dirs in short.items():
        for d in dirs:
            names[d] = "%s%s_static_%s.elf" % (prefix, stem if len(dirs) == 1 else d, OPT_LEVEL)
    return names


def _triton_version() -> str:
    try:
        from importlib.metadata import version

        return version("triton")
    except Exception:
        return "unknown"


def _version_line(cmd: list, needle: str) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True).stdout
    except OSError:
        return "unknown"
    for line in out.splitlines():
        if needle in line:
            return line.strip()
    return (out.strip().splitlines() or ["unknown"])[0]


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# ---- the Triton-CPU compile process -------------------------------------------------------------
TRITON_PTR = {"fp16": "*fp16", "bf16": "*bf16", "fp32": "*fp32"}


def _triton_job(kernel, config: dict, spec: tuple) -> dict:
    """Signature, constexprs and divisibility of the harness's Triton matmul for one JIT class."""
    module_name, fn = kernel.triton_module.split(":")
    dtype, classes = spec[0], dict(part.split("=") for part in spec[1:])
    ptr = TRITON_PTR[dtype]
    args = ["a_ptr", "b_ptr", "c_ptr", "ws_ptr", "lock_ptr", "M", "N", "K", "stride_am", "stride_ak",
            "stride_bk", "stride_bn", "stride_cm", "stride_cn"]
    types = {"a_ptr": ptr, "b_ptr": ptr, "c_ptr": ptr, "ws_ptr": "*fp32", "lock_ptr": "*i32"}
    signature, constexprs, divisible = {}, {}, []
    for index, name in enumerate(args):
        if name in types:
            signature[name] = types[name]
            if name not in NULL_ARGS:
                divisible.append(index)
        elif classes.get(name) == "1":
            signature[name] = "constexpr"
            constexprs[name] = 1
        else:
            signature[name] = "i32"
            if classes.get(name) == "16":
                divisible.append(index)
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"):
        signature[name] = "constexpr"
        constexprs[name] = config[name]
    signature["SPLIT_K"] = "constexpr"
    constexprs["SPLIT_K"] = 1
    signature["EVEN_K"] = "constexpr"
    constexprs["EVEN_K"] = classes.get("EVEN_K") == "1"
    signature["IEEE"] = "constexpr"
    constexprs["IEEE"] = dtype == "fp32"
    for name in ("TMA", "A_T", "B_T"):  # the GPU kernel's descriptor path: off on CPUs
        signature[name] = "constexpr"
        constexprs[name] = 0
    return {"module": module_name, "fn": fn, "signature": signature, "constexprs": constexprs,
            "divisible": divisible, "dtype": dtype, "config": dict(config)}


def _run_triton_process(job: dict, out: Path, timeout: float):
    """Compile in a child process group (killed whole on timeout); None when the dumps are written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=str(out.parent)))
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp / "cache"), TRITON_DISABLE_LINE_INFO="1")
    start = time.monotonic()
    done = run_python_child("harness.compile.triton_cpu", dict(job, out=str(tmp / "ir")), timeout, env)
    if done is None:
        shutil.rmtree(tmp, ignore_errors=True)
        return CompileResult("compile_timeout", None, "Triton-CPU took over %gs; killed" % timeout,
                             seconds=time.monotonic() - start)
    returncode, facts, stderr = done
    if facts is None:
        facts = {"status": "compile_error",
                 "message": first_error_line(stderr) or "Triton-CPU exited %s" % returncode}
    if facts.get("status") != "ok":
        shutil.rmtree(tmp, ignore_errors=True)
        return CompileResult("compile_error", None, facts.get("message", "compile failed")[:400],
                             seconds=time.monotonic() - start)
    shutil.rmtree(tmp / "cache", ignore_errors=True)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp / "ir", out)
    shutil.rmtree(tmp, ignore_errors=True)
    return None


def _compile_in_process(job: dict) -> dict:
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(job["module"]), job["fn"])
    attrs = {(i,): [["tt.divisibility", 16]] for i in job["divisible"]}
    signature, constexprs = dict(job["signature"]), dict(job["constexprs"])
    for name in fn.arg_names:  # the GPU kernel's tensor descriptors (TMA): None on CPUs
        if name not in signature:
            signature[name], constexprs[name] = "constexpr", None
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cpu", platform.machine(), 0), options={})
    name = compiled.metadata.name
    out = Path(job["out"])
    out.mkdir(parents=True, exist_ok=True)
    for stage in ("llir", "ttcir", "tttcir", "ttir"):
        if stage in compiled.asm:
            text = compiled.asm[stage]
            (out / ("%s.%s" % (name, stage))).write_text(text if isinstance(text, str) else text.decode())
    blk = dict(job["config"])
    blk["dtype"] = job["dtype"]
    blk["signature"] = {k: v for k, v in job["signature"].items() if v != "constexpr"}
    blk["constexprs"] = job["constexprs"]
    (out / "blk_constants.json").write_text(json.dumps(blk, indent=1))
    return {"status": "ok", "name": name, "triton_version": triton.__version__}


def _main() -> int:
    job = json.loads(sys.stdin.read())
    try:
        facts = _compile_in_process(job)
    except Exception as exc:  # a compile error is a result
        text = str(exc).strip().splitlines()
        facts = {"status": "compile_error",
                 "message": ("%s: %s" % (type(exc).__name__, " | ".join(text[-3:]) if text else ""))[:600]}
    sys.stdout.write(json.dumps(facts) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
