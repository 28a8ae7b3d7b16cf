"""Triton toolchain: cubin (cuda sm80, sm90, ...) and hsaco (hip gfx90a, gfx942, ...) built on a
host with no GPU, one artifact per (config, specialization class).

The specialization is what Triton's JIT would key its cache on: integer arguments equal to 1
become constants, integers divisible by 16 (and every pointer: the agent's buffers are 256-byte
aligned) get ``tt.divisibility=16``, and EVEN_K says whether K needs masks. Shapes with the same
class share one artifact; the grid and the sizes are launch arguments.

Each compile runs in its own ``python -m harness.compile.triton_gpu`` process (in its own
process group, killed whole on timeout: Triton holds the GIL while it compiles and ptxas is a
child of its own), with a private ``TRITON_CACHE_DIR`` removed afterwards (the bundle's
content-addressed artifacts are the cache). The process writes the binary and a JSON of launch
facts; the artifact is named by a hash of everything that went in (kernel source, signature,
constants, divisibility, options, target, Triton version). Line info is left out of cubins
unless HARNESS_TRITON_LINEINFO=1 (it doubles their size; ncu's source view wants it).

A config whose source module is CUDA C++ (``LANGUAGE = "cuda"``) takes the same path with a job
of defines instead of a signature, compiled by NVRTC in that process (harness/compile/cuda_cpp.py).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from remote_agent.contract import DTYPE_BYTES

from ..errors import HarnessError
from ..space import Rule
from .common import CompileResult, run_python_child

# Options a config may carry that are compile options rather than constexpr arguments.
CUDA_OPTIONS = ("num_warps", "num_stages", "maxnreg", "num_ctas")
HIP_OPTIONS = ("num_warps", "num_stages", "waves_per_eu", "matrix_instr_nonkdim", "kpack")
TRITON_TYPES = {"fp16": "*fp16", "bf16": "*bf16", "fp32": "*fp32", "fp8e4m3fn": "*fp8e4nv",
                "fp8e4m3fnuz": "*fp8e4b8", "i32": "*i32", "u8": "*u8",
                "e8m0": "*i8"}  # e8m0 scales as their bits: Triton has no e8m0 pointer type
# bytes per value of shape dtypes stored packed (mxfp4: two e2m1 codes a byte)
PACKED_DTYPE_BYTES = {"mxfp4": 0.5}
# the split-K workspace and tile counters a GEMM kernel may take besides its operands
WORKSPACE_TYPES = {"ws_ptr": "*fp32", "lock_ptr": "*i32"}

# The conservative reference: small tiles, no specialization, masks everywhere, fp32 output.
REFERENCE_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "SPLIT_K": 1,
                    "num_warps": 4, "num_stages": 2}
SUPPORT_BLOCK = 1024


def triton_version() -> str:
    try:
        from importlib.metadata import version

        return version("triton")
    except Exception:  # not installed: a clear error at compile time
        return "missing"


def warp_size_for(backend: str, arch: str) -> int:
    if backend == "cuda":
        return 32
    # gfx9 (CDNA: gfx908, gfx90a, gfx942, gfx950) runs wave64; RDNA (gfx10+) wave32
    major = int(arch[3:-2]) if arch.startswith("gfx") else 9
    return 64 if major < 10 else 32


class TritonGpuCompiler:
    """Builds every (config, specialization) of a Triton kernel for one GPU target."""

    def __init__(self, kernel, target, out_dir: Path):
        if not kernel.triton_module:
            raise HarnessError("kernel %s has no Triton source for GPU targets" % kernel.name)
        if target.backend not in ("cuda", "hip"):
            raise HarnessError("target %s: backend %s is not a GPU backend" % (target.name, target.backend))
        self.kernel = kernel
        self.target = target
        self.out_dir = Path(out_dir)
        self.backend = target.backend
        self.arch = str(target.gpu_arch)
        if self.backend == "cuda":
            if not self.arch.isdigit():
                raise HarnessError("target %s: cuda gpu_arch must be a compute capability such as 80 or 90, "
                                   "got %r" % (target.name, self.arch))
        elif not self.arch.startswith("gfx"):
            raise HarnessError("target %s: hip gpu_arch must be a gfx name such as gfx942, got %r"
                               % (target.name, self.arch))
        self.warp_size = warp_size_for(self.backend, self.arch)
        self.ext = "cubin" if self.backend == "cuda" else "hsaco"
        self.main = kernel_source(kernel.triton_module)  # its module also has the support kernels
        self._sources = {kernel.triton_module: self.main}
        self.version = triton_version()
        self._dtypes_seen = set()
        self._lock = threading.Lock()
        self._support = None

    def source(self, config: dict) -> "KernelSource":
        """The kernel function ``config`` compiles to (the kernel's triton_source)."""
        spec = self.kernel.triton_source(config)
        with self._lock:
            if spec not in self._sources:
                try:
                    self._sources[spec] = kernel_source(spec)
                except ImportError as exc:  # a Triton without Gluon (before 3.5), for the Gluon kernel
                    raise HarnessError("kernel %s: config %s compiles to %s, which this Triton (%s) cannot import: "
                                       "%s" % (self.kernel.name, json.dumps(config, sort_keys=True), spec,
                                               self.version, exc))
            return self._sources[spec]

    # ---- what a variant is specialized for -------------------------------------------------
    def _int_args(self, shape) -> dict:
        """The integer arguments of a shape: the problem's dimensions, then the kernel's strides."""
        return self.kernel.scalars(shape)

    def pointer_types(self, dtype: str, out_dtype=None) -> dict:
        """Triton pointer type of every pointer argument for a shape of ``dtype``: each operand's
        declared dtype (outputs: ``out_dtype`` when given), the split-K workspace and counters."""
        operands = [op for op in getattr(self.kernel, "operands", ()) if op.role != "reference"]
        if not operands:  # a kernel without a declaration: the matmul's A, B, C of the shape's dtype
            types = {"a_ptr": TRITON_TYPES[dtype], "b_ptr": TRITON_TYPES[dtype],
                     "c_ptr": TRITON_TYPES[out_dtype or dtype]}
        else:
            types = {"%s_ptr" % op.name: TRITON_TYPES[out_dtype if out_dtype and op.role == "output"
                                                      else op.dtype_of(dtype)] for op in operands}
        types.update(WORKSPACE_TYPES)
        return types

    def operand_dtypes(self, dtype: str, role: str) -> set:
        """The dtypes of a shape's inputs or outputs (``role``) for a shape of ``dtype``."""
        operands = getattr(self.kernel, "operands", ())
        if not operands:
            return {dtype}
        return {op.dtype_of(dtype) for op in operands if op.role == role}

    def specialization(self, config: dict, shape) -> tuple:
        """The JIT's cache key for this shape: dtype, the class of every integer argument
        (``1``: a constant, ``16``: divisible by 16, ``x``: neither) and EVEN_K."""
        source = self.source(config)
        ints = self._int_args(shape)
        classes = []
        for name in source.args:
            if name in ints:
                v = ints[name]
                classes.append("%s=%s" % (name, "1" if v == 1 else "16" if v % 16 == 0 else "x"))
        if "EVEN_K" not in source.takes:
            return (shape.dtype,) + tuple(classes)
        even_k = shape.K % config["BLOCK_K"] == 0  # split-K splits whole BLOCK_K steps
        return (shape.dtype,) + tuple(classes) + ("EVEN_K=%d" % even_k,)

    def _spec_dict(self, spec) -> dict:
        return dict(part.split("=") for part in spec[1:])

    # ---- pruning on device resources ------------------------------------------------------
    def threads(self, config: dict) -> int:
        return config["num_warps"] * self.warp_size

    def shared_lower_bound(self, config: dict, dtype: str) -> int:
        """Shared memory the software pipeline needs at least: (num_stages - 1) buffered
        A and B tiles. Triton allocates more (all stages on sm90, epilogue scratch), never less.
        A config without GEMM tiles (BLOCK_M, BLOCK_N, BLOCK_K) has no bound here: the compiled
        size decides (compile() prunes a variant over the limit)."""
        if not all(k in config for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")):
            return 0
        stages = max(1, config.get("num_stages", 2) - 1)
        e = PACKED_DTYPE_BYTES.get(dtype) or DTYPE_BYTES[dtype]
        if self.backend == "hip" and config.get("num_stages", 2) <= 2:
            stages = 1  # one LDS buffer; loads go through registers
        return stages * (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * e

    def resource_rule(self, config: dict, shape):
        """Prune by threads, by a known compiled shared size (cached from earlier builds) or by
        a lower bound; a config that passes here and compiles over the limit is ``pruned`` by
        compile() itself."""
        if self.threads(config) > self.target.max_threads:
            return Rule("threads_exceed_device", "num_warps x warp size (%d) over the device's %d threads "
                        "per block" % (self.threads(config), self.target.max_threads), None)
        limit = self.target.shared_mem_max
        if not limit:
            return None
        low = self.shared_lower_bound(config, shape.dtype)
        if low > limit:  # a lower bound: no compile says less (and this costs no hashing)
            return Rule("shared_exceeds_device", "pipelined tiles need at least %d bytes of shared memory, "
                        "over the device's %d" % (low, limit), None)
        spec = self.specialization(config, shape)
        cached = CompileResult.load_cached(self._artifact_path(self._digest(config, spec)))
        if cached is not None and cached.launch.get("shared", 0) > limit:
            return Rule("shared_exceeds_device", "compiled shared memory %d bytes over the device's %d"
                        % (cached.launch["shared"], limit), None)
        return None

    # ---- compile -------------------------------------------------------------------------
    def _options(self, config: dict, source: "KernelSource") -> dict:
        allowed = CUDA_OPTIONS if self.backend == "cuda" else HIP_OPTIONS
        constexprs = set(source.constexpr_names) | set(source.optional_constexprs)
        options = {}
        for key, value in config.items():
            if key in source.fixed and value != source.fixed[key]:
                raise HarnessError("config parameter %s=%r: %s takes only %s=%r" % (
                    key, value, source.fn_name, key, source.fixed[key]))
            if key in constexprs or (key in source.fixed and key not in allowed):
                continue
            if key not in allowed:
                raise HarnessError("config parameter %r is neither a constexpr of %s nor a %s compile option "
                                   "(%s)" % (key, source.fn_name, self.backend, ", ".join(allowed)))
            options[key] = value
        return options

    def _job(self, config: dict, spec, c_dtype=None, generic=False) -> dict:
        """What the compile process gets: signature, constants, divisibility attributes, options."""
        dtype = spec[0]
        source = self.source(config)
        if source.language == "cuda":  # CUDA C++ (NVRTC): defines, no signature
            return dict(source.job(config, self.arch), backend=self.backend, arch=self.arch)
        types = self.pointer_types(dtype, c_dtype)
        classes = {} if generic else self._spec_dict(spec)
        # A_T / B_T: the specialization made the M stride of A / the K stride of B 1
        a_t, b_t = classes.get("stride_am") == "1", classes.get("stride_bk") == "1"
        descriptors = self._descriptors(config, a_t, b_t, source)
        signature, constexprs, divisible = {}, {}, []
        for index, name in enumerate(source.args):
            if name in source.descriptor_args:
                if name in descriptors:
                    d = descriptors[name]
                    signature[name] = "tensordesc<%s%s>" % (types[d["operand"] + "_ptr"].lstrip("*"), d["block"])
                else:
                    signature[name], constexprs[name] = "constexpr", None
                continue
            if name in types:
                signature[name] = types[name]
                if not generic:
                    divisible.append(index)
                continue
            cls = classes.get(name, "x")
            if cls == "1":
                signature[name] = "constexpr"
                constexprs[name] = 1
            else:
                signature[name] = "i32"
                if cls == "16":
                    divisible.append(index)
        for name in source.constexpr_names:
            signature[name] = "constexpr"
            constexprs[name] = config.get(name, 1)
        for name, option in source.option_constexprs.items():  # the Gluon kernel's STAGES: num_stages
            signature[name] = "constexpr"
            constexprs[name] = config[option]
        if "EVEN_K" in source.takes:
            signature["EVEN_K"] = "constexpr"
            constexprs["EVEN_K"] = False if generic else classes.get("EVEN_K") == "1"
        if "IEEE" in source.takes:
            signature["IEEE"] = "constexpr"
            constexprs["IEEE"] = dtype == "fp32" or generic
        for name, default in source.optional_constexprs.items():  # TMA, SWAP_AB, ...
            signature[name] = "constexpr"
            constexprs[name] = config.get(name, default)
        if "A_T" in source.takes:
            signature["A_T"], signature["B_T"] = "constexpr", "constexpr"
            constexprs["A_T"], constexprs["B_T"] = a_t, b_t
        job = {"module": source.module_name, "fn": source.fn_name, "signature": signature,
               "constexprs": constexprs, "divisible": divisible, "options": self._options(config, source),
               "backend": self.backend, "arch": self.arch, "warp_size": self.warp_size}
        if source.language != "triton":
            job["language"] = source.language
        if descriptors:
            job["descriptors"] = descriptors
        return job

    def _descriptors(self, config: dict, a_t: bool, b_t: bool, source: "KernelSource") -> dict:
        """name -> the tensor descriptor argument (descriptors.Descriptor.as_dict) that ``config`` takes."""
        plan = getattr(self.kernel, "tensor_descriptors", None)
        if plan is None or not source.descriptor_args:
            return {}
        return {d.name: d.as_dict() for d in plan(config, a_t, b_t)}

    def _digest(self, config: dict, spec, job=None) -> str:
        job = job or self._job(config, spec)
        h = next(s for s in list(self._sources.values()) if s.module_name == job["module"]).source_hash.copy()
        lineinfo = os.environ.get("HARNESS_TRITON_LINEINFO", "0")
        compiler = self.version
        if job.get("language") == "cuda":
            from .cuda_cpp import nvrtc_version

            compiler = "nvrtc " + nvrtc_version()
        for part in (json.dumps(job, sort_keys=True), compiler, self.ext, lineinfo):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def _artifact_path(self, digest: str) -> Path:
        return self.out_dir / "artifacts" / ("%s.%s" % (digest[:20], self.ext))

    def expect_dtypes(self, dtypes) -> None:
        """Shape dtypes the support kernels cover even where this build compiles none of them."""
        with self._lock:
            self._dtypes_seen.update(dtypes)

    def compile(self, config: dict, shape, timeout: float) -> CompileResult:
        return self._within_device(self._compile_job(self._job_for(config, shape), timeout))

    def compiled(self, config: dict, shape) -> Optional[CompileResult]:
        """The result of this compile where the bundle holds it already (a round that measures
        configs compiled earlier in the tune, as a winners' re-measure), without waiting for a
        place in the compile pool; None where it must be compiled (or another build is at it)."""
        job = self._job_for(config, shape)
        cached = CompileResult.load_cached(self._artifact_path(self._digest(None, None, job)))
        return None if cached is None else self._within_device(cached)

    def _job_for(self, config: dict, shape) -> dict:
        with self._lock:
            self._dtypes_seen.add(shape.dtype)
        return self._job(config, self.specialization(config, shape))

    def _within_device(self, result: CompileResult) -> CompileResult:
        """``result``, pruned where its compiled shared memory exceeds the device's."""
        limit = self.target.shared_mem_max
        if result.status == "ok" and limit and result.launch.get("shared", 0) > limit:
            result = CompileResult("pruned", None, "shared_exceeds_device: compiled shared memory %d bytes over "
                                   "the device's %d" % (result.launch["shared"], limit),
                                   dict(result.launch), result.seconds, result.cached)
        return result

    def _compile_job(self, job: dict, timeout: float) -> CompileResult:
        digest = self._digest(None, None, job)
        with _compiling(digest):  # builds of overlapping rounds may want the same artifact
            return self._compile_once(job, digest, timeout)

    def _compile_once(self, job: dict, digest: str, timeout: float) -> CompileResult:
        artifact = self._artifact_path(digest)
        cached = CompileResult.load_cached(artifact)
        if cached is not None:
            return cached
        artifact.parent.mkdir(parents=True, exist_ok=True)
        reused = CompileResult.reuse(artifact)  # compiled in another project or tune
        if reused is not None:
            return reused
        result = run_compile_process(job, artifact, timeout)
        if result.status == "ok" and job.get("language") != "cuda":
            result.launch["triton_version"] = self.version
        if result.status != "compile_timeout":  # a longer timeout may succeed: try again next build
            result.save_cached(artifact)
        return result

    # ---- support kernels and the manifest's toolchain record ----------------------------------
    def support(self, timeout: float = 300.0) -> dict:
        """Fill, error and reference kernels for every dtype this build saw (compiled once, cached):
        the agent generates data, checks answers and computes a reference with them. A fill kernel
        per input dtype, an error kernel per output dtype and fp32 (the agent compares its two fp32
        references, torch and kernel, with it), a reference kernel per shape dtype."""
        shape_dtypes = sorted(self._dtypes_seen) or ["fp16"]
        fills = sorted(set().union(*(self.operand_dtypes(d, "input") for d in shape_dtypes)))
        errors = sorted(set().union(*(self.operand_dtypes(d, "output") for d in shape_dtypes)) | {"fp32"})
        jobs = [("fill", d, self._fill_job(d), None) for d in fills]
        jobs += [("error", d, self._error_job(d), None) for d in errors]
        jobs += [("reference", d) + self._reference_job(d) for d in shape_dtypes]
        for _, _, job, _ in jobs:
            job.update(backend=self.backend, arch=self.arch, warp_size=self.warp_size)
        # at once, not one after another: a tune's first round (its devices idle) waits for them
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="support") as pool:
            results = list(pool.map(lambda j: self._compile_job(j[2], timeout), jobs))
        out = {}
        for (role, dtype, job, config), res in zip(jobs, results):
            if res.status != "ok":
                raise HarnessError("support kernel %s for %s did not compile: %s" % (role, dtype, res.message))
            key = "%s_%s" % (role, dtype)
            out[key] = {"artifact": str(res.artifact.relative_to(self.out_dir)),
                        "sha256": _sha256(res.artifact), "launch": res.launch}
            if config is not None:
                out[key]["config"] = dict(config)
        return out

    def _fill_job(self, dtype: str) -> dict:
        return {"module": self.main.module_name, "fn": "fill_kernel",
                "signature": {"out_ptr": TRITON_TYPES[dtype], "n": "i64", "seed": "i32", "BLOCK": "constexpr"},
                "constexprs": {"BLOCK": SUPPORT_BLOCK}, "divisible": [0], "options": {"num_warps": 4}}

    def _error_job(self, dtype: str) -> dict:
        return {"module": self.main.module_name, "fn": "error_kernel",
                "signature": {"c_ptr": TRITON_TYPES[dtype], "ref_ptr": "*fp32", "out_ptr": "*fp32", "n": "i64",
                              "rtol": "fp32", "atol": "fp32", "BLOCK": "constexpr"},
                "constexprs": {"BLOCK": SUPPORT_BLOCK}, "divisible": [0, 1, 2], "options": {"num_warps": 4}}

    def _reference_job(self, dtype: str) -> tuple:
        """(job, config) of the reference kernel: the module's own (``REFERENCE = {"fn", "config"}``:
        a plain kernel taking the same pointers, the output fp32, and the same integers, none of
        them specialized), else the kernel itself at the conservative REFERENCE_CONFIG, unspecialized,
        with an fp32 output."""
        own = getattr(self.main.module, "REFERENCE", None)
        if own is None:
            job = self._job(REFERENCE_CONFIG, (dtype,), c_dtype="fp32", generic=True)
            job["options"]["num_stages"] = 2
            return job, REFERENCE_CONFIG
        fn = getattr(self.main.module, own["fn"])
        types = self.pointer_types(dtype, "fp32")
        config = dict(own["config"])
        signature, constexprs, divisible = {}, {}, []
        for index, param in enumerate(fn.params):
            if param.is_constexpr:
                signature[param.name], constexprs[param.name] = "constexpr", config[param.name]
            elif param.name in types:
                signature[param.name] = types[param.name]
                divisible.append(index)
            else:
                signature[param.name] = "i32"
        options = {k: v for k, v in config.items() if k not in constexprs}
        return {"module": self.main.module_name, "fn": own["fn"], "signature": signature, "constexprs": constexprs,
                "divisible": divisible, "options": options}, config

    def describe(self) -> dict:
        if self._support is None:
            self._support = self.support()
        return {"kind": "triton", "triton_version": self.version, "backend": self.backend,
                "arch": self.arch, "warp_size": self.warp_size, "format": self.ext,
                "python": sys.version.split()[0], "support_block": SUPPORT_BLOCK,
                "support": self._support}


_kernel_sources: dict = {}  # spec -> KernelSource (a tune makes a compiler per round)
_kernel_sources_lock = threading.Lock()


def kernel_source(spec: str):
    """The KernelSource of ``spec``, made once per process: the hash of its module and of Triton's
    key of the function took a few per cent of a tune's host time, made again for every round.
    (The module itself is imported once per process too.) A module with LANGUAGE = "cuda" is a
    CUDA C++ kernel (harness/compile/cuda_cpp.py)."""
    with _kernel_sources_lock:
        source = _kernel_sources.get(spec)
        if source is None:
            module = importlib.import_module(spec.split(":")[0])
            if getattr(module, "LANGUAGE", None) == "cuda":
                from . import cuda_cpp

                source = cuda_cpp.KernelSource(spec)
            else:
                source = KernelSource(spec)
            _kernel_sources[spec] = source
        return source


class KernelSource:
    """One kernel function that configs compile to ("package.module:function"), with what its
    module declares: the run-time arguments in order (ARGS), the constexprs a config gives
    (CONSTEXPRS, OPTIONAL_CONSTEXPRS with defaults, OPTION_CONSTEXPRS: constexprs named after a
    compile option), the tensor descriptor arguments (DESCRIPTOR_ARGS), the config values it
    takes only one of (FIXED: checked, not passed) and its LANGUAGE (``triton``, or ``gluon``:
    built through GluonASTSource). The matmul's module spells the first four MATMUL_... ."""

    def __init__(self, spec: str):
        self.module_name, self.fn_name = spec.split(":")
        self.module = importlib.import_module(self.module_name)
        fn = getattr(self.module, self.fn_name)
        text = Path(inspect.getsourcefile(self.module)).read_text()
        # every digest of its artifacts starts so: the module's text, and Triton's key of the function,
        # which covers the JIT functions it calls from other modules (a shared epilogue, tile order)
        self.source_hash = hashlib.sha256(text.encode() + b"\0" + fn.cache_key.encode() + b"\0")
        self.args = list(_module_attr(self.module, "ARGS"))
        self.constexpr_names = tuple(_module_attr(self.module, "CONSTEXPRS"))
        self.optional_constexprs = dict(_module_attr(self.module, "OPTIONAL_CONSTEXPRS", {}))
        self.option_constexprs = dict(getattr(self.module, "OPTION_CONSTEXPRS", {}))
        self.descriptor_args = tuple(_module_attr(self.module, "DESCRIPTOR_ARGS", ()))  # tensordesc or None
        self.fixed = dict(getattr(self.module, "FIXED", {}))
        self.language = getattr(self.module, "LANGUAGE", "triton")
        self.takes = set(fn.arg_names)  # EVEN_K, IEEE, A_T ... where it has them


_locks_lock = threading.Lock()
_digest_locks: dict = {}  # digest -> [lock, users]


class _compiling:
    """Held while one artifact (by digest) is compiled in this process: a second build that
    wants it waits, then finds it cached."""

    def __init__(self, digest: str):
        self.digest = digest

    def __enter__(self):
        with _locks_lock:
            entry = _digest_locks.setdefault(self.digest, [threading.Lock(), 0])
            entry[1] += 1
        entry[0].acquire()

    def __exit__(self, *exc):
        with _locks_lock:
            entry = _digest_locks[self.digest]
            entry[0].release()
            entry[1] -= 1
            if not entry[1]:
                del _digest_locks[self.digest]


def _module_attr(module, name: str, default=None):
    """A kernel module's ``NAME``, or the matmul's spelling ``MATMUL_NAME``."""
    value = getattr(module, name, None)
    if value is None:
        value = getattr(module, "MATMUL_" + name, default)
    if value is None:
        raise HarnessError("Triton module %s names no %s (nor MATMUL_%s)" % (module.__name__, name, name))
    return value


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    h.update(Path(path).read_bytes())
    return h.hexdigest()


PRESTARTED_WORKERS = 8  # compile workers importing Triton that a GPU tune starts first: the support kernels' (seven)


def _compile_env() -> dict:
    env = dict(os.environ)
    if env.get("HARNESS_TRITON_LINEINFO", "0") != "1":
        env["TRITON_DISABLE_LINE_INFO"] = "1"  # halves a cubin; set HARNESS_TRITON_LINEINFO=1 for ncu source views
    return env


def _kept_workers() -> bool:
    return os.environ.get("HARNESS_COMPILE_WORKERS", "1") != "0"  # kept workers: Triton imported once each


def prestart_compile_workers(jobs: int = 0) -> None:
    """Start the kept compile workers now (a GPU tune's first step): their Triton import then runs
    beside the tune's start, and the support kernels, the first compiles, do not wait for it.
    Forked by the zygote (milliseconds each), a worker per parallel compile (``jobs``; 0: the
    cores), so that the seeds' compiles, which come all at once, wait for no fork; started with
    ``Popen`` (each imports Triton itself), ``PRESTARTED_WORKERS`` of them at most."""
    if _kept_workers():
        from .workers import prestart

        pool = jobs or os.cpu_count() or 1
        prestart("harness.compile.triton_gpu", _compile_env(), min(PRESTARTED_WORKERS, pool), forked=pool)


def run_compile_process(job: dict, artifact: Path, timeout: float) -> CompileResult:
    """Compile one job in a child process (its own process group), killed whole on timeout."""
    env = _compile_env()
    # a private Triton cache per compile, removed after it: the bundle's artifacts are the cache
    private = tempfile.mkdtemp(prefix="harness-triton-")
    env["TRITON_CACHE_DIR"] = private
    start = time.monotonic()
    if _kept_workers():
        from .workers import run_job

        done = run_job("harness.compile.triton_gpu", dict(job, out=str(artifact)), timeout, env)
    else:
        done = run_python_child("harness.compile.triton_gpu", dict(job, out=str(artifact)), timeout, env)
    shutil.rmtree(private, ignore_errors=True)
    seconds = time.monotonic() - start
    if done is None:
        _cleanup(artifact)
        return CompileResult("compile_timeout", None, "compile took over %gs; killed" % timeout, seconds=seconds)
    returncode, facts, err = done
    if returncode != 0 or facts is None:
        _cleanup(artifact)
        return CompileResult("compile_error", None, _error_text(err, returncode), seconds=seconds)
    if facts.get("status") != "ok":
        _cleanup(artifact)
        return CompileResult("compile_error", None, facts.get("message", "compile failed"), seconds=seconds)
    os.replace(str(artifact) + ".tmp", artifact)
    return CompileResult("ok", artifact, launch=facts["launch"], seconds=seconds)


def _cleanup(artifact: Path) -> None:
    try:
        os.unlink(str(artifact) + ".tmp")
    except OSError:
        pass


def _error_text(err: str, returncode) -> str:
    lines = [l.strip() for l in err.strip().splitlines() if l.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line[:400]
    return (lines[-1][:400] if lines else "compiler process exited %s" % returncode)


# ---- the compile process ---------------------------------------------------------------------
def _compile_in_process(job: dict) -> dict:
    if job.get("language") == "cuda":
        from .cuda_cpp import compile_job as compile_cuda

        return compile_cuda(job)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = importlib.import_module(job["module"])
    fn = getattr(module, job["fn"])
    attrs = {(i,): [["tt.divisibility", 16]] for i in job["divisible"]}
    if job.get("language") == "gluon":
        from triton.experimental.gluon._runtime import GluonASTSource

        src = GluonASTSource(fn, _gluon_signature(job), job["constexprs"], attrs)
    else:
        src = ASTSource(fn=fn, signature=job["signature"], constexprs=job["constexprs"], attrs=attrs)
    arch = int(job["arch"]) if job["backend"] == "cuda" else job["arch"]
    target = GPUTarget(job["backend"], arch, job["warp_size"])
    compiled = triton.compile(src, target=target, options=job["options"])
    md = compiled.metadata
    binary = compiled.asm["cubin" if job["backend"] == "cuda" else "hsaco"]
    if isinstance(binary, str):
        binary = binary.encode()
    with open(job["out"] + ".tmp", "wb") as f:
        f.write(binary)
    params = []
    metas = iter(getattr(md, "tensordesc_meta", None) or [])
    for name, ty in job["signature"].items():
        if ty.startswith("tensordesc"):
            params += _descriptor_params(job["descriptors"][name], next(metas))
        elif ty != "constexpr":
            params.append({"name": name, "type": ty})
    # the two hidden trailing pointers every compiled Triton kernel takes
    params.append({"name": "global_scratch", "type": "*i8", "hidden": True})
    params.append({"name": "profile_scratch", "type": "*i8", "hidden": True})
    num_warps = md.num_warps
    launch = {
        "entry": md.name,
        "format": "cubin" if job["backend"] == "cuda" else "hsaco",
        "target": "%s:%s" % (job["backend"], job["arch"]),
        "threads": num_warps * job["warp_size"],
        "block": [num_warps * job["warp_size"], 1, 1],
        "num_warps": num_warps,
        "num_stages": md.num_stages,
        "num_ctas": getattr(md, "num_ctas", 1),
        "warp_size": job["warp_size"],
        "shared": md.shared,
        "global_scratch_size": md.global_scratch_size,
        "global_scratch_align": md.global_scratch_align,
        "profile_scratch_size": md.profile_scratch_size,
        "profile_scratch_align": md.profile_scratch_align,
        "launch_cooperative_grid": bool(getattr(md, "launch_cooperative_grid", False)),
        "launch_pdl": bool(getattr(md, "launch_pdl", False)),
        "params": params,
        "divisible": [name for i, name in enumerate(job["signature"]) if i in job["divisible"]],
        "constexprs": job["constexprs"],
        "options": job["options"],
        "triton_version": triton.__version__,
    }
    return {"status": "ok", "launch": launch}


# the element types of Gluon kernels' tensor descriptors (Triton's name -> Gluon's type)
GLUON_DTYPES = {"fp16": lambda gl: gl.float16, "bf16": lambda gl: gl.bfloat16, "fp8e4nv": lambda gl: gl.float8e4nv,
                "fp32": lambda gl: gl.float32}


def _gluon_signature(job: dict) -> dict:
    """The job's signature with each tensor descriptor's shared memory layout, as Gluon needs it:
    the default NVMMA layout of its block (the swizzle TMA and wgmma agree on)."""
    from triton.experimental.gluon import language as gl

    signature = dict(job["signature"])
    for name, ty in signature.items():
        if ty.startswith("tensordesc<"):
            dtype = ty[len("tensordesc<"):].split("[")[0]
            block = job["descriptors"][name]["block"]
            cga = job["descriptors"][name].get("cga")
            layout = gl.NVMMASharedLayout.get_default_for(block, GLUON_DTYPES[dtype](gl), cga_layout=cga)
            signature[name] = "tensordesc<%s%s,%r>" % (dtype, block, layout)
    return signature


def _descriptor_params(desc: dict, meta: dict) -> list:
    """A host-made tensor descriptor argument as the compiled kernel takes it: the 128-byte
    CUtensorMap (``tensormap``: what the agent encodes, from the plan and Triton's metadata: the
    block one copy moves, which can be narrower than the plan's, the swizzle, the element type
    in the driver's numbering), then the view's shape (i32) and strides (i64) by value."""
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

    tensormap = dict(desc, type="tensormap", block=list(meta["block_size"]), swizzle=int(meta["swizzle"]),
                     elem_size=int(meta["elem_size"]), elem_type=TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]])
    return ([tensormap] + [{"name": n, "type": "i32"} for n in desc["shape"]]
            + [{"name": n, "type": "i64"} for n in desc["strides"]])


def preload() -> None:
    """Run once by the compile workers' zygote before it forks them (harness/compile/zygote.py):
    what a first compile imports, and the hash of Triton's own files in every cache key (0.3 s,
    kept)."""
    import triton.compiler.code_generator  # noqa: F401
    from triton.runtime import cache

    getattr(cache, "triton_key", lambda: None)()


def compile_job(job: dict) -> dict:
    """One compile's facts; a compile error is a result, not a crash (also in a kept worker,
    harness/compile/workers.py)."""
    try:
        return _compile_in_process(job)
    except Exception as exc:
        text = str(exc).strip().splitlines()
        message = "%s: %s" % (type(exc).__name__, " | ".join(text[-3:]) if text else "")
        return {"status": "compile_error", "message": message[:600]}


def _main() -> int:
    facts = compile_job(json.loads(sys.stdin.read()))
    sys.stdout.write(json.dumps(facts) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
