"""The vendor library beside the kernel's variants: where the manifest's ``library`` field asks
for it (``harness build --library``), the agent adds one job per shape, variant
``lib:torch.matmul`` (``library_plan``, in the agent process), and the worker times
``torch.matmul`` (cuBLAS / hipBLASLt) on the same device buffers with the same profiler and the
same checks as the kernel's variants (``run_library``, in the worker). Standard library only
(torch where the node has it)."""

from .. import contract
from .gpu_api import GpuError
from .gpu_memory import torch_view
from .gpu_timing import check_and_time

TORCH_MATMUL = "torch.matmul"
TORCH_SCALED_MM = "torch._scaled_mm"  # the fp8 block-scaled GEMM's library (harness/kernels/fp8_blockscale)
LIBRARY_PREFIX = "lib:"


def library_plan(manifest, selected=None):
    """The library jobs a bundle asks for: ``(variants, jobs)``, one variant ``lib:<name>`` per
    library of the manifest's ``library`` field (``{name: [shape ids]}``, or a list of names for
    every shape; absent in older bundles: none) and one job per shape. With ``--select`` (a fleet
    host's share), a shape's library job goes with the shape's first job, so that exactly one
    host measures it, beside the shape's variants (a shape with no job: with job 0)."""
    wanted = manifest.get("library") or {}
    shape_ids = [s["id"] for s in manifest["shapes"]]
    if isinstance(wanted, (list, tuple)):
        wanted = dict((name, shape_ids) for name in wanted)
    first = {}
    for i, job in enumerate(manifest["jobs"]):
        first.setdefault(job["shape"], i)
    variants, jobs = [], []
    for name, ids in wanted.items():
        vid, ids = LIBRARY_PREFIX + name, set(ids or ())
        variants.append({"id": vid, "config": {}, "dtype": None, "specialization": [], "status": contract.OK,
                         "artifact": None, "sha256": None, "message": "", "launch": {"library": name},
                         "compile_seconds": 0.0})
        for sid in (i for i in shape_ids if i in ids):
            if selected is None or first.get(sid, 0) in selected:
                jobs.append({"variant": vid, "shape": sid, "grid": None})
    return variants, jobs


def run_library(worker, variant, shape):
    """Time the library on the shape's device buffers exactly as a variant is timed (same
    inputs, reference, checks, profiler). Without a usable torch: ``load_error`` saying so."""
    try:
        launcher = library_launcher(worker, variant["launch"]["library"])
    except GpuError as exc:
        if exc.sticky:
            raise
        return {"status": contract.LOAD_ERROR, "message": "%s: %s" % (variant["id"], exc)}
    data = worker.data_for(shape)
    try:
        launch, context, note = launcher(data)
    except GpuError as exc:
        if exc.sticky:
            raise
        return {"status": contract.LOAD_ERROR, "message": "%s: %s" % (variant["id"], exc)}
    with context:
        result = check_and_time(worker, data, shape, launch, {}, None, variant, None)
    result["message"] = "; ".join(m for m in (note, result.get("message")) if m)
    return result


def library_launcher(worker, name):
    """``launcher(data) -> (launch(i), context to time it in, note for the row's message)``.
    A stand-in API may stand in for the library too (tests/gpu_standin.py)."""
    own = worker.api.library_launcher
    if own is not None:
        return own(name)
    launchers = {TORCH_MATMUL: torch_matmul_launcher, TORCH_SCALED_MM: torch_scaled_mm_launcher}
    if name not in launchers:
        raise GpuError("this agent times %s, not %r" % (" and ".join(sorted(launchers)), name), load=True)
    torch = library_torch(worker)
    return lambda data: launchers[name](torch, worker.api.stream, data)


def library_torch(worker):
    """torch, once per worker (``worker.torch`` when the reference uses it already)."""
    if worker.torch is not None:
        return worker.torch
    if worker.torch_error is None:
        try:
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError("torch %s sees no GPU" % torch.__version__)
            torch.cuda.init()
            worker.torch = torch
            return torch
        except Exception as exc:  # ImportError, or a torch built without this GPU's runtime
            worker.torch_error = "%s: %s" % (type(exc).__name__, exc)
    raise GpuError("torch is not usable on this node (%s); no library time" % worker.torch_error, load=True)


def torch_matmul_launcher(torch, stream, data):
    """torch.matmul(A, B, out=C) on the worker's own stream (so the events and the L2 flush
    bracket it as they bracket a variant), on the same buffers and layouts, torch's defaults."""
    s = data.shape
    operands = [data.torch_operands(torch, r) for r in range(data.sets)]
    c = torch_view(torch, data.ptr("c"), s["dims"]["M"], s["dims"]["N"], s["dtype"])
    stream = torch.cuda.ExternalStream(stream)

    def launch(i, stream_=None):
        a, b = operands[i % len(operands)]
        torch.matmul(a, b, out=c)

    return launch, torch.cuda.stream(stream), "torch %s (%s)" % (torch.__version__, _runtime(torch))


def torch_scaled_mm_launcher(torch, stream, data):
    """``torch._scaled_mm`` with blockwise scales (1 x 128 on A, 128 x 128 on B: cuBLASLt's
    DeepSeek-style scaling, CUDA 12.9+ on sm90) on the fp8 block-scaled GEMM's buffers: A (M x K),
    B (N x K, given as its K x N transpose), C in bf16, no fast accumulation (torch refuses it with
    block scales). torch wants A's scales M-major and the rows of B's scales padded to a multiple
    of 4: those copies are made here, once per input copy, outside the timing. One product runs
    here first: where this torch cannot do it, its error is the row's load_error."""
    from .gpu_reference_fp8 import SCALE_BLOCK, cdiv, torch_operands

    d = data.shape["dims"]
    M, N = d["M"], d["N"]
    c = torch_view(torch, data.ptr("c"), M, N, "bf16")
    stream = torch.cuda.ExternalStream(stream)
    operands = []
    with torch.cuda.stream(stream):
        for r in range(data.sets):
            a, b, a_scale, b_scale = torch_operands(torch, data, r)
            sn, sk = b_scale.shape
            padded = torch.zeros((sn, cdiv(sk, 4) * 4), dtype=torch.float32, device=b_scale.device)[:, :sk]
            padded.copy_(b_scale)
            operands.append((a, b.t(), a_scale.t().contiguous().t(), padded.t()))

        def launch(i, stream_=None):
            a, b, sa, sb = operands[i % len(operands)]
            torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, out=c)

        try:
            launch(0)
            torch.cuda.synchronize()
        except Exception as exc:  # this torch, GPU or shape has no blockwise-scaled product
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            raise GpuError("torch %s cannot do this blockwise-scaled product: %s" % (torch.__version__, lines[0][:240]),
                           load=True)
    note = "torch %s (%s), blockwise 1x%d / %dx%d scales" % (torch.__version__, _runtime(torch), SCALE_BLOCK,
                                                           SCALE_BLOCK, SCALE_BLOCK)
    return launch, torch.cuda.stream(stream), note


def _runtime(torch):
    return ("hip %s" % torch.version.hip) if getattr(torch.version, "hip", None) else ("cuda %s" % torch.version.cuda)
