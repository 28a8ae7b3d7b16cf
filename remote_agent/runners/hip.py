"""The HIP runtime through ctypes on libamdhip64.so (standard library only).

The same interface as cuda.CudaApi. Device attributes are read by name through
hipDeviceGetAttribute only where the enum value is stable across ROCm releases; the L2 flush
buffer size does not depend on them (a fixed 512 MiB, larger than MI300's 256 MB Infinity Cache).
"""

import ctypes
import os

from .driver import DriverApi
from .gpu_api import GpuError

# hipError_t values after which the process must go
STICKY = {
    700: "hipErrorIllegalAddress", 701: "hipErrorLaunchOutOfResources", 702: "hipErrorLaunchTimeOut",
    719: "hipErrorLaunchFailure", 999: "hipErrorUnknown", 1054: "hipErrorRuntimeOther",
}
LOAD_ERRORS = {98, 200, 209, 218, 300, 301, 500}  # invalid device function, invalid image, no binary, not found

_p = ctypes.c_void_p
_i = ctypes.c_int
_u = ctypes.c_uint
_sz = ctypes.c_size_t

_SIGNATURES = {
    "hipInit": [_u],
    "hipDriverGetVersion": [ctypes.POINTER(_i)],
    "hipGetDeviceCount": [ctypes.POINTER(_i)],
    "hipSetDevice": [_i],
    "hipDeviceGetName": [ctypes.c_char_p, _i, _i],
    "hipMalloc": [ctypes.POINTER(_p), _sz],
    "hipFree": [_p],
    "hipMemGetInfo": [ctypes.POINTER(_sz), ctypes.POINTER(_sz)],
    "hipMemcpyDtoH": [_p, _p, _sz],
    "hipMemcpyHtoD": [_p, _p, _sz],
    "hipMemcpyDtoDAsync": [_p, _p, _sz, _p],
    "hipMemsetD16Async": [_p, ctypes.c_ushort, _sz, _p],
    "hipMemsetD32Async": [_p, _i, _sz, _p],
    "hipModuleLoadData": [ctypes.POINTER(_p), ctypes.c_char_p],
    "hipModuleUnload": [_p],
    "hipModuleGetFunction": [ctypes.POINTER(_p), _p, ctypes.c_char_p],
    "hipModuleLaunchKernel": [_p, _u, _u, _u, _u, _u, _u, _u, _p, ctypes.POINTER(_p), ctypes.POINTER(_p)],
    "hipStreamCreateWithFlags": [ctypes.POINTER(_p), _u],
    "hipDeviceSynchronize": [],
    "hipEventCreate": [ctypes.POINTER(_p)],
    "hipEventRecord": [_p, _p],
    "hipEventSynchronize": [_p],
    "hipEventElapsedTime": [ctypes.POINTER(ctypes.c_float), _p, _p],
    "hipEventDestroy": [_p],
}
CALLS = {
    "device_count": "hipGetDeviceCount", "device_name": "hipDeviceGetName", "mem_info": "hipMemGetInfo",
    "alloc": "hipMalloc", "free": "hipFree", "dtoh": "hipMemcpyDtoH", "htod": "hipMemcpyHtoD",
    "dtod": "hipMemcpyDtoDAsync",
    "memset16": "hipMemsetD16Async", "load_module": "hipModuleLoadData", "unload_module": "hipModuleUnload",
    "get_function": "hipModuleGetFunction", "launch": "hipModuleLaunchKernel", "synchronize": "hipDeviceSynchronize",
    "record": "hipEventRecord", "event_synchronize": "hipEventSynchronize", "elapsed": "hipEventElapsedTime",
    "destroy_event": "hipEventDestroy",
}
HIP_STREAM_NON_BLOCKING = 1
FLUSH_BYTES = 512 << 20


def _library_candidates():
    names = ["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.7", "libamdhip64.so.5"]
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    return names + [os.path.join(rocm, "lib", n) for n in names]


class HipApi(DriverApi):
    backend = "hip"
    visible_env = "HIP_VISIBLE_DEVICES"
    CALLS = CALLS
    SIGNATURES = _SIGNATURES

    def __init__(self, library=None):
        self.lib = None
        errors = []
        for name in ([library] if library else _library_candidates()):
            try:
                self.lib = ctypes.CDLL(name)
                break
            except OSError as exc:
                errors.append(str(exc))
        if self.lib is None:
            raise GpuError("cannot load libamdhip64.so (%s): no ROCm here" % "; ".join(errors[:2]), code=-1)
        self._bind()
        self.lib.hipGetErrorName.argtypes = [_i]
        self.lib.hipGetErrorName.restype = ctypes.c_char_p
        self.stream = None
        self.device = None

    def check(self, rc, what):
        if rc == 0:
            return
        try:
            text = (self.lib.hipGetErrorName(rc) or b"").decode() or STICKY.get(rc, "HIP error %d" % rc)
        except Exception:
            text = STICKY.get(rc, "HIP error %d" % rc)
        raise GpuError("%s: %s (%d)" % (what, text, rc), code=rc, sticky=rc in STICKY, load=rc in LOAD_ERRORS)

    def init(self):
        self._call("hipInit", 0)

    def open(self, index):
        self._call("hipSetDevice", index)
        self.device = index
        stream = _p()
        self._call("hipStreamCreateWithFlags", ctypes.byref(stream), HIP_STREAM_NON_BLOCKING)
        self.stream = stream.value

    def facts(self):
        free, total = self.mem_info()
        version = _i()
        self._call("hipDriverGetVersion", ctypes.byref(version))
        return {"name": self.device_name(self.device), "arch": None, "sm_count": None,
                "l2_bytes": FLUSH_BYTES // 2, "shared_max": 65536, "max_threads": 1024,
                "memory_bytes": total, "driver": version.value}

    # on the worker's stream, as DriverApi.dtod says
    def memset32(self, ptr, value, count):
        self._call("hipMemsetD32Async", ptr, ctypes.c_int32(value & 0xFFFFFFFF).value, int(count), self.stream)

    def set_dynamic_shared(self, fn, nbytes):
        if nbytes > 65536:
            raise GpuError("kernel needs %d bytes of LDS; the device has 65536" % nbytes, code=-1, load=True)

    def function_facts(self, fn):
        return {}

    def event(self):
        ev = _p()
        self._call("hipEventCreate", ctypes.byref(ev))
        return ev.value

    def profiler_start(self):
        pass  # rocprof traces every dispatch; the parser keeps the last N of the entry

    def profiler_stop(self):
        pass
