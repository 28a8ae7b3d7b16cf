"""The CUDA driver API through ctypes on libcuda.so.1 (standard library only).

Every call's return code is checked; a failure raises GpuError with the driver's error name.
Errors that leave the context unusable (an illegal address, a launch that failed or timed out)
are marked ``sticky``: the worker reports the job and exits so that a fresh process replaces it.
"""

import ctypes

from .driver import DriverApi
from .gpu_api import GpuError

CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_FUNC_ATTRIBUTE_NUM_REGS = 4
CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2  # as Triton's launcher encodes its descriptors
CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DEFAULT = 0
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5
CU_CLUSTER_SCHEDULING_POLICY_SPREAD = 1  # as Triton's launcher asks

# cudaError codes after which the context is lost (the process must go)
STICKY = {
    700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT", 714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION", 716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    717: "CUDA_ERROR_INVALID_ADDRESS_SPACE", 718: "CUDA_ERROR_INVALID_PC", 719: "CUDA_ERROR_LAUNCH_FAILED",
    999: "CUDA_ERROR_UNKNOWN",
}
LOAD_ERRORS = {200, 209, 218, 219, 220, 221, 222, 300, 301, 500}  # invalid image, no binary for GPU, ...

_u64 = ctypes.c_uint64
_p = ctypes.c_void_p
_i = ctypes.c_int
_u = ctypes.c_uint
_sz = ctypes.c_size_t


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte value (the union's size)."""
    _fields_ = [("id", _i), ("pad", ctypes.c_char * 4), ("value", _u * 16)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig, what cuLaunchKernelEx takes."""
    _fields_ = [("grid", _u * 3), ("block", _u * 3), ("shared", _u), ("stream", _p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("num_attrs", _u)]


_SIGNATURES = {
    "cuInit": [_u],
    "cuDriverGetVersion": [ctypes.POINTER(_i)],
    "cuDeviceGetCount": [ctypes.POINTER(_i)],
    "cuDeviceGet": [ctypes.POINTER(_i), _i],
    "cuDeviceGetName": [ctypes.c_char_p, _i, _i],
    "cuDeviceGetAttribute": [ctypes.POINTER(_i), _i, _i],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_p), _i],
    "cuCtxSetCurrent": [_p],
    "cuCtxSynchronize": [],
    "cuMemAlloc_v2": [ctypes.POINTER(_u64), _sz],
    "cuMemFree_v2": [_u64],
    "cuMemGetInfo_v2": [ctypes.POINTER(_sz), ctypes.POINTER(_sz)],
    "cuMemcpyDtoH_v2": [_p, _u64, _sz],
    "cuMemcpyHtoD_v2": [_u64, _p, _sz],
    "cuMemcpyDtoDAsync_v2": [_u64, _u64, _sz, _p],
    "cuMemsetD16Async": [_u64, ctypes.c_ushort, _sz, _p],
    "cuMemsetD32Async": [_u64, _u, _sz, _p],
    "cuModuleLoadData": [ctypes.POINTER(_p), ctypes.c_char_p],
    "cuModuleUnload": [_p],
    "cuModuleGetFunction": [ctypes.POINTER(_p), _p, ctypes.c_char_p],
    "cuFuncSetAttribute": [_p, _i, _i],
    "cuFuncGetAttribute": [ctypes.POINTER(_i), _i, _p],
    "cuLaunchKernel": [_p, _u, _u, _u, _u, _u, _u, _u, _p, ctypes.POINTER(_p), ctypes.POINTER(_p)],
    "cuLaunchKernelEx": [ctypes.POINTER(LaunchConfig), _p, ctypes.POINTER(_p), ctypes.POINTER(_p)],
    "cuStreamCreate": [ctypes.POINTER(_p), _u],
    "cuEventCreate": [ctypes.POINTER(_p), _u],
    "cuEventRecord": [_p, _p],
    "cuEventSynchronize": [_p],
    "cuEventElapsedTime": [ctypes.POINTER(ctypes.c_float), _p, _p],
    "cuEventDestroy_v2": [_p],
    "cuTensorMapEncodeTiled": [_p, _i, _u, _p, ctypes.POINTER(_u64), ctypes.POINTER(_u64), ctypes.POINTER(_u),
                               ctypes.POINTER(_u), _i, _i, _i, _i],
    "cuProfilerStart": [],
    "cuProfilerStop": [],
}


CALLS = {
    "device_count": "cuDeviceGetCount", "device_name": "cuDeviceGetName", "mem_info": "cuMemGetInfo_v2",
    "alloc": "cuMemAlloc_v2", "free": "cuMemFree_v2", "dtoh": "cuMemcpyDtoH_v2", "htod": "cuMemcpyHtoD_v2",
    "dtod": "cuMemcpyDtoDAsync_v2",
    "memset16": "cuMemsetD16Async", "load_module": "cuModuleLoadData", "unload_module": "cuModuleUnload",
    "get_function": "cuModuleGetFunction", "launch": "cuLaunchKernel", "synchronize": "cuCtxSynchronize",
    "record": "cuEventRecord", "event_synchronize": "cuEventSynchronize", "elapsed": "cuEventElapsedTime",
    "destroy_event": "cuEventDestroy_v2",
}


class CudaApi(DriverApi):
    backend = "cuda"
    visible_env = "CUDA_VISIBLE_DEVICES"
    tensor_maps = True
    CALLS = CALLS
    SIGNATURES = _SIGNATURES
    device_pointer = _u64

    def __init__(self, library="libcuda.so.1"):
        try:
            self.lib = ctypes.CDLL(library)
        except OSError as exc:
            raise GpuError("cannot load %s (%s): no NVIDIA driver here" % (library, exc), code=-1)
        self._bind()
        self.lib.cuGetErrorName.argtypes = [_i, ctypes.POINTER(ctypes.c_char_p)]
        self.lib.cuGetErrorName.restype = _i
        self.stream = None
        self.ctx = None
        self.device = None

    # ---- errors ------------------------------------------------------------------------
    def check(self, rc, what):
        if rc == 0:
            return
        name = ctypes.c_char_p()
        if self.lib.cuGetErrorName(rc, ctypes.byref(name)) == 0 and name.value:
            text = name.value.decode()
        else:
            text = STICKY.get(rc, "CUDA error %d" % rc)
        raise GpuError("%s: %s (%d)" % (what, text, rc), code=rc, sticky=rc in STICKY,
                       load=rc in LOAD_ERRORS)

    # ---- devices -----------------------------------------------------------------------
    def init(self):
        self._call("cuInit", 0)

    def attribute(self, attr, index=None):
        v = _i()
        self._call("cuDeviceGetAttribute", ctypes.byref(v), attr, self.device if index is None else index)
        return v.value

    def open(self, index):
        """Make device ``index``'s primary context current and create the timing stream."""
        dev = _i()
        self._call("cuDeviceGet", ctypes.byref(dev), index)
        self.device = dev.value
        ctx = _p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), self.device)
        self._call("cuCtxSetCurrent", ctx)
        self.ctx = ctx
        stream = _p()
        self._call("cuStreamCreate", ctypes.byref(stream), CU_STREAM_NON_BLOCKING)
        self.stream = stream.value

    def facts(self):
        major = self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        free, total = self.mem_info()
        version = _i()
        self._call("cuDriverGetVersion", ctypes.byref(version))
        return {"name": self.device_name(self.device), "arch": "%d%d" % (major, minor),
                "sm_count": self.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                "l2_bytes": self.attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
                "shared_max": self.attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                "max_threads": self.attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
                "memory_bytes": total, "driver": version.value}

    def launch_cluster(self, fn, grid, ctas, block, shared, params, stream=None):
        """Launch ``fn`` in clusters of ``ctas`` CTAs along x (a kernel built with num_ctas):
        grid[0] clusters of them, spread over the GPCs as Triton's launcher asks."""
        if getattr(self.lib, "cuLaunchKernelEx", None) is None:
            raise GpuError("a kernel built for clusters of %d CTAs; this driver has no cuLaunchKernelEx "
                           "(CUDA 12.0 and later)" % ctas, load=True)
        attrs = (LaunchAttribute * 2)()
        attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attrs[0].value[0], attrs[0].value[1], attrs[0].value[2] = ctas, 1, 1
        attrs[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
        attrs[1].value[0] = CU_CLUSTER_SCHEDULING_POLICY_SPREAD
        config = LaunchConfig((_u * 3)(grid[0] * ctas, grid[1], grid[2]), (_u * 3)(*block), int(shared),
                              self.stream if stream is None else stream, attrs, 2)
        self._call("cuLaunchKernelEx", ctypes.byref(config), fn, params, None)

    # on the worker's stream, as DriverApi.dtod says
    def memset32(self, ptr, value, count):
        self._call("cuMemsetD32Async", ptr, value, int(count), self.stream)

    def set_dynamic_shared(self, fn, nbytes):
        self._call("cuFuncSetAttribute", fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(nbytes))

    def function_facts(self, fn):
        regs, local = _i(), _i()
        self._call("cuFuncGetAttribute", ctypes.byref(regs), CU_FUNC_ATTRIBUTE_NUM_REGS, fn)
        self._call("cuFuncGetAttribute", ctypes.byref(local), CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn)
        return {"regs": regs.value, "local_bytes": local.value}

    def encode_tensor_map(self, address, base, elem_type, elem_size, shape, strides, block, swizzle):
        """Write the CUtensorMap of a tiled 2-D (or n-D) view at ``address`` (128 bytes, 64-byte
        aligned): ``shape``, element ``strides`` (the last 1) and ``block`` outermost first, as
        Triton's own launcher encodes them (no interleave, L2 promotion 128 B, zeros out of bounds)."""
        rank = len(shape)
        dims = (_u64 * rank)(*reversed(shape))
        pitches = (_u64 * max(1, rank - 1))(*[strides[i] * elem_size for i in range(rank - 2, -1, -1)])
        box = (_u * rank)(*reversed(block))
        ones = (_u * rank)(*([1] * rank))
        if not hasattr(self.lib, "cuTensorMapEncodeTiled"):
            raise GpuError("this driver has no cuTensorMapEncodeTiled (CUDA 12 and later): no TMA", load=True)
        try:
            self._call("cuTensorMapEncodeTiled", address, elem_type, rank, base, dims, pitches, box, ones, 0, swizzle,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_128B, 0)
        except GpuError as exc:  # this variant's descriptor for this shape: the variant cannot run here
            raise GpuError("%s (shape %s, strides %s, block %s)" % (exc, list(shape), list(strides), list(block)),
                           code=exc.code, load=True)

    # ---- events ------------------------------------------------------------------------
    def event(self):
        ev = _p()
        self._call("cuEventCreate", ctypes.byref(ev), CU_EVENT_DEFAULT)
        return ev.value

    def profiler_start(self):
        self._call("cuProfilerStart")

    def profiler_stop(self):
        self._call("cuProfilerStop")
