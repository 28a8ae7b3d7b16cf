"""The fp32 reference a GPU worker checks every answer against, for the kernels whose reference
it knows (the manifest's ``device_reference``: ``matmul``, C = A @ B; ``fp8_blockscale``, the fp8
block-scaled GEMM, gpu_reference_fp8.py): torch where the node has it (cross-checked against the
bundle's reference kernel on every shape), else that kernel, itself checked against the host
(numpy or plain Python, fp64) on small odd shapes at start. Standard library only (torch and
numpy where present)."""

import array
import math
import struct

from ..contract import DTYPE_BYTES
from .gpu_api import GpuError
from .gpu_launch import cdiv
from . import gpu_reference_fp8
from .gpu_memory import ShapeData, strides, torch_view


MATMUL = "matmul"  # the manifest's device_reference of C = A @ B kernels


def pick_reference(worker, mode):
    """``"torch"`` (and sets ``worker.torch``) or ``"kernel"``."""
    mode = mode or "auto"
    if worker.manifest.get("device_reference") not in REFERENCES:
        raise _fatal("the bundle's kernel %s declares no reference the GPU worker computes (device_reference "
                     "%r; this worker knows %s)" % (worker.manifest.get("kernel"),
                                                    worker.manifest.get("device_reference"), ", ".join(REFERENCES)))
    if mode in ("auto", "torch") and worker.manifest["target"]["backend"] in ("cuda", "hip"):
        try:
            import torch  # noqa: F401

            if torch.cuda.is_available():
                torch.cuda.init()
                worker.torch = torch
                return "torch"
        except Exception as exc:
            if mode == "torch":
                raise GpuError("--reference torch, but torch is not usable here: %s" % exc)
    return "kernel"


def _fatal(message):
    exc = GpuError(message)
    exc.fatal = True
    return exc


def compute_reference(worker, data):
    """Write the shape's reference (``ref``, fp32) into its buffer; with torch, also record in
    ``data.crosscheck`` how far the conservative kernel is from it on this very shape."""
    ref = data.ptr("ref")
    n = data.operands["ref"]["elements"]
    data.crosscheck = None
    if worker.reference_mode == "torch":
        worker.api.synchronize()  # torch works on its own stream: the inputs must be there
        REFERENCES[worker.manifest["device_reference"]][0](worker.torch, data)
        tmp = worker.api.alloc(n * 4)
        try:
            run_reference_kernel(worker, data, tmp)
            worker.api.synchronize()
            data.crosscheck = worker.errors(tmp, ref, n, "fp32", 0.0, 0.0)[0]
        finally:
            worker.api.free(tmp)
    else:
        run_reference_kernel(worker, data, ref)


def run_reference_kernel(worker, data, out_ptr):
    s = data.shape
    k = worker.support_kernel("reference", s["dtype"])
    cfg = worker.manifest["toolchain"]["support"]["reference_%s" % s["dtype"]]["config"]
    grid = (cdiv(s["dims"]["M"], cfg["BLOCK_M"]) * cdiv(s["dims"]["N"], cfg["BLOCK_N"]), 1, 1)
    values = data.values(0)
    values.update(c_ptr=out_ptr, ws_ptr=0, lock_ptr=0)
    k.run(grid, k.params(values, grid))


def torch_reference(torch, data):
    d = data.shape["dims"]
    a, b = data.torch_operands(torch)
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = torch.matmul(a.float(), b.float())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow
    torch_view(torch, data.ptr("ref"), d["M"], d["N"], "fp32").copy_(ref)
    torch.cuda.synchronize()


def matmul_shape(M, N, K, dtype, layout, shape_id="selfcheck"):
    """A matmul shape as the manifest writes it (harness/kernels/matmul's declaration)."""
    def op(name, role, dims, op_dtype):
        n = dims[0] * dims[1]
        return {"name": name, "role": role, "dtype": op_dtype, "shape": list(dims), "elements": n,
                "bytes": n * DTYPE_BYTES[op_dtype]}

    scalars = {"M": M, "N": N, "K": K}
    scalars.update(strides(M, N, K, layout))
    return {"id": shape_id, "dims": {"M": M, "N": N, "K": K}, "dtype": dtype, "layout": layout,
            "operands": [op("a", "input", (M, K), dtype), op("b", "input", (K, N), dtype),
                         op("c", "output", (M, N), dtype), op("ref", "reference", (M, N), "fp32")],
            "scalars": scalars}


def check_reference_kernel(worker):
    """The reference kernel against the host (numpy or plain Python, fp64) on small odd shapes,
    one per dtype (and layout) in the bundle; a failure stops the run."""
    return REFERENCES[worker.manifest["device_reference"]][1](worker)


def _check_fp8_reference(worker):
    report = {}
    for dtype in sorted({s["dtype"] for s in worker.manifest["shapes"]}):
        rel = gpu_reference_fp8.self_check(worker, ShapeData, run_reference_kernel, dtype)
        report[dtype] = rel
        if not rel <= 1e-5:
            raise _fatal("the reference kernel disagrees with the host on a 67x45x300 %s product (relative "
                         "error %.3g); no answer can be checked" % (dtype, rel))
    return report


def _check_matmul_reference(worker):
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
            raise _fatal("the reference kernel disagrees with the host on a 67x45x83 %s %s product "
                         "(relative error %.3g); no answer can be checked" % (key[0], key[1], rel))
    return report


def decode(raw, dtype):
    if dtype == "fp32":
        return list(array.array("f", raw))
    if dtype == "fp16":
        return list(struct.unpack("<%de" % (len(raw) // 2), raw))
    halves = array.array("H", raw)
    words = array.array("I", [h << 16 for h in halves])
    return list(array.array("f", words.tobytes()))


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


# device_reference -> (torch_reference(torch, data), check of the reference kernel against the host)
REFERENCES = {MATMUL: (torch_reference, _check_matmul_reference),
              gpu_reference_fp8.NAME: (gpu_reference_fp8.torch_reference, _check_fp8_reference)}
