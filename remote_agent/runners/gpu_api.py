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
    """The calls the GPU runner makes on a device; cuda.CudaApi and hip.HipApi implement them
    through ctypes (driver.DriverApi holds what they share), tests/gpu_standin.py on the CPU.

    Optional abilities are declared, never probed for: ``tensor_maps`` (``encode_tensor_map``
    makes TMA descriptors: CUDA), ``describe_function`` (a stand-in is told each launch's facts
    before the launch) and ``library_launcher`` (a stand-in times the library itself)."""

    backend = None  # "cuda" or "hip"
    visible_env = None  # the variable that limits the devices a process sees
    tensor_maps = False
    describe_function = None  # (fn, launch facts) -> None, where the API interprets launches
    library_launcher = None  # (library name) -> launcher, where the API stands in for the library

    def init(self):
        """Initialise the driver (once per process)."""
        raise NotImplementedError

    def device_count(self):
        """The number of devices this process sees."""
        raise NotImplementedError

    def attribute(self, attr, index=None):
        """A device attribute by the driver's number, of device ``index`` (default: the open one);
        CUDA's numbering (75, 76: compute capability), used only where the backend is cuda."""
        raise NotImplementedError

    def device_name(self, index):
        """The name of device ``index``."""
        raise NotImplementedError

    def open(self, index):
        """Make device ``index`` current and create the stream work is timed on (``self.stream``)."""
        raise NotImplementedError

    def facts(self):
        """A dict of the open device's facts (arch, multiprocessors, memory, clocks, driver)."""
        raise NotImplementedError

    def mem_info(self):
        """(free, total) bytes of device memory."""
        raise NotImplementedError

    def alloc(self, nbytes):
        """A device pointer to ``nbytes`` bytes."""
        raise NotImplementedError

    def free(self, ptr):
        """Free a pointer from ``alloc``."""
        raise NotImplementedError

    def dtoh(self, src, nbytes):
        """``nbytes`` bytes copied from device pointer ``src``, as bytes."""
        raise NotImplementedError

    def htod(self, dst, data):
        """Copy the bytes ``data`` to device pointer ``dst`` (synchronous: the legacy stream)."""
        raise NotImplementedError

    def dtod(self, dst, src, nbytes):
        """Copy ``nbytes`` bytes between device pointers."""
        raise NotImplementedError

    def memset16(self, ptr, value, count):
        """Fill ``count`` 16-bit words at ``ptr`` with ``value``, on the stream."""
        raise NotImplementedError

    def memset32(self, ptr, value, count):
        """Fill ``count`` 32-bit words at ``ptr`` with ``value``, on the stream."""
        raise NotImplementedError

    def load_module(self, image):
        """Load a cubin / hsaco image; a module handle (GpuError(load=True) when unusable)."""
        raise NotImplementedError

    def unload_module(self, module):
        """Unload a module from ``load_module``."""
        raise NotImplementedError

    def get_function(self, module, name):
        """The function ``name`` of a loaded module."""
        raise NotImplementedError

    def set_dynamic_shared(self, fn, nbytes):
        """Allow ``fn`` ``nbytes`` of dynamic shared memory (over 48 KiB needs it)."""
        raise NotImplementedError

    def function_facts(self, fn):
        """A dict of the function's facts (registers, local memory)."""
        raise NotImplementedError

    def launch(self, fn, grid, block, shared, params, stream=None):
        """Launch ``fn`` with packed ``params`` on the stream."""
        raise NotImplementedError

    def launch_cluster(self, fn, grid, ctas, block, shared, params, stream=None):
        """Launch ``fn`` as ``grid`` clusters of ``ctas`` CTAs each along x (a kernel compiled with
        num_ctas > 1); where the API has no clusters the launch is refused as unusable."""
        raise GpuError("a kernel built for clusters of %d CTAs; this GPU API launches no clusters" % ctas,
                       load=True)

    def synchronize(self):
        """Wait for the stream's work; a failed kernel raises GpuError here (sticky: context lost)."""
        raise NotImplementedError

    def event(self):
        """A new timing event."""
        raise NotImplementedError

    def record(self, ev, stream=None):
        """Record ``ev`` on the stream."""
        raise NotImplementedError

    def elapsed_ms(self, start, end):
        """Milliseconds between two recorded events."""
        raise NotImplementedError

    def destroy_event(self, ev):
        """Destroy an event from ``event``."""
        raise NotImplementedError

    def profiler_start(self):
        """Start the vendor profiler's capture range (ncu, rocprof)."""
        raise NotImplementedError

    def profiler_stop(self):
        """End the vendor profiler's capture range."""
        raise NotImplementedError

    def encode_tensor_map(self, address, base, elem_type, elem_size, shape, strides, block, swizzle):
        """Write a tiled TMA descriptor at ``address`` (only where ``tensor_maps``)."""
        raise NotImplementedError
