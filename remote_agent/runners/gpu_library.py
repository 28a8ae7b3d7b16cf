"""The vendor library beside the kernel's variants: where the manifest's ``library`` field asks
for it (``harness build --library``), the agent adds one job per shape, variant ``lib:<name>``
(``library_plan``, in the agent process), and the worker times the library (through torch:
cuBLAS / hipBLASLt) on the same device buffers with the same profiler and the same checks as the
kernel's variants (``run_library``, in the worker). The launchers are the kernel's: its device
plug-in's ``LIBRARIES`` (gpu_plugin.py). Standard library only (torch where the node has it)."""

from .. import contract
from .gpu_api import GpuError
from .gpu_timing import check_and_time

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
    launchers = worker.device_plugin.LIBRARIES
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


def torch_runtime(torch):
    """The GPU runtime torch was built with, for a row's message."""
    return ("hip %s" % torch.version.hip) if getattr(torch.version, "hip", None) else ("cuda %s" % torch.version.cuda)
