"""The fp32 reference a GPU worker checks every answer against: torch where the node has it
(through the kernel's device plug-in, cross-checked against the bundle's reference kernel on
every shape), else that kernel, itself checked against the host on small odd shapes at start (the
plug-in's ``check_reference_kernel``). Which reference a kernel has is its plug-in's business
(gpu_plugin.py); nothing here names a kernel. Standard library only (torch where present)."""

import array
import math
import struct

from .gpu_api import GpuError


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


def fatal(message):
    """A GpuError that ends the run: no answer could be checked."""
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
        worker.device_plugin.torch_reference(worker.torch, data)
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
    """The bundle's reference kernel on the shape's inputs, its (first) output at ``out_ptr``;
    the grid is the plug-in's."""
    s = data.shape
    k = worker.support_kernel("reference", s["dtype"])
    cfg = worker.manifest["toolchain"]["support"]["reference_%s" % s["dtype"]]["config"]
    grid = tuple(worker.device_plugin.reference_grid(s, cfg))
    values = data.values(0)
    values["%s_ptr" % data.outputs()[0]["name"]] = out_ptr
    values.update(ws_ptr=0, lock_ptr=0)
    k.run(grid, k.params(values, grid))


def check_reference_kernel(worker):
    """The plug-in's check of the reference kernel against the host; a failure stops the run."""
    return worker.device_plugin.check_reference_kernel(worker)


def decode(raw, dtype):
    """Downloaded fp32, fp16 or bf16 bytes as a list of floats."""
    if dtype == "fp32":
        return list(array.array("f", raw))
    if dtype == "fp16":
        return list(struct.unpack("<%de" % (len(raw) // 2), raw))
    halves = array.array("H", raw)
    words = array.array("I", [h << 16 for h in halves])
    return list(array.array("f", words.tobytes()))


# ---- the host check of a plug-in's reference kernel on a small product (block-scaled GEMMs) ----------
SELF_CHECK_TOLERANCE = 1e-5  # the reference kernel and the host both compute in fp32 or better


def floats(raw):
    """Downloaded fp32 bytes as a list of floats."""
    out = array.array("f")
    out.frombytes(raw)
    return list(out)


def small_product_error(worker, small, host_reference):
    """The bundle's reference kernel on a small shape (a manifest shape dict): its inputs seeded
    on the device, then ``host_reference(got)`` (``got``: each input's and the reference's
    downloaded bytes by operand name; returns the expected values, row-major) against the
    kernel's output. Returns the relative error norm."""
    from .gpu_memory import ShapeData

    api = worker.api
    data = ShapeData(api, small, 1)
    try:
        for seed, op in enumerate(o for o in small["operands"] if o["role"] == "input"):
            worker.fill(data.ptr(op["name"]), op["elements"], op["dtype"], 11 + seed)
        run_reference_kernel(worker, data, data.ptr("ref"))
        api.synchronize()
        got = {op["name"]: api.dtoh(data.ptr(op["name"]), op["bytes"]) for op in small["operands"]
               if op["role"] in ("input", "reference")}
    finally:
        data.release()
    want = host_reference(got)
    ref = floats(got["ref"])
    d2 = math.fsum((g - w) ** 2 for g, w in zip(ref, want))
    r2 = math.fsum(w * w for w in want)
    return math.sqrt(d2 / r2) if r2 else float("inf")


def check_each_dtype(worker, self_check, product):
    """``self_check(worker, dtype)`` (a relative error) for every dtype of the bundle's shapes;
    an error over SELF_CHECK_TOLERANCE stops the run (``product`` names the small product in
    the message). Returns the errors by dtype."""
    report = {}
    for dtype in sorted({s["dtype"] for s in worker.manifest["shapes"]}):
        rel = self_check(worker, dtype)
        report[dtype] = rel
        if not rel <= SELF_CHECK_TOLERANCE:
            raise fatal("the reference kernel disagrees with the host on a %s %s product (relative error %.3g); no "
                        "answer can be checked" % (product, dtype, rel))
    return report
