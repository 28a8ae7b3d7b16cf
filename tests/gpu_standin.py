"""A CPU stand-in for the GPU driver API, so the real GPU worker, supervisor and runner run in CI.

``StandinApi`` implements the interface of remote_agent.runners.cuda.CudaApi with host memory and
interprets each launch by the kernel's launch facts (the entry name and parameter list that the
host compile recorded): fill_kernel, error_kernel and matmul_kernel (and matmul_ws_kernel) are
computed with numpy. A
launch of a variant whose config carries ``fault: crash`` really crashes the process (SIGSEGV)
and ``fault: hang`` really hangs it (a busy loop), as a bad kernel would take a GPU worker down.

Run as a worker: ``python tests/gpu_standin.py worker --bundle B ...`` (same arguments as
``python -m remote_agent.runners.gpu_worker worker``).
"""

import ctypes
import os
import signal
import struct
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from remote_agent.runners.gpu_api import GpuApi, GpuError  # noqa: E402

NP = {"*fp16": np.float16, "*fp32": np.float32, "*i32": np.int32, "*bf16": np.uint16, "*i8": np.int8,
      "*fp8e4nv": np.uint8, "*fp8e4b8": np.uint8}
FP8_FORMATS = {"*fp8e4nv": "fp8e4m3fn", "*fp8e4b8": "fp8e4m3fnuz"}  # Triton pointer type -> the harness's dtype


def _bf16_to_f32(u16):
    return (u16.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _f32_to_bf16(x):
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


class StandinApi(GpuApi):
    backend = "cuda"
    tensor_maps = True

    def __init__(self, l2_bytes=1 << 20):
        self.mem = {}
        self.next = 1 << 20
        self.funcs = {}
        self.events = {}
        self.l2 = l2_bytes
        self.device = 0
        self.stream = 1

    # devices
    def init(self):
        pass

    def device_count(self):  # HARNESS_STANDIN_DEVICES: a node with that many GPUs
        return int(os.environ.get("HARNESS_STANDIN_DEVICES", "1"))

    def attribute(self, attr, index=None):  # compute capability 9.0, as the facts say
        return {75: 9, 76: 0}.get(attr, 0)

    def device_name(self, index):
        return "CPU stand-in"

    def open(self, index):
        self.device = index

    def facts(self):
        return {"name": "CPU stand-in", "arch": "90", "sm_count": 1, "l2_bytes": self.l2,
                "shared_max": 232448, "max_threads": 1024, "memory_bytes": 1 << 30, "driver": 0}

    def mem_info(self):
        return 1 << 30, 1 << 30

    # memory
    def alloc(self, nbytes):
        ptr = self.next
        # the agent's 256 MiB L2 flush buffer: only its start is ever touched here
        self.mem[ptr] = bytearray(int(max(1, nbytes)) if nbytes <= (64 << 20) else (1 << 20))
        self.next += (int(nbytes) + 511) // 256 * 256 + 256
        return ptr

    def free(self, ptr):
        if ptr:
            self.mem.pop(ptr, None)

    def _buf(self, ptr):
        if ptr not in self.mem:
            raise GpuError("stand-in: invalid device pointer 0x%x" % ptr, code=1)
        return self.mem[ptr]

    def dtoh(self, src, nbytes):
        return bytes(self._buf(src)[:int(nbytes)])

    def htod(self, dst, data):
        self._buf(dst)[:len(data)] = data

    def dtod(self, dst, src, nbytes):
        self._buf(dst)[:int(nbytes)] = self._buf(src)[:int(nbytes)]

    def _memset(self, ptr, value, count, fmt):
        arr = np.frombuffer(self._buf(ptr), dtype=fmt)
        arr[:int(count)] = value

    def memset16(self, ptr, value, count):
        self._memset(ptr, value, count, np.uint16)

    def memset32(self, ptr, value, count):
        self._memset(ptr, value, count, np.uint32)

    # modules
    def load_module(self, image):
        if not image.startswith(b"\x7fELF"):
            raise GpuError("stand-in: CUDA_ERROR_INVALID_IMAGE", code=200, load=True)
        return 1

    def unload_module(self, module):
        pass

    def get_function(self, module, name):
        handle = len(self.funcs) + 1
        self.funcs[handle] = {"entry": name}
        return handle

    # tensor descriptors: the CUtensorMap's 128 bytes hold what was asked, for the launch to check
    TENSOR_MAP = struct.Struct("<QiiqqqqIIi")

    def encode_tensor_map(self, address, base, elem_type, elem_size, shape, strides, block, swizzle):
        """What cuTensorMapEncodeTiled checks (the parts the kernels can get wrong): 16-byte aligned
        base and row pitches, boxes of 1 to 256 elements; the view is then kept for the launch."""
        pitch = strides[0] * elem_size
        if base % 16 or pitch % 16 or strides[1] != 1 or not all(1 <= b <= 256 for b in block):
            raise GpuError("stand-in: cuTensorMapEncodeTiled: CUDA_ERROR_INVALID_VALUE (1) (base %#x, strides %s, "
                           "block %s)" % (base, list(strides), list(block)), code=1, load=True)
        ctypes.memmove(address, self.TENSOR_MAP.pack(base, elem_type, elem_size, shape[0], shape[1], strides[0],
                                                     strides[1], block[0], block[1], swizzle), self.TENSOR_MAP.size)

    def tensor_map(self, address):
        base, _, elem_size, s0, s1, t0, t1, b0, b1, _ = self.TENSOR_MAP.unpack(ctypes.string_at(address,
                                                                                             self.TENSOR_MAP.size))
        return {"base": base, "elem_size": elem_size, "shape": [s0, s1], "strides": [t0, t1], "block": [b0, b1]}

    def describe_function(self, fn, launch):
        self.funcs[fn] = launch

    def set_dynamic_shared(self, fn, nbytes):
        pass

    def function_facts(self, fn):
        return {"regs": 96, "local_bytes": 0}

    def synchronize(self):
        pass

    def event(self):
        ev = len(self.events) + 1
        self.events[ev] = 0
        return ev

    def record(self, ev, stream=None):
        self.events[ev] = time.perf_counter_ns()

    def elapsed_ms(self, start, end):
        return max(1e-6, (self.events[end] - self.events[start]) / 1e6)

    def destroy_event(self, ev):
        pass

    def profiler_start(self):
        pass

    def profiler_stop(self):
        pass

    # launches, interpreted
    def launch(self, fn, grid, block, shared, params, stream=None):
        if int(self.funcs[fn].get("num_ctas", 1)) > 1:  # its cubin requires a cluster launch
            raise GpuError("stand-in: a kernel built for clusters of %s CTAs launched without: "
                           "CUDA_ERROR_INVALID_CLUSTER_SIZE (912)" % self.funcs[fn]["num_ctas"], code=912)
        self._interpret(fn, grid, params)

    def launch_cluster(self, fn, grid, ctas, block, shared, params, stream=None):
        """A launch in clusters (a kernel built with num_ctas): the kernel must have been built for
        clusters of that size (its launch facts); it is interpreted as one launch."""
        if int(self.funcs[fn].get("num_ctas", 1)) != ctas:
            raise GpuError("stand-in: clusters of %d CTAs for a kernel built with num_ctas %s: "
                           "CUDA_ERROR_INVALID_CLUSTER_SIZE (912)" % (ctas, self.funcs[fn].get("num_ctas")), code=912)
        self._interpret(fn, grid, params)

    def _interpret(self, fn, grid, params):
        facts = self.funcs[fn]
        values, types = {}, {}
        for i, p in enumerate(facts["params"]):
            addr = params[i]
            ty = p["type"]
            if ty == "tensormap":
                values[p["name"]] = dict(self.tensor_map(addr), spec=p)
                continue
            if ty.startswith("*"):
                v = ctypes.c_uint64.from_address(addr).value
            else:
                v = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "fp32": ctypes.c_float}[ty].from_address(addr).value
            values[p["name"]] = v
            types[p["name"]] = ty
        values.update({k: v for k, v in (facts.get("constexprs") or {}).items() if k not in values})
        getattr(self, "_" + facts["entry"])(facts, values, types, grid)

    def _array(self, ptr, ty, n):
        return np.frombuffer(self._buf(ptr), dtype=NP[ty], count=int(n))

    def _fill_kernel(self, facts, v, t, grid):
        n = int(v["n"])
        x = np.random.default_rng(int(v["seed"])).uniform(-1, 1, n)
        out = self._array(v["out_ptr"], t["out_ptr"], n)
        if t["out_ptr"] in FP8_FORMATS:  # fp8 codes as the fp8 kernel's fill writes them
            from harness.kernels.fp8_blockscale import fp8

            out[:] = fp8.encode(x * 224.0, FP8_FORMATS[t["out_ptr"]])
            return
        out[:] = _f32_to_bf16(x) if t["out_ptr"] == "*bf16" else x.astype(out.dtype)

    def _load(self, ptr, ty, n):
        a = self._array(ptr, ty, n)
        return _bf16_to_f32(a) if ty == "*bf16" else a.astype(np.float32)

    def _error_kernel(self, facts, v, t, grid):
        n, block = int(v["n"]), int(facts["constexprs"]["BLOCK"])
        c = self._load(v["c_ptr"], t["c_ptr"], n).astype(np.float64)
        ref = self._load(v["ref_ptr"], "*fp32", n).astype(np.float64)
        out = self._array(v["out_ptr"], "*fp32", grid[0] * 4).reshape(-1, 4)
        with np.errstate(invalid="ignore"):
            diff = np.abs(c - ref)
            bad = ~(diff <= v["atol"] + v["rtol"] * np.abs(ref))
        for p in range(grid[0]):
            s = slice(p * block, min(n, (p + 1) * block))
            d = diff[s]
            out[p] = [np.sum(d * d), np.sum(ref[s] ** 2), np.max(np.where(d == d, d, np.inf)), np.sum(bad[s])]

    def _fault_kernel(self, facts, v, t, grid):
        """bench/gpu_faults.py's kernels: MODE 0 writes to an illegal address, MODE 1 spins."""
        self._matmul_kernel(dict(facts, fault="crash" if v["MODE"] == 0 else "hang"), v, t, grid)

    def _matmul_kernel(self, facts, v, t, grid):
        fault = (facts.get("fault") or "")
        if fault == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if fault == "hang":
            while True:
                pass
        if fault == "sticky":  # what an illegal address does to a CUDA context
            raise GpuError("cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS (700)", code=700, sticky=True)
        M, N, K = int(v["M"]), int(v["N"]), int(v["K"])
        self._check_descriptors(facts, v)
        a = self._load(v["a_ptr"], t["a_ptr"], M * K + (M - 1) * 0)
        b = self._load(v["b_ptr"], t["b_ptr"], K * N)
        A = np.lib.stride_tricks.as_strided(a, (M, K), (v["stride_am"] * 4, v["stride_ak"] * 4))
        B = np.lib.stride_tricks.as_strided(b, (K, N), (v["stride_bk"] * 4, v["stride_bn"] * 4))
        split = int((facts.get("constexprs") or {}).get("SPLIT_K", 1))
        if split > 1:
            C = self._split_k(facts, v, grid, A, B, split)
        else:
            if int((facts.get("constexprs") or {}).get("STREAM_K", 0)):
                self._stream_k_buffers(facts, v, grid)
            C = A.astype(np.float32) @ B.astype(np.float32)
        if fault == "wrong":
            C[0, 0] += 1000.0
        out = self._array(v["c_ptr"], t["c_ptr"], M * N)
        out[:] = (_f32_to_bf16(C.ravel()) if t["c_ptr"] == "*bf16" else C.ravel().astype(out.dtype))


    # the warp-specialized Gluon kernel (harness/kernels/matmul/gluon_kernel.py) takes the same arguments
    # and descriptors of its own: computed alike, its descriptors checked alike
    _matmul_ws_kernel = _matmul_kernel

    # the matmul's operands: logical dimensions and their strides (harness/kernels/matmul)
    OPERAND_AXES = {"a": (("M", "stride_am"), ("K", "stride_ak")), "b": (("K", "stride_bk"), ("N", "stride_bn")),
                    "c": (("M", "stride_cm"), ("N", "stride_cn"))}

    def _check_descriptors(self, facts, v):
        """Every tensor descriptor of the launch must view its whole operand, as the GPU would read
        it: at the operand's address, its dimensions each with its own stride (in any order, the
        last stride 1), inside the operand's buffer. A descriptor that views it otherwise loads the
        wrong elements or faults on a GPU; here it is an illegal address."""
        for p in facts.get("params", ()):  # (the stand-in library computes the product without facts)
            if p["type"] != "tensormap":
                continue
            d = v[p["name"]]
            axes = {(int(v[dim]), int(v[stride])) for dim, stride in self.OPERAND_AXES[p["operand"]]}
            view = set(zip(d["shape"], d["strides"]))
            base = v["%s_ptr" % p["operand"]]
            end = base + d["elem_size"] * (1 + sum((n - 1) * t for n, t in zip(d["shape"], d["strides"])))
            if d["base"] != base or view != axes or d["strides"][-1] != 1 or end > base + len(self._buf(base)):
                raise GpuError("stand-in: tensor descriptor %s views %s x %s (strides %s) at %#x, operand %s is %s: "
                               "CUDA_ERROR_ILLEGAL_ADDRESS (700)" % (p["name"], d["shape"][0], d["shape"][1],
                                                                     d["strides"], d["base"], p["operand"],
                                                                     sorted(axes)), code=700, sticky=True)

    def _split_k(self, facts, v, grid, A, B, split):
        """The kernel's split-K plan: grid (tiles, SPLIT_K); split s takes whole BLOCK_K steps
        [s * per, (s + 1) * per) and writes its partial into slice s of the fp32 SPLIT_K x M x N
        workspace; the last split per tile sums the slices in split order. The counters (one per
        tile) must be zero at launch and are zero after it, as on a GPU."""
        M, N, K = A.shape[0], B.shape[1], A.shape[1]
        const = facts["constexprs"]
        tiles = -(-M // const["BLOCK_M"]) * -(-N // const["BLOCK_N"])
        if tuple(grid[:2]) != (tiles, split):
            raise GpuError("stand-in: split-K grid %s, the kernel needs (%d, %d)" % (list(grid), tiles, split), code=1)
        self._reduction_buffers(v, split * M * N, tiles, "split-K")
        ws = self._array(v["ws_ptr"], "*fp32", split * M * N).reshape(split, M, N)
        steps = -(-K // const["BLOCK_K"])
        per = -(-steps // split)
        for s in range(split):
            k0, k1 = min(K, s * per * const["BLOCK_K"]), min(K, (s + 1) * per * const["BLOCK_K"])
            ws[s] = A[:, k0:k1].astype(np.float32) @ B[k0:k1, :].astype(np.float32)
        total = np.zeros((M, N), np.float32)
        for s in range(split):
            total += ws[s]
        return total


    def _stream_k_buffers(self, facts, v, grid):
        """What a stream-K launch needs (triton_kernel.py): an fp32 BLOCK_M x BLOCK_N slot and a
        zeroed counter per program of grid[0]."""
        const = facts["constexprs"]
        slots = int(grid[0])
        self._reduction_buffers(v, slots * const["BLOCK_M"] * const["BLOCK_N"], slots, "stream-K")

    def _reduction_buffers(self, v, ws_elements, counters, what):
        """A reduction's fp32 workspace (``ws_ptr``) and int32 counters (``lock_ptr``) as the
        agent must give them: big enough (a short buffer is an illegal address), the counters
        zero at launch (else the reduction would run early)."""
        for name, need in (("ws_ptr", ws_elements * 4), ("lock_ptr", counters * 4)):
            if not v[name] or len(self._buf(v[name])) < need:
                raise GpuError("stand-in: %s holds fewer than %d bytes: CUDA_ERROR_ILLEGAL_ADDRESS (700)"
                               % (name, need), code=700, sticky=True)
        if self._array(v["lock_ptr"], "*i32", counters).any():
            raise GpuError("stand-in: %s counters not zero at launch (a reduction would run early)" % what, code=1)

    # the fp8 block-scaled GEMM (harness/kernels/fp8_blockscale): codes decoded with its numpy codec
    def _fp8(self, v, t, name, rows, cols):
        from harness.kernels.fp8_blockscale import fp8

        codes = self._array(v[name], t[name], rows * cols).reshape(rows, cols)
        return fp8.decode(codes, FP8_FORMATS[t[name]])

    def _fp8_product(self, v, t, a_scale=None):
        """C of the fp8 GEMM in float64; ``a_scale``: A's scales as the kernel read them (default: the
        a_scale operand, row-major)."""
        from harness.kernels.fp8_blockscale import fp8

        M, N, K = int(v["M"]), int(v["N"]), int(v["K"])
        sk, sn = fp8.cdiv(K, 128), fp8.cdiv(N, 128)
        if a_scale is None:
            a_scale = self._array(v["a_scale_ptr"], "*fp32", M * sk).reshape(M, sk)
        a = self._fp8(v, t, "a_ptr", M, K) * fp8.expand_scales(a_scale, M, K, 1, 128)
        b = self._fp8(v, t, "b_ptr", N, K) * fp8.expand_scales(
            self._array(v["b_scale_ptr"], "*fp32", sn * sk).reshape(sn, sk), N, K, 128, 128)
        return M, N, a @ b.T

    def _fp8_blockscale_kernel(self, facts, v, t, grid, a_scale=None):
        M, N, C = self._fp8_product(v, t, a_scale)
        out = self._array(v["c_ptr"], t["c_ptr"], M * N)
        out[:] = _f32_to_bf16(C.ravel()) if t["c_ptr"] == "*bf16" else C.ravel().astype(out.dtype)

    _reference_kernel = _fp8_blockscale_kernel

    def _fp8_blockscale_ws_kernel(self, facts, v, t, grid):
        """The fp8 GEMM's warp-specialized Gluon kernel (harness/kernels/fp8_blockscale/gluon_kernel.py):
        each tensor descriptor must view its operand (A, B: 1-byte codes; C: bf16; A's scales M-major:
        fp32) where its pointer is, the grid is at most one program per tile; C is computed as the
        Triton kernel's, with A's scales read through ``as_desc`` where the kernel has it
        (SMEM_SCALES 2), so that a wrong copy of them gives a wrong answer here too."""
        views = {"a_desc": ("a_ptr", 1), "b_desc": ("b_ptr", 1), "b2_desc": ("b_ptr", 1), "c_desc": ("c_ptr", 2),
                 "c2_desc": ("c_ptr", 2), "as_desc": (None, 4)}  # a_scale_t: no pointer argument of its own
        for name, (ptr, size) in views.items():
            d = v.get(name)
            if isinstance(d, dict) and ((ptr and d["base"] != v[ptr]) or d["elem_size"] != size):
                raise GpuError("stand-in: %s views %#x (%d-byte elements), not %s" % (name, d["base"], d["elem_size"],
                                                                                       ptr))
        a_scale = None
        d = v.get("as_desc")
        if isinstance(d, dict):  # KS x M, row pitch strides[0] elements
            (ks, m), pitch = d["shape"], d["strides"][0]
            a_scale = self._array(d["base"], "*fp32", ks * pitch).reshape(ks, pitch)[:, :m].T
        self._fp8_blockscale_kernel(facts, v, t, grid, a_scale)


    def _fp8_blockscale_cuda(self, facts, v, t, grid):
        """The fp8 GEMM's CUDA C++ kernel (harness/kernels/fp8_blockscale/cuda_kernel.cu): its operands
        come through tensor maps only (A, B: 1-byte codes; A's scales M-major fp32; C bf16, which must
        view c_ptr) and B's scales by pointer; the grid is at most one CTA (or cluster) a tile. C is
        computed from what the maps view, so a map over the wrong buffer gives a wrong answer here."""
        views = {"tm_a": 1, "tm_b": 1, "tm_sa": 4, "tm_c": 2}
        for name, size in views.items():
            if v[name]["elem_size"] != size:
                raise GpuError("stand-in: %s has %d-byte elements, not %d" % (name, v[name]["elem_size"], size))
        if v["tm_c"]["base"] != v["c_ptr"]:
            raise GpuError("stand-in: tm_c views %#x, not c_ptr %#x" % (v["tm_c"]["base"], v["c_ptr"]))
        (ks, m), pitch = v["tm_sa"]["shape"], v["tm_sa"]["strides"][0]
        a_scale = self._array(v["tm_sa"]["base"], "*fp32", ks * pitch).reshape(ks, pitch)[:, :m].T
        codes = {"a_ptr": v["tm_a"]["base"], "b_ptr": v["tm_b"]["base"]}
        self._fp8_blockscale_kernel(facts, dict(v, **codes), dict(t, a_ptr="*fp8e4nv", b_ptr="*fp8e4nv"), grid,
                                    a_scale)


    def _fp8_blockscale_decode(self, facts, v, t, grid):
        """The fp8 GEMM's CUDA decode kernel (harness/kernels/fp8_blockscale/cuda_decode.cu): A and B
        through tensor maps of 1-byte codes, A's scales M-major by pointer (KS x M), B's scales, C
        bf16; a grid of tiles x splits of K, whose split-K workspace must hold grid[1] slices of M x N
        fp32 and its counters (one a tile) be zero at launch."""
        for name in ("tm_a", "tm_b"):
            if v[name]["elem_size"] != 1:
                raise GpuError("stand-in: %s has %d-byte elements, not 1" % (name, v[name]["elem_size"]))
        M, N, K = int(v["M"]), int(v["N"]), int(v["K"])
        if grid[1] > 1:
            self._reduction_buffers(v, grid[1] * M * N, grid[0], "split-K")
        ks, pitch = -(-K // 128), int(v["stride_atk"])
        a_scale = self._array(v["a_scale_t_ptr"], "*fp32", ks * pitch).reshape(ks, pitch)[:, :M].T
        codes = {"a_ptr": v["tm_a"]["base"], "b_ptr": v["tm_b"]["base"]}
        self._fp8_blockscale_kernel(facts, dict(v, **codes), dict(t, a_ptr="*fp8e4nv", b_ptr="*fp8e4nv"), grid,
                                    a_scale)


class StandinLibraryApi(StandinApi):
    """The stand-in with a stand-in vendor library: ``torch.matmul`` computed with numpy on the
    stand-in memory (the real worker times torch.matmul; without this the worker looks for torch,
    which a CI machine does not have, or has without a GPU)."""

    def library_launcher(self, name):
        if name == "torch._scaled_mm":
            return self._scaled_mm_launcher
        if name != "torch.matmul":
            raise GpuError("this agent times torch.matmul only, not %r" % name, load=True)

        def launcher(data):
            s = data.shape
            types = {"a_ptr": "*" + s["dtype"], "b_ptr": "*" + s["dtype"], "c_ptr": "*" + s["dtype"]}

            def launch(i, stream=None):
                self._matmul_kernel({}, data.values(i), types, (1, 1, 1))

            import contextlib

            return launch, contextlib.nullcontext(), "numpy %s (stand-in)" % np.__version__

        return launcher


    def _scaled_mm_launcher(self, data):
        """The fp8 block-scaled product of the shape's buffers, as the fp8 kernel computes it."""
        import contextlib

        types = {"%s_ptr" % op["name"]: "*" + {"fp8e4m3fn": "fp8e4nv", "fp8e4m3fnuz": "fp8e4b8"}.get(op["dtype"], op["dtype"])
                 for op in data.shape["operands"]}

        def launch(i, stream=None):
            self._fp8_blockscale_kernel({}, data.values(i), types, (1, 1, 1))

        return launch, contextlib.nullcontext(), "numpy %s (stand-in)" % np.__version__


def main(argv):
    from remote_agent.runners.gpu_worker import worker_main

    if argv and argv[0] == "worker":
        return worker_main(argv[1:], api=StandinApi())
    print("usage: gpu_standin.py worker ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
