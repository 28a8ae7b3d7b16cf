"""What a GPU driver API is to the GPU runner: the interface (cuda.CudaApi and hip.HipApi
implement it, tests/gpu_standin.py stands in for it), its error, and which one a backend gets.
Standard library only."""

import os


class GpuError(Exception):
    """A driver call failed. ``sticky``: the context is lost; ``load``: the artifact is unusable."""

    def __init__(self, message, code=0, sticky=False, load=False):
        super().__init__(message)
        self.code = code
        self.sticky = sticky
        self.load = load


class GpuApi(object):
    """What cuda.CudaApi and hip.HipApi provide (see cuda.py for each call)."""

    backend = None
    visible_env = None


def api_for(backend):
    """The driver API of a backend. HARNESS_GPU_API=module:Class puts a stand-in in its place
    (the tests' CPU stand-in, tests/gpu_standin.py)."""
    standin = os.environ.get("HARNESS_GPU_API")
    if standin:
        import importlib

        module, cls = standin.split(":")
        return getattr(importlib.import_module(module), cls)()
    if backend == "cuda":
        from .cuda import CudaApi

        return CudaApi()
    if backend == "hip":
        from .hip import HipApi

        return HipApi()
    raise GpuError("no GPU runner for backend %r" % backend)
