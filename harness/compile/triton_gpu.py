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

from ..errors import HarnessError
from ..space import Rule
from .common import CompileResult, run_python_child

# Options a config may carry that are compile options rather than constexpr arguments.
CUDA_OPTIONS = ("num_warps", "num_stages", "maxnreg")
HIP_OPTIONS = ("num_warps", "num_stages", "waves_per_eu", "matrix_instr_nonkdim", "kpack")
TRITON_TYPES = {"fp16": "*fp16", "bf16": "*bf16", "fp32": "*fp32"}
ELEM_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}

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
        module_name, self.fn_name = kernel.triton_module.split(":")
        self.module_name = module_name
        self.module = importlib.import_module(module_name)
        self.source_text = Path(inspect.getsourcefile(self.module)).read_text()
        self.args = list(self.module.MATMUL_ARGS)
        self.version = triton_version()
        self._dtypes_seen = set()
        self._lock = threading.Lock()
        self._support = None

    # ---- what a variant is specialized for -------------------------------------------------
    def _int_args(self, shape) -> dict:
        ints = {"M": shape.M, "N": shape.N, "K": shape.K}
        ints.update(self.kernel.strides(shape))
        return ints

    def specialization(self, config: dict, shape) -> tuple:
        """The JIT's cache key for this shape: dtype, the class of every integer argument
        (``1``: a constant, ``16``: divisible by 16, ``x``: neither) and EVEN_K."""
        ints = self._int_args(shape)
        classes = []
        for name in self.args:
            if name in ints:
                v = ints[name]
                classes.append("%s=%s" % (name, "1" if v == 1 else "16" if v % 16 == 0 else "x"))
        even_k = shape.K % config["BLOCK_K"] == 0  # split-K splits whole BLOCK_K steps
        return (shape.dtype,) + tuple(classes) + ("EVEN_K=%d" % even_k,)

    def _spec_dict(self, spec) -> dict:
        return dict(part.split("=") for part in spec[1:])

    # ---- pruning on device resources ------------------------------------------------------
    def threads(self, config: dict) -> int:
        return config["num_warps"] * self.warp_size

    def shared_lower_bound(self, config: dict, dtype: str) -> int:
        """Shared memory the software pipeline needs at least: (num_stages - 1) buffered
        A and B tiles. Triton allocates more (all stages on sm90, epilogue scratch), never less."""
        stages = max(1, config.get("num_stages", 2) - 1)
        e = ELEM_BYTES[dtype]
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
        spec = self.specialization(config, shape)
        cached = CompileResult.load_cached(self._artifact_path(self._digest(config, spec)))
        if cached is not None and cached.launch.get("shared") is not None:
            if cached.launch["shared"] > limit:
                return Rule("shared_exceeds_device", "compiled shared memory %d bytes over the device's %d"
                            % (cached.launch["shared"], limit), None)
            return None
        low = self.shared_lower_bound(config, shape.dtype)
        if low > limit:
            return Rule("shared_exceeds_device", "pipelined tiles need at least %d bytes of shared memory, "
                        "over the device's %d" % (low, limit), None)
        return None

    # ---- compile -------------------------------------------------------------------------
    def _options(self, config: dict) -> dict:
        allowed = CUDA_OPTIONS if self.backend == "cuda" else HIP_OPTIONS
        constexprs = set(self.module.MATMUL_CONSTEXPRS) | set(getattr(self.module, "MATMUL_OPTIONAL_CONSTEXPRS", {}))
        options = {}
        for key, value in config.items():
            if key in constexprs:
                continue
            if key not in allowed:
                raise HarnessError("config parameter %r is neither a constexpr of %s nor a %s compile option "
                                   "(%s)" % (key, self.fn_name, self.backend, ", ".join(allowed)))
            options[key] = value
        return options

    def _job(self, config: dict, spec, c_dtype=None, generic=False) -> dict:
        """What the compile process gets: signature, constants, divisibility attributes, options."""
        dtype = spec[0]
        ptr = TRITON_TYPES[dtype]
        types = {"a_ptr": ptr, "b_ptr": ptr, "c_ptr": TRITON_TYPES[c_dtype or dtype],
                 "ws_ptr": "*fp32", "lock_ptr": "*i32"}
        classes = {} if generic else self._spec_dict(spec)
        signature, constexprs, divisible = {}, {}, []
        for index, name in enumerate(self.args):
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
        for name in self.module.MATMUL_CONSTEXPRS:
            signature[name] = "constexpr"
            constexprs[name] = config.get(name, 1)
        signature["EVEN_K"] = "constexpr"
        constexprs["EVEN_K"] = False if generic else classes.get("EVEN_K") == "1"
        signature["IEEE"] = "constexpr"
        constexprs["IEEE"] = dtype == "fp32" or generic
        # optional constexprs (TMA); A_T / B_T: the specialization made the M stride of A / the K stride of B 1
        for name, default in getattr(self.module, "MATMUL_OPTIONAL_CONSTEXPRS", {}).items():
            signature[name] = "constexpr"
            constexprs[name] = config.get(name, default)
        if "TMA" in getattr(self.module, "MATMUL_OPTIONAL_CONSTEXPRS", {}):
            for name, stride in (("A_T", "stride_am"), ("B_T", "stride_bk")):
                signature[name] = "constexpr"
                constexprs[name] = classes.get(stride) == "1"
        return {"module": self.module_name, "fn": self.fn_name, "signature": signature,
                "constexprs": constexprs, "divisible": divisible, "options": self._options(config),
                "backend": self.backend, "arch": self.arch, "warp_size": self.warp_size}

    def _digest(self, config: dict, spec, job=None) -> str:
        job = job or self._job(config, spec)
        h = hashlib.sha256()
        lineinfo = os.environ.get("HARNESS_TRITON_LINEINFO", "0")
        for part in (self.source_text, json.dumps(job, sort_keys=True), self.version, self.ext, lineinfo):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def _artifact_path(self, digest: str) -> Path:
        return self.out_dir / "artifacts" / ("%s.%s" % (digest[:20], self.ext))

    def compile(self, config: dict, shape, timeout: float) -> CompileResult:
        spec = self.specialization(config, shape)
        with self._lock:
            self._dtypes_seen.add(shape.dtype)
        job = self._job(config, spec)
        result = self._compile_job(job, timeout)
        limit = self.target.shared_mem_max
        if result.status == "ok" and limit and result.launch.get("shared", 0) > limit:
            result = CompileResult("pruned", None, "shared_exceeds_device: compiled shared memory %d bytes over "
                                   "the device's %d" % (result.launch["shared"], limit),
                                   dict(result.launch), result.seconds, result.cached)
        return result

    def _compile_job(self, job: dict, timeout: float) -> CompileResult:
        digest = self._digest(None, None, job)
        artifact = self._artifact_path(digest)
        cached = CompileResult.load_cached(artifact)
        if cached is not None:
            return cached
        artifact.parent.mkdir(parents=True, exist_ok=True)
        result = run_compile_process(job, artifact, timeout)
        if result.status == "ok":
            result.launch["triton_version"] = self.version
        if result.status != "compile_timeout":  # a longer timeout may succeed: try again next build
            result.save_cached(artifact)
        return result

    # ---- support kernels and the manifest's toolchain record ----------------------------------
    def support(self, timeout: float = 300.0) -> dict:
        """Fill, error and reference kernels for every dtype this build saw (compiled once, cached):
        the agent generates data, checks answers and computes a reference with them."""
        dtypes = sorted(self._dtypes_seen) or ["fp16"]
        out = {}
        # fp32 error kernel too: the agent compares its two fp32 references (torch, kernel) with it
        for dtype in dtypes + (["fp32"] if "fp32" not in dtypes else []):
            ptr = TRITON_TYPES[dtype]
            jobs = {
                "fill": {"module": self.module_name, "fn": "fill_kernel",
                         "signature": {"out_ptr": ptr, "n": "i64", "seed": "i32", "BLOCK": "constexpr"},
                         "constexprs": {"BLOCK": SUPPORT_BLOCK}, "divisible": [0], "options": {"num_warps": 4}},
                "error": {"module": self.module_name, "fn": "error_kernel",
                          "signature": {"c_ptr": ptr, "ref_ptr": "*fp32", "out_ptr": "*fp32", "n": "i64",
                                        "rtol": "fp32", "atol": "fp32", "BLOCK": "constexpr"},
                          "constexprs": {"BLOCK": SUPPORT_BLOCK}, "divisible": [0, 1, 2], "options": {"num_warps": 4}},
            }
            for job in jobs.values():
                job.update(backend=self.backend, arch=self.arch, warp_size=self.warp_size)
            if dtype in self._dtypes_seen or not self._dtypes_seen:
                ref_job = self._job(REFERENCE_CONFIG, (dtype,), c_dtype="fp32", generic=True)
                ref_job["options"]["num_stages"] = 2
                jobs["reference"] = ref_job
            else:
                del jobs["fill"]
            for role, job in jobs.items():
                res = self._compile_job(job, timeout)
                if res.status != "ok":
                    raise HarnessError("support kernel %s for %s did not compile: %s" % (role, dtype, res.message))
                key = "%s_%s" % (role, dtype)
                out[key] = {"artifact": str(res.artifact.relative_to(self.out_dir)),
                            "sha256": _sha256(res.artifact), "launch": res.launch}
                if role == "reference":
                    out[key]["config"] = dict(REFERENCE_CONFIG)
        return out

    def describe(self) -> dict:
        if self._support is None:
            self._support = self.support()
        return {"kind": "triton", "triton_version": self.version, "backend": self.backend,
                "arch": self.arch, "warp_size": self.warp_size, "format": self.ext,
                "python": sys.version.split()[0], "support_block": SUPPORT_BLOCK,
                "support": self._support}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    h.update(Path(path).read_bytes())
    return h.hexdigest()


def run_compile_process(job: dict, artifact: Path, timeout: float) -> CompileResult:
    """Compile one job in a child process (its own process group), killed whole on timeout."""
    env = dict(os.environ)
    # a private Triton cache per compile, removed after it: the bundle's artifacts are the cache
    private = tempfile.mkdtemp(prefix="harness-triton-")
    env["TRITON_CACHE_DIR"] = private
    if env.get("HARNESS_TRITON_LINEINFO", "0") != "1":
        env["TRITON_DISABLE_LINE_INFO"] = "1"  # halves a cubin; set HARNESS_TRITON_LINEINFO=1 for ncu source views
    start = time.monotonic()
    if os.environ.get("HARNESS_COMPILE_WORKERS", "1") != "0":  # kept workers: Triton imported once each
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
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = importlib.import_module(job["module"])
    fn = getattr(module, job["fn"])
    attrs = {(i,): [["tt.divisibility", 16]] for i in job["divisible"]}
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
    for name, ty in job["signature"].items():
        if ty != "constexpr":
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


def compile_job(job: dict) -> dict:
    """One compile's facts; a compile error is a result, not a crash (also in a kept worker,
    harness.compile.workers)."""
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
