"""The softmax's side of the GPU agent (shipped in the bundle, hash-checked, loaded by the
worker): the fp32 reference through torch, the check of the bundle's reference kernel against
the host, that kernel's grid (one program per row) and the library (``torch.softmax``).
Runs on the node: Python >= 3.8 standard library, torch and numpy where present."""

import math

from remote_agent.contract import DTYPE_BYTES
from remote_agent.runners.gpu_api import GpuError
from remote_agent.runners.gpu_library import torch_runtime
from remote_agent.runners.gpu_memory import ShapeData, torch_view
from remote_agent.runners.gpu_reference import decode, fatal, run_reference_kernel


def reference_grid(shape, config):
    return (shape["dims"]["ROWS"], 1, 1)


def torch_reference(torch, data):
    """ref = softmax(X) along the rows in fp32, into the ``ref`` buffer."""
    d = data.shape["dims"]
    ref = torch.softmax(data.torch_operands(torch)["x"].float(), dim=1)
    torch_view(torch, data.ptr("ref"), d["ROWS"], d["COLS"], "fp32").copy_(ref)
    torch.cuda.synchronize()


def small_shape(rows, cols, dtype):
    def op(name, role, op_dtype):
        n = rows * cols
        return {"name": name, "role": role, "dtype": op_dtype, "shape": [rows, cols], "strides": [cols, 1],
                "elements": n, "bytes": n * DTYPE_BYTES[op_dtype]}

    return {"id": "selfcheck", "dims": {"ROWS": rows, "COLS": cols}, "dtype": dtype, "layout": "",
            "operands": [op("x", "input", dtype), op("y", "output", dtype), op("ref", "reference", "fp32")],
            "scalars": {"ROWS": rows, "COLS": cols, "stride_x": cols, "stride_y": cols}}


def host_softmax(x, rows, cols):
    out = []
    for r in range(rows):
        row = x[r * cols:(r + 1) * cols]
        top = max(row)
        e = [math.exp(v - top) for v in row]
        total = math.fsum(e)
        out += [v / total for v in e]
    return out


def check_reference_kernel(worker):
    """The reference kernel against the host (fp64) on 7 x 301 per dtype; a failure stops the run."""
    api, report = worker.api, {}
    for dtype in sorted({s["dtype"] for s in worker.manifest["shapes"]}):
        small = small_shape(7, 301, dtype)
        data = ShapeData(api, small, 1)
        try:
            worker.fill(data.ptr("x"), 7 * 301, dtype, 11)
            run_reference_kernel(worker, data, data.ptr("ref"))
            api.synchronize()
            x = decode(api.dtoh(data.ptr("x"), data.operands["x"]["bytes"]), dtype)
            got = decode(api.dtoh(data.ptr("ref"), 7 * 301 * 4), "fp32")
        finally:
            data.release()
        want = host_softmax(x, 7, 301)
        d2 = math.fsum((g - w) ** 2 for g, w in zip(got, want))
        r2 = math.fsum(w * w for w in want)
        rel = math.sqrt(d2 / r2) if r2 else float("inf")
        report[dtype] = rel
        if not rel <= 1e-5:
            raise fatal("the reference kernel disagrees with the host on a 7x301 %s softmax (relative error "
                        "%.3g); no answer can be checked" % (dtype, rel))
    return report


def torch_softmax_launcher(torch, stream, data):
    """torch.softmax(X, dim=1) into Y on the worker's stream (torch's own kernel, its defaults)."""
    d = data.shape["dims"]
    xs = [data.torch_operands(torch, r)["x"] for r in range(data.sets)]
    y = torch_view(torch, data.ptr("y"), d["ROWS"], d["COLS"], data.shape["dtype"])
    stream = torch.cuda.ExternalStream(stream)

    def launch(i, stream_=None):
        torch.softmax(xs[i % len(xs)], 1, out=y)

    try:  # one run first: where this torch cannot write into Y, its error is the row's load_error
        with torch.cuda.stream(stream):
            launch(0)
        torch.cuda.synchronize()
    except Exception as exc:
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        raise GpuError("torch %s cannot run softmax into the output: %s" % (torch.__version__, lines[0][:240]),
                       load=True)
    return launch, torch.cuda.stream(stream), "torch %s (%s)" % (torch.__version__, torch_runtime(torch))


LIBRARIES = {"torch.softmax": torch_softmax_launcher}
