"""A loaded GPU function and its arguments: the module and function of an artifact with its
launch facts (entry, threads, shared memory, parameter list, scratch), the argument values
packed for cuLaunchKernel / hipModuleLaunchKernel, and the check that an artifact specialized
for a class of shapes is not run outside it. Standard library only."""

import ctypes

from .gpu_api import GpuError

CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64,
          "fp32": ctypes.c_float, "fp64": ctypes.c_double, "i1": ctypes.c_int8, "i8": ctypes.c_int8,
          "i16": ctypes.c_int16}


TENSOR_MAP_BYTES = 128  # a CUtensorMap, 64-byte aligned


def cdiv(a, b):
    return -(-a // b)


class Params(object):
    """A kernel's argument values packed for cuLaunchKernel / hipModuleLaunchKernel. A ``tensormap``
    parameter (a tensor descriptor made on the host) is encoded by ``api`` from the values."""

    def __init__(self, params, values, api=None):
        self.values = []  # kept alive as long as the launch needs them
        addresses = []
        for p in params:
            name, ty = p["name"], p["type"]
            if ty == "tensormap":
                buf, address = tensor_map(api, p, values)
                self.values.append(buf)
                addresses.append(address)
                continue
            v = values.get(name, 0 if p.get("hidden") else None)
            if v is None:
                raise GpuError("no value for kernel argument %s" % name, load=True)
            if ty.startswith("*"):
                self.values.append(ctypes.c_uint64(int(v or 0)))
            elif ty in CTYPES:
                self.values.append(CTYPES[ty](v))
            else:
                raise GpuError("argument %s has type %s, which the runner cannot pass" % (name, ty), load=True)
            addresses.append(ctypes.addressof(self.values[-1]))
        self.array = (ctypes.c_void_p * max(1, len(addresses)))(*addresses)


def tensor_map(api, p, values):
    """(buffer, address of its 64-byte aligned CUtensorMap) of a host-made tensor descriptor: the
    view of operand ``p["operand"]`` that ``p`` names by the run-time values of its shape and
    strides (outermost first), with the block, swizzle and element type the compiler recorded."""
    if api is None or not api.tensor_maps:
        raise GpuError("argument %s is a tensor descriptor, which this GPU API cannot make" % p["name"], load=True)
    missing = [n for n in ["%s_ptr" % p["operand"]] + p["shape"] + p["strides"] if n not in values]
    if missing:
        raise GpuError("no value for %s of tensor descriptor %s" % (", ".join(missing), p["name"]), load=True)
    buf = ctypes.create_string_buffer(TENSOR_MAP_BYTES + 64)
    address = (ctypes.addressof(buf) + 63) // 64 * 64
    api.encode_tensor_map(address, values["%s_ptr" % p["operand"]], p["elem_type"], p["elem_size"],
                          [int(values[n]) for n in p["shape"]], [int(values[n]) for n in p["strides"]],
                          p["block"], p["swizzle"])
    return buf, address


class Kernel(object):
    """A loaded function with its launch facts."""

    def __init__(self, api, image, launch, device_shared_max=None):
        self.api = api
        self.launch = launch
        self.module = api.load_module(image)
        self.fn = api.get_function(self.module, launch["entry"])
        if api.describe_function is not None:  # a CPU stand-in API interprets launches by their facts
            api.describe_function(self.fn, launch)
        self.shared = int(launch.get("shared", 0))
        self.block = launch.get("block") or [launch["threads"], 1, 1]
        if device_shared_max and self.shared > device_shared_max:
            raise GpuError("needs %d bytes of shared memory; the device allows %d per block"
                           % (self.shared, device_shared_max), load=True)
        if self.shared > 48 * 1024:
            api.set_dynamic_shared(self.fn, self.shared)
        self.facts = api.function_facts(self.fn)
        self.scratch = {}

    def params(self, values, grid):
        values = dict(values)
        programs = grid[0] * grid[1] * grid[2] * int(self.launch.get("num_ctas", 1))
        for name in ("global_scratch", "profile_scratch"):
            size = int(self.launch.get(name + "_size", 0) or 0)
            if size:
                need = size * programs
                have = self.scratch.get(name)
                if have is None or have[1] < need:
                    if have:
                        self.api.free(have[0])
                    self.scratch[name] = (self.api.alloc(need), need)
                values[name] = self.scratch[name][0]
        return Params(self.launch["params"], values, self.api)

    def run(self, grid, params, stream=None):
        ctas = int(self.launch.get("num_ctas", 1))
        if ctas > 1:  # the grid counts clusters (as Triton's launcher and the kernel's program ids do)
            self.api.launch_cluster(self.fn, grid, ctas, self.block, self.shared, params.array, stream)
        else:
            self.api.launch(self.fn, grid, self.block, self.shared, params.array, stream)


def specialization_problem(launch, values):
    """An artifact specialized for a class (a stride of 1, divisibility by 16) must not be run on a
    shape outside it: that would be a silent wrong answer, or a fault."""
    for name, value in (launch.get("constexprs") or {}).items():
        if name in values and values[name] != value:
            return "artifact is specialized for %s=%s, the shape has %s" % (name, value, values[name])
    for name in launch.get("divisible", []):
        if name in values and not name.endswith("_ptr") and values[name] % 16:
            return "artifact assumes %s divisible by 16, the shape has %s" % (name, values[name])
    return None
