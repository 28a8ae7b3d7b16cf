"""What the CUDA driver API (cuda.py) and the HIP runtime (hip.py) share through ctypes: the same
calls under each vendor's names. A subclass names its functions in ``CALLS`` (operation ->
function) and declares their argument types in ``SIGNATURES``; every return code is checked by
the subclass's ``check``, which knows the vendor's error names."""

import ctypes

from .gpu_api import GpuApi

_i = ctypes.c_int
_sz = ctypes.c_size_t


class DriverApi(GpuApi):
    CALLS = {}  # operation -> the vendor's function name
    SIGNATURES = {}  # function name -> argtypes (restype is the int return code)
    device_pointer = ctypes.c_void_p  # the ctype the allocator writes a device pointer into

    def _bind(self):
        for name, argtypes in self.SIGNATURES.items():
            fn = getattr(self.lib, name, None)
            if fn is None:
                continue
            fn.argtypes = argtypes
            fn.restype = _i

    def check(self, rc, what):
        raise NotImplementedError

    def _call(self, name, *args):
        self.check(getattr(self.lib, name)(*args), name)

    def _op(self, op, *args):
        self._call(self.CALLS[op], *args)

    # ---- devices -----------------------------------------------------------------------
    def device_count(self):
        n = _i()
        self._op("device_count", ctypes.byref(n))
        return n.value

    def device_name(self, index):
        buf = ctypes.create_string_buffer(256)
        self._op("device_name", buf, 256, index)
        return buf.value.decode(errors="replace")

    def mem_info(self):
        free, total = _sz(), _sz()
        self._op("mem_info", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    # ---- memory ------------------------------------------------------------------------
    def alloc(self, nbytes):
        ptr = self.device_pointer()
        self._op("alloc", ctypes.byref(ptr), max(1, int(nbytes)))
        return ptr.value

    def free(self, ptr):
        if ptr:
            self._op("free", ptr)

    def dtoh(self, src, nbytes):
        buf = ctypes.create_string_buffer(int(nbytes))
        self._op("dtoh", buf, src, int(nbytes))
        return buf.raw

    def htod(self, dst, data):
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        self._op("htod", dst, buf, len(data))

    # Copies and memsets go on the worker's stream, in order with its launches: the plain
    # memset/copy calls run on the legacy stream, which a non-blocking stream does not wait for.
    def dtod(self, dst, src, nbytes):
        self._op("dtod", dst, src, int(nbytes), self.stream)

    def memset16(self, ptr, value, count):
        self._op("memset16", ptr, value, int(count), self.stream)

    # ---- modules and launches ------------------------------------------------------------
    def load_module(self, image):
        mod = ctypes.c_void_p()
        self._op("load_module", ctypes.byref(mod), image)
        return mod.value

    def unload_module(self, module):
        self._op("unload_module", module)

    def get_function(self, module, name):
        fn = ctypes.c_void_p()
        self._op("get_function", ctypes.byref(fn), module, name.encode())
        return fn.value

    def launch(self, fn, grid, block, shared, params, stream=None):
        """params: a ctypes array of void* pointing at each argument's value."""
        self._op("launch", fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                 int(shared), self.stream if stream is None else stream, params, None)

    def synchronize(self):
        self._op("synchronize")

    # ---- events ------------------------------------------------------------------------
    def record(self, ev, stream=None):
        self._op("record", ev, self.stream if stream is None else stream)

    def elapsed_ms(self, start, end):
        ms = ctypes.c_float()
        self._op("event_synchronize", end)
        self._op("elapsed", ctypes.byref(ms), start, end)
        return ms.value

    def destroy_event(self, ev):
        self._op("destroy_event", ev)
