"""The matmul's side of the GPU agent: shipped in the bundle (the manifest's ``device_plugin``,
hash-checked) and loaded by the GPU worker on the node, which knows no kernel by name.

It gives the worker the fp32 reference C = A @ B through torch (``torch_reference``), the check
of the bundle's reference kernel against the host on small odd shapes (``check_reference_kernel``),
that kernel's grid (``reference_grid``) and the library the variants are timed against
(``LIBRARIES``: ``torch.matmul``, cuBLAS / hipBLASLt). Runs on the node: Python >= 3.8 standard
library, torch and numpy where present.
"""

import math

from remote_agent.contract import DTYPE_BYTES
from remote_agent.runners.gpu_launch import cdiv
from remote_agent.runners.gpu_library import torch_runtime
from remote_agent.runners.gpu_memory import ShapeData, torch_view
from remote_agent.runners.gpu_reference import decode, fatal, run_reference_kernel


def reference_grid(shape, config):
    """The bundle's reference kernel's grid: one program per BLOCK_M x BLOCK_N tile of C."""
    d = shape["dims"]
    return (cdiv(d["M"], config["BLOCK_M"]) * cdiv(d["N"], config["BLOCK_N"]), 1, 1)


def torch_reference(torch, data):
    """ref = A @ B in fp32 (no TF32), into the ``ref`` buffer."""
    d = data.shape["dims"]
    ops = data.torch_operands(torch)
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = torch.matmul(ops["a"].float(), ops["b"].float())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow
    torch_view(torch, data.ptr("ref"), d["M"], d["N"], "fp32").copy_(ref)
    torch.cuda.synchronize()


def strides(M, N, K, layout):
    """Element strides of A (MxK), B (KxN), C (MxN) for a layout (harness.kernels.matmul.strides)."""
    a_t, b_t = layout[0] == "T", layout[1] == "T"
    return {"stride_am": 1 if a_t else K, "stride_ak": M if a_t else 1,
            "stride_bk": 1 if b_t else N, "stride_bn": K if b_t else 1, "stride_cm": N, "stride_cn": 1}


def matmul_shape(M, N, K, dtype, layout, shape_id="selfcheck"):
    """A shape as the manifest writes it for this kernel (its operand declaration)."""
    def op(name, role, dims, op_dtype, transposed=False):
        n = dims[0] * dims[1]
        return {"name": name, "role": role, "dtype": op_dtype, "shape": list(dims),
                "strides": [1, dims[0]] if transposed else [dims[1], 1], "elements": n,
                "bytes": n * DTYPE_BYTES[op_dtype]}

    scalars = {"M": M, "N": N, "K": K}
    scalars.update(strides(M, N, K, layout))
    return {"id": shape_id, "dims": {"M": M, "N": N, "K": K}, "dtype": dtype, "layout": layout,
            "operands": [op("a", "input", (M, K), dtype, layout[0] == "T"),
                         op("b", "input", (K, N), dtype, layout[1] == "T"),
                         op("c", "output", (M, N), dtype), op("ref", "reference", (M, N), "fp32")],
            "scalars": scalars}


def check_reference_kernel(worker):
    """The bundle's reference kernel against the host (numpy or plain Python, fp64) on a 67x45x83
    product per dtype and layout in the bundle; a failure stops the run. Returns the errors."""
    api = worker.api
    seen, report = set(), {}
    for s in worker.manifest["shapes"]:
        key = (s["dtype"], s["layout"])
        if key in seen:
            continue
        seen.add(key)
        small = matmul_shape(67, 45, 83, s["dtype"], s["layout"])
        data = ShapeData(api, small, 1)
        try:
            worker.fill(data.ptr("a"), 67 * 83, s["dtype"], 11)
            worker.fill(data.ptr("b"), 83 * 45, s["dtype"], 12)
            run_reference_kernel(worker, data, data.ptr("ref"))
            api.synchronize()
            a = decode(api.dtoh(data.ptr("a"), data.operands["a"]["bytes"]), s["dtype"])
            b = decode(api.dtoh(data.ptr("b"), data.operands["b"]["bytes"]), s["dtype"])
            got = decode(api.dtoh(data.ptr("ref"), 67 * 45 * 4), "fp32")
        finally:
            data.release()
        want = host_matmul(a, b, 67, 45, 83, s["layout"])
        d2 = sum((g - w) ** 2 for g, w in zip(got, want))
        r2 = sum(w * w for w in want)
        rel = math.sqrt(d2 / r2) if r2 else float("inf")
        report["%s_%s" % key] = rel
        if not rel <= 1e-5:
            raise fatal("the reference kernel disagrees with the host on a 67x45x83 %s %s product "
                        "(relative error %.3g); no answer can be checked" % (key[0], key[1], rel))
    return report


def host_matmul(a, b, M, N, K, layout):
    """fp64 product of stored A and B (numpy when present, plain Python otherwise)."""
    try:
        import numpy as np

        A = np.array(a, dtype=np.float64).reshape((K, M) if layout[0] == "T" else (M, K))
        B = np.array(b, dtype=np.float64).reshape((N, K) if layout[1] == "T" else (K, N))
        A = A.T if layout[0] == "T" else A
        B = B.T if layout[1] == "T" else B
        return list((A @ B).ravel())
    except ImportError:
        pass
    A = [[a[k * M + m] if layout[0] == "T" else a[m * K + k] for k in range(K)] for m in range(M)]
    Bt = [[b[n * K + k] if layout[1] == "T" else b[k * N + n] for k in range(K)] for n in range(N)]
    return [math.fsum(x * y for x, y in zip(A[m], Bt[n])) for m in range(M) for n in range(N)]


def torch_matmul_launcher(torch, stream, data):
    """torch.matmul(A, B, out=C) on the worker's own stream (so the events and the L2 flush
    bracket it as they bracket a variant), on the same buffers and layouts, torch's defaults."""
    s = data.shape
    operands = [data.torch_operands(torch, r) for r in range(data.sets)]
    c = torch_view(torch, data.ptr("c"), s["dims"]["M"], s["dims"]["N"], s["dtype"])
    stream = torch.cuda.ExternalStream(stream)

    def launch(i, stream_=None):
        ops = operands[i % len(operands)]
        torch.matmul(ops["a"], ops["b"], out=c)

    return launch, torch.cuda.stream(stream), "torch %s (%s)" % (torch.__version__, torch_runtime(torch))


# library name (the manifest's ``library``, a row's ``lib:<name>``) -> launcher(torch, stream, data)
LIBRARIES = {"torch.matmul": torch_matmul_launcher}
