"""Which GPU driver API each backend gets: the table of GPU APIs by backend name.

The modules are imported only when their backend is asked for (cuda.py binds libcuda, hip.py
libamdhip64), so a node with one vendor's driver never loads the other's. Standard library only.
"""

import importlib
import os

from .gpu_api import GpuError

# backend -> "module:Class" of its driver API (the module relative to this package)
GPU_APIS = {
    "cuda": ".cuda:CudaApi",
    "hip": ".hip:HipApi",
}


def api_for(backend):
    """The driver API of a backend. HARNESS_GPU_API=module:Class puts a stand-in in its place
    (the tests' CPU stand-in, tests/gpu_standin.py)."""
    spec = os.environ.get("HARNESS_GPU_API") or GPU_APIS.get(backend)
    if spec is None:
        raise GpuError("no GPU runner for backend %r" % backend)
    module, cls = spec.split(":")
    return getattr(importlib.import_module(module, __package__), cls)()
