"""The fp32 reference a GPU worker checks every answer against: torch where the node has it
(cross-checked against the bundle's conservative reference kernel on every shape), else that
kernel, itself checked against the host (numpy or plain Python, fp64) on small odd shapes at
start. Standard library only (torch and numpy where present)."""

import array
import math
import struct

from .gpu_api import GpuError
from .gpu_launch import cdiv
from .gpu_memory import ShapeData, torch_view


def pick_reference(worker, mode):
    """``"torch"`` (and sets ``worker.torch``) or ``"kernel"``."""
    mode = mode or "auto"
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


def compute_reference(worker, data):
    """Write the shape's reference into ``data.ref``; with torch, also record in
    ``data.crosscheck`` how far the conservative kernel is from it on this very shape."""
    s = data.shape
    data.crosscheck = None
    if worker.reference_mode == "torch":
        worker.api.synchronize()  # torch works on its own stream: the inputs must be there
        torch_reference(worker.torch, data)
        tmp = worker.api.alloc(s["M"] * s["N"] * 4)
        try:
            run_reference_kernel(worker, data, tmp)
            worker.api.synchronize()
            data.crosscheck = worker.errors(tmp, data.ref, s["M"] * s["N"], "fp32", 0.0, 0.0)[0]
        finally:
            worker.api.free(tmp)
    else:
        run_reference_kernel(worker, data, data.ref)


def run_reference_kernel(worker, data, out_ptr):
    s = data.shape
    k = worker.support_kernel("reference", s["dtype"])
    cfg = worker.manifest["toolchain"]["support"]["reference_%s" % s["dtype"]]["config"]
    grid = (cdiv(s["M"], cfg["BLOCK_M"]) * cdiv(s["N"], cfg["BLOCK_N"]), 1, 1)
    values = data.values(0)
    values.update(c_ptr=out_ptr, ws_ptr=0, lock_ptr=0)
    k.run(grid, k.params(values, grid))


def torch_reference(torch, data):
    s = data.shape
    M, N = s["M"], s["N"]
    a, b = data.torch_operands(torch)
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = torch.matmul(a.float(), b.float())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow
    torch_view(torch, data.ref, M, N, "fp32").copy_(ref)
    torch.cuda.synchronize()


def check_reference_kernel(worker):
    """The reference kernel against the host (numpy or plain Python, fp64) on small odd shapes,
    one per dtype and layout in the bundle; a failure stops the run."""
    api = worker.api
    seen, report = set(), {}
    for s in worker.manifest["shapes"]:
        key = (s["dtype"], s["layout"])
        if key in seen:
            continue
        seen.add(key)
        small = {"M": 67, "N": 45, "K": 83, "dtype": s["dtype"], "layout": s["layout"], "id": "selfcheck"}
        data = ShapeData(api, small, 1)
        try:
            worker.fill(data.a[0], 67 * 83, s["dtype"], 11)
            worker.fill(data.b[0], 83 * 45, s["dtype"], 12)
            run_reference_kernel(worker, data, data.ref)
            api.synchronize()
            a = decode(api.dtoh(data.a[0], data.a_bytes), s["dtype"])
            b = decode(api.dtoh(data.b[0], data.b_bytes), s["dtype"])
            got = decode(api.dtoh(data.ref, 67 * 45 * 4), "fp32")
        finally:
            data.release()
        want = host_matmul(a, b, 67, 45, 83, s["layout"])
        d2 = sum((g - w) ** 2 for g, w in zip(got, want))
        r2 = sum(w * w for w in want)
        rel = math.sqrt(d2 / r2) if r2 else float("inf")
        report["%s_%s" % key] = rel
        if not rel <= 1e-5:
            exc = GpuError("the reference kernel disagrees with the host on a 67x45x83 %s %s product "
                           "(relative error %.3g); no answer can be checked" % (key[0], key[1], rel))
            exc.fatal = True
            raise exc
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
