"""What a GPU driver API is to the GPU runner: the interface (cuda.CudaApi and hip.HipApi
implement it, tests/gpu_standin.py stands in for it) and its error. Which one a backend gets is
gpu_backends.py's table. Standard library only."""


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
