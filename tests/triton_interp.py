"""Runs the harness's Triton matmul (the very source the GPU builds compile) in Triton's own
interpreter on the CPU: numpy buffers, real masks, atomics and tensor descriptors, one program at
a time in an order the caller picks. What a GPU run would check (the answer, the split-K workspace
and counters), without a GPU.

Triton decides at import whether its functions (its own library's too) are interpreted, so the
cases run in a child process started with ``TRITON_INTERPRET=1``: ``run_cases([case, ...])``
sends them as JSON and returns, per case, the output C, the workspace, the counters after the
launch and the program order, as numpy arrays.
"""

import base64
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np

from harness.kernels.matmul.descriptors import tensor_descriptors

ROOT = Path(__file__).resolve().parents[1]
NP_TYPES = {"fp16": np.float16, "fp32": np.float32}


def run_cases(cases, timeout=900):
    """cases: dicts of M, N, K, layout, config and optionally dtype, c_dtype, programs, order_seed."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "tests.triton_interp"], input=json.dumps(cases), cwd=str(ROOT),
                          env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError("interpreter child exited %d:\n%s" % (proc.returncode, proc.stderr[-4000:]))
    out = []
    for case, r in zip(cases, json.loads(proc.stdout)):
        c_dtype = case.get("c_dtype") or case.get("dtype", "fp16")
        out.append({"C": _decode(r["C"], NP_TYPES[c_dtype], (case["M"], case["N"])),
                    "ws": _decode(r["ws"], np.float32, tuple(r["ws_shape"])),
                    "locks": _decode(r["locks"], np.int32, (-1,)), "order": [tuple(p) for p in r["order"]],
                    "A": _decode(r["A"], NP_TYPES[case.get("dtype", "fp16")], (case["M"], case["K"])),
                    "B": _decode(r["B"], NP_TYPES[case.get("dtype", "fp16")], (case["K"], case["N"]))})
    return out


def rel_err(result):
    ref = result["A"].astype(np.float64) @ result["B"].astype(np.float64)
    diff = result["C"].astype(np.float64) - ref
    return float(np.linalg.norm(diff) / max(1e-30, np.linalg.norm(ref)))


def _encode(arr):
    return base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode()


def _decode(text, dtype, shape):
    return np.frombuffer(base64.b64decode(text), dtype=dtype).reshape(shape)


def _ptr(arr, ty):
    import triton.language as tl
    from triton.runtime import interpreter

    pt = tl.pointer_type(ty)
    return tl.tensor(interpreter.TensorHandle(np.array([arr.ctypes.data], dtype=np.uint64), pt), pt)


def _i32(v):
    import triton.language as tl
    from triton.runtime import interpreter

    return tl.tensor(interpreter.TensorHandle(np.array([v], dtype=np.int32), tl.int32), tl.int32)


def _descriptor(base, d, values):
    """The tensor descriptor argument ``d`` (harness/kernels/matmul/descriptors.py) over ``base``, as
    Triton's interpreter makes one from a host TensorDescriptor: the launch's values size it."""
    import triton.language as tl
    from triton.runtime.interpreter import interpreter_semantic

    return interpreter_semantic.make_tensor_descriptor(
        base=base, shape=[values[n] for n in d.shape], strides=[values[d.strides[0]], tl.constexpr(1)],
        block_shape=[tl.constexpr(b) for b in d.block], padding_option="zero")


class Run:
    """One launch of matmul_kernel (in the interpreter child): inputs, output, workspace, counters."""

    def __init__(self, M, N, K, layout, config, dtype="fp16", c_dtype=None, programs=5, order_seed=None, seed=0):
        import triton.language as tl

        from harness.kernels.matmul import triton_kernel

        tl_types = {"fp16": tl.float16, "fp32": tl.float32}
        c_dtype = c_dtype or dtype
        rng = np.random.default_rng([seed, M, N, K])
        self.A = rng.uniform(-1, 1, (M, K)).astype(NP_TYPES[dtype])
        self.B = rng.uniform(-1, 1, (K, N)).astype(NP_TYPES[dtype])
        a = np.ascontiguousarray(self.A.T) if layout[0] == "T" else self.A
        b = np.ascontiguousarray(self.B.T) if layout[1] == "T" else self.B
        stride_am, stride_ak = (1, M) if layout[0] == "T" else (K, 1)
        stride_bk, stride_bn = (1, K) if layout[1] == "T" else (N, 1)
        self.C = np.full((M, N), np.nan, NP_TYPES[c_dtype])  # poisoned: an unwritten element shows
        split = config.get("SPLIT_K", 1)
        tiles = -(-M // config["BLOCK_M"]) * -(-N // config["BLOCK_N"])
        stream_k = config.get("STREAM_K", 0)
        if stream_k:  # a BLOCK_M x BLOCK_N slot per program, a counter per stream-K tile (fewer than programs)
            self.ws = np.full((programs, config["BLOCK_M"], config["BLOCK_N"]), np.nan, np.float32)
            self.locks = np.zeros(programs, np.int32)
        else:
            self.ws = np.full((split, M, N), np.nan, np.float32)  # the kernel must not rely on its contents
            self.locks = np.zeros(tiles, np.int32)
        tma = config.get("TMA", 0)
        args = dict(a_ptr=_ptr(a, tl_types[dtype]), b_ptr=_ptr(b, tl_types[dtype]), c_ptr=_ptr(self.C, tl_types[c_dtype]),
                    ws_ptr=_ptr(self.ws, tl.float32), lock_ptr=_ptr(self.locks, tl.int32),
                    M=_i32(M), N=_i32(N), K=_i32(K), stride_am=_i32(stride_am), stride_ak=_i32(stride_ak),
                    stride_bk=_i32(stride_bk), stride_bn=_i32(stride_bn), stride_cm=_i32(N), stride_cn=_i32(1))
        constexprs = dict(BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"],
                          GROUP_M=config.get("GROUP_M", 1), SPLIT_K=split, EVEN_K=K % config["BLOCK_K"] == 0,
                          IEEE=dtype == "fp32", TMA=tma, SWAP_AB=config.get("SWAP_AB", 0),
                          PERSISTENT=config.get("PERSISTENT", 0), A_T=bool(tma) and layout[0] == "T",
                          B_T=bool(tma) and layout[1] == "T", STREAM_K=stream_k)
        args.update({k: tl.constexpr(v) for k, v in constexprs.items()})
        args.update({name: tl.constexpr(None) for name in triton_kernel.MATMUL_DESCRIPTOR_ARGS})
        for d in tensor_descriptors(config, constexprs["A_T"], constexprs["B_T"]):
            args[d.name] = _descriptor(args[d.operand + "_ptr"], d, args)
        if stream_k:
            grid = (programs, 1, 1)
        elif config.get("PERSISTENT"):
            grid = (min(tiles, programs), 1, 1)
        else:
            grid = (tiles, split, 1)
        self.order = [(x, y) for x in range(grid[0]) for y in range(grid[1])]
        if order_seed is not None:
            random.Random(order_seed).shuffle(self.order)
        self._launch(args, grid)

    def _launch(self, args, grid):
        from triton.runtime import interpreter

        from harness.kernels.matmul import triton_kernel

        fn = triton_kernel.matmul_kernel
        scope = interpreter._patch_lang(fn.fn)
        try:
            interpreter.interpreter_builder.set_grid_dim(*grid)
            for x, y in self.order:
                interpreter.interpreter_builder.set_grid_idx(x, y, 0)
                fn.fn(**args)
        finally:
            scope.restore()


def _main():
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("run with TRITON_INTERPRET=1 (tests.triton_interp.run_cases does)")
    results = []
    for case in json.loads(sys.stdin.read()):
        run = Run(**case)
        results.append({"C": _encode(run.C), "ws": _encode(run.ws), "ws_shape": run.ws.shape,
                        "locks": _encode(run.locks),
                        "order": run.order, "A": _encode(run.A), "B": _encode(run.B)})
    sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
    _main()
