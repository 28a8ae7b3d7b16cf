"""The HIP runtime through ctypes on libamdhip64.so (standard library only).

The same interface as cuda.CudaApi. Device attributes are read by name through
hipDeviceGetAttribute only where the enum value is stable across ROCm releases; the L2 flush
buffer size does not depend on them (a fixed 512 MiB, larger than MI300's 256 MB Infinity Cache).
"""

import ctypes
import os

from .gpu import GpuApi, GpuError

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
    "hipMemcpyHtoD": [_p, _p, _sz],
    "hipMemcpyDtoH": [_p, _p, _sz],
    "hipMemcpyDtoD": [_p, _p, _sz],
    "hipMemcpyDtoDAsync": [_p, _p, _sz, _p],
    "hipMemsetD8": [_p, ctypes.c_ubyte, _sz],
    "hipMemsetD16": [_p, ctypes.c_ushort, _sz],
    "hipMemsetD32": [_p, _i, _sz],
    "hipMemsetD8Async": [_p, ctypes.c_ubyte, _sz, _p],
    "hipMemsetD16Async": [_p, ctypes.c_ushort, _sz, _p],
    "hipMemsetD32Async": [_p, _i, _sz, _p],
    "hipModuleLoadData": [ctypes.POINTER(_p), ctypes.c_char_p],
    "hipModuleUnload": [_p],
    "hipModuleGetFunction": [ctypes.POINTER(_p), _p, ctypes.c_char_p],
    "hipModuleLaunchKernel": [_p, _u, _u, _u, _u, _u, _u, _u, _p, ctypes.POINTER(_p), ctypes.POINTER(_p)],
    "hipStreamCreateWithFlags": [ctypes.POINTER(_p), _u],
    "hipStreamSynchronize": [_p],
    "hipDeviceSynchronize": [],
    "hipEventCreate": [ctypes.POINTER(_p)],
    "hipEventRecord": [_p, _p],
    "hipEventSynchronize": [_p],
    "hipEventElapsedTime": [ctypes.POINTER(ctypes.c_float), _p, _p],
    "hipEventDestroy": [_p],
    "hipProfilerStart": [],
    "hipProfilerStop": [],
}
HIP_STREAM_NON_BLOCKING = 1
FLUSH_BYTES = 512 << 20


def _library_candidates():
    names = ["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.7", "libamdhip64.so.5"]
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    return names + [os.path.join(rocm, "lib", n) for n in names]


class HipApi(GpuApi):
    backend = "hip"
    visible_env = "HIP_VISIBLE_DEVICES"

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
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(self.lib, name, None)
            if fn is None:
                continue
            fn.argtypes = argtypes
            fn.restype = _i
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

    def _call(self, name, *args):
        self.check(getattr(self.lib, name)(*args), name)

    def init(self):
        self._call("hipInit", 0)

    def device_count(self):
        n = _i()
        self._call("hipGetDeviceCount", ctypes.byref(n))
        return n.value

    def device_name(self, index):
        buf = ctypes.create_string_buffer(256)
        self._call("hipDeviceGetName", buf, 256, index)
        return buf.value.decode(errors="replace")

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

    def mem_info(self):
        free, total = _sz(), _sz()
        self._call("hipMemGetInfo", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def alloc(self, nbytes):
        ptr = _p()
        self._call("hipMalloc", ctypes.byref(ptr), max(1, int(nbytes)))
        return ptr.value

    def free(self, ptr):
        if ptr:
            self._call("hipFree", ptr)

    def dtoh(self, src, nbytes):
        buf = ctypes.create_string_buffer(int(nbytes))
        self._call("hipMemcpyDtoH", buf, src, int(nbytes))
        return buf.raw

    # on the worker's (non-blocking) stream, in order with its launches
    def dtod(self, dst, src, nbytes):
        self._call("hipMemcpyDtoDAsync", dst, src, int(nbytes), self.stream)

    def memset16(self, ptr, value, count):
        self._call("hipMemsetD16Async", ptr, value, int(count), self.stream)

    def memset32(self, ptr, value, count):
        self._call("hipMemsetD32Async", ptr, ctypes.c_int32(value & 0xFFFFFFFF).value, int(count), self.stream)

    def load_module(self, image):
        mod = _p()
        self._call("hipModuleLoadData", ctypes.byref(mod), image)
        return mod.value

    def unload_module(self, module):
        self._call("hipModuleUnload", module)

    def get_function(self, module, name):
        fn = _p()
        self._call("hipModuleGetFunction", ctypes.byref(fn), module, name.encode())
        return fn.value

    def set_dynamic_shared(self, fn, nbytes):
        if nbytes > 65536:
            raise GpuError("kernel needs %d bytes of LDS; the device has 65536" % nbytes, code=-1, load=True)

    def function_facts(self, fn):
        return {}

    def launch(self, fn, grid, block, shared, params, stream=None):
        self._call("hipModuleLaunchKernel", fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                   int(shared), self.stream if stream is None else stream, params, None)

    def synchronize(self):
        self._call("hipDeviceSynchronize")

    def event(self):
        ev = _p()
        self._call("hipEventCreate", ctypes.byref(ev))
        return ev.value

    def record(self, ev, stream=None):
        self._call("hipEventRecord", ev, self.stream if stream is None else stream)

    def elapsed_ms(self, start, end):
        ms = ctypes.c_float()
        self._call("hipEventSynchronize", end)
        self._call("hipEventElapsedTime", ctypes.byref(ms), start, end)
        return ms.value

    def destroy_event(self, ev):
        self._call("hipEventDestroy", ev)

    def profiler_start(self):
        pass  # rocprof traces every dispatch; the parser keeps the last N of the entry

    def profiler_stop(self):
        pass
