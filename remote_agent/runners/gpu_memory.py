"""Device memory of one shape in a GPU worker, from the operands the manifest declares: the input
buffers (rotated copies), the outputs, the fp32 references, the split-K / stream-K workspace,
the argument values that point at them, NaN poison for the outputs, and torch views of the
buffers (no copy) where the node has torch.
Standard library only (torch only when the caller passes it)."""

import array
import itertools
import zlib

from ..contract import DTYPE_BYTES, NAN_BITS
from .gpu_api import GpuError


def data_seed(seed, shape, role):
    """The fill kernel's seed of one operand of a shape (from its dims, dtype, layout and role)."""
    dims = ":".join("%d" % v for v in shape["dims"].values())
    text = "%d:%s:%s:%s:%s" % (seed, dims, shape["dtype"], shape["layout"], role)
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def workspace_need(config, grid, out_elements):
    """(fp32 workspace elements, int32 counters) a config needs, or None (docs/contracts.md):
    split-K (SPLIT_K > 1): one slice of the output per split and a counter per program of
    ``grid[0]`` (a tile); stream-K (STREAM_K > 0): one BLOCK_M x BLOCK_N slot and one counter per
    program of ``grid[0]`` (a slot per K piece, a counter per stream-K tile: fewer than programs)."""
    programs = int(grid[0])
    if config.get("SPLIT_K", 1) > 1:
        return config["SPLIT_K"] * out_elements, programs
    if config.get("STREAM_K", 0):
        return programs * config["BLOCK_M"] * config["BLOCK_N"], programs
    return None


# an array typecode of unsigned integers of each width (this platform's sizes): a copy moves
# elements as bits
_WORDS = {array.array(code).itemsize: code for code in "QLIHB"}


def relayout(raw, width, shape, src_strides, dst_strides, dst_elements):
    """The elements of ``raw`` (``width`` bytes each, logical ``shape`` at element strides
    ``src_strides``) laid out at ``dst_strides`` instead, as bytes of ``dst_elements`` elements
    (elements no logical index reaches stay zero). numpy where present, else plain Python."""
    try:
        import numpy as np

        word = np.dtype("u%d" % width)
        src = np.lib.stride_tricks.as_strided(np.frombuffer(raw, dtype=word), shape,
                                              [s * width for s in src_strides])
        out = np.zeros(dst_elements, dtype=word)
        np.lib.stride_tricks.as_strided(out, shape, [s * width for s in dst_strides])[...] = src
        return out.tobytes()
    except ImportError:
        pass
    src = array.array(_WORDS[width])
    src.frombytes(raw)
    out = array.array(_WORDS[width], bytes(dst_elements * width))
    for index in itertools.product(*[range(n) for n in shape]):
        out[sum(i * s for i, s in zip(index, dst_strides))] = src[sum(i * s for i, s in zip(index, src_strides))]
    return out.tobytes()


def copy_of(api, data, op):
    """Fill the first copy of input ``op``, declared a copy of input ``op["copy_of"]`` (the same
    logical shape) in its own layout (its strides), from that operand's first copy, through the
    host (a scale matrix in the other major order, say)."""
    src = data.operands[op["copy_of"]]
    if src["shape"] != op["shape"] or src["dtype"] != op["dtype"]:
        raise GpuError("operand %s is declared a copy of %s, whose shape or dtype differs" % (op["name"], src["name"]),
                       load=True)
    api.synchronize()  # the source's fill ran on the worker's stream; the copy to the host does not wait
    width = DTYPE_BYTES[op["dtype"]]
    raw = api.dtoh(data.ptr(src["name"]), src["bytes"])
    laid_out = relayout(raw, width, op["shape"], src.get("strides") or _row_major(src["shape"]),
                        op.get("strides") or _row_major(op["shape"]), op["elements"])
    api.htod(data.ptr(op["name"]), laid_out)


def input_bytes(shape):
    return sum(op["bytes"] for op in shape["operands"] if op["role"] == "input")


class ShapeData(object):
    """Device buffers of one shape, as the manifest declares its operands: each input in ``sets``
    copies (launches rotate over them), each output, each reference, and the reduction workspace.
    A kernel's pointer argument ``<name>_ptr`` gets the operand ``name``."""

    def __init__(self, api, shape, sets):
        self.api = api
        self.shape = shape
        self.buffers = []
        self.operands = dict((op["name"], op) for op in shape["operands"])
        self.inputs = {}  # name -> [pointer of each copy]
        self.single = {}  # name -> pointer (outputs and references)
        for op in shape["operands"]:
            if op["role"] == "input":
                self.inputs[op["name"]] = [self._alloc(op["bytes"]) for _ in range(sets)]
            else:
                self.single[op["name"]] = self._alloc(op["bytes"])
        self.sets = sets
        self.crosscheck = None
        self.ws = None
        self.ws_count = 0
        self.locks = None
        self.locks_count = 0

    def _alloc(self, nbytes):
        ptr = self.api.alloc(nbytes)
        self.buffers.append(ptr)
        return ptr

    def ptr(self, name, rotation=0):
        if name in self.inputs:
            copies = self.inputs[name]
            return copies[rotation % len(copies)]
        return self.single[name]

    def outputs(self):
        return [op for op in self.shape["operands"] if op["role"] == "output"]

    def workspace(self, config, grid):
        """The reduction buffers a variant's config needs (``workspace_need``): an fp32 workspace
        and zeroed int32 counters (the kernel leaves them zero), grown, never shrunk, across the
        variants of the shape; (0, 0) where it needs none."""
        need = workspace_need(config, grid, self.outputs()[0]["elements"])
        if need is None:
            return 0, 0
        elements, counters = need
        if self.ws_count < elements:
            self.ws = self._alloc(elements * 4)
            self.ws_count = elements
        if self.locks_count < counters:
            self.locks = self._alloc(counters * 4)
            self.locks_count = counters
        self.api.memset32(self.ws, 0, self.ws_count)
        self.api.memset32(self.locks, 0, self.locks_count)
        return self.ws, self.locks

    def values(self, rotation=0):
        """The kernel's argument values: ``<operand>_ptr`` for inputs (copy ``rotation``) and
        outputs, then the shape's scalars (dims, strides)."""
        v = dict(("%s_ptr" % op["name"], self.ptr(op["name"], rotation)) for op in self.shape["operands"]
                 if op["role"] != "reference")
        v.update(self.shape["scalars"])
        return v

    def poison(self):
        """Fill every output with NaN, so that a kernel that writes nothing cannot pass the check."""
        for op in self.outputs():
            bits, width = NAN_BITS.get(op["dtype"]), DTYPE_BYTES[op["dtype"]]
            if bits is None or width not in (2, 4):
                raise GpuError("output %s is %s; the worker poisons 2- and 4-byte floats only"
                               % (op["name"], op["dtype"]), load=True)
            (self.api.memset16 if width == 2 else self.api.memset32)(self.ptr(op["name"]), bits, op["elements"])

    def torch_operands(self, torch, rotation=0):
        """Every input operand as a torch view of its device buffer (copy ``rotation``; no copy
        made), with the logical shape, element strides and dtype the manifest declares: a
        transposed operand is a strided view of what lies row-major in memory."""
        views = {}
        for op in self.shape["operands"]:
            if op["role"] != "input":
                continue
            flat = torch_view(torch, self.ptr(op["name"], rotation), 1, op["elements"], op["dtype"])
            views[op["name"]] = flat.view(-1).as_strided(op["shape"], op.get("strides") or _row_major(op["shape"]))
        return views

    def release(self):
        for ptr in self.buffers:
            try:
                self.api.free(ptr)
            except GpuError:
                pass
        self.buffers = []


# dtype -> (the array interface's typestr, the torch dtype to view it as, where that differs)
TORCH_TYPES = {"fp16": ("<f2", None), "bf16": ("<i2", "bfloat16"), "fp32": ("<f4", None), "u8": ("|u1", None),
               "i32": ("<i4", None), "i8": ("|i1", None), "fp8e4m3fn": ("|u1", "float8_e4m3fn"),
               "fp8e4m3fnuz": ("|u1", "float8_e4m3fnuz"), "e8m0": ("|u1", None)}


def torch_view(torch, ptr, rows, cols, dtype):
    """A row-major rows x cols torch tensor on the device memory at ``ptr`` (no copy)."""
    typestr, view_as = TORCH_TYPES[dtype]

    class _CAI(object):
        __cuda_array_interface__ = {"shape": (rows, cols), "typestr": typestr, "data": (ptr, False),
                                    "version": 2, "strides": None}

    t = torch.as_tensor(_CAI(), device="cuda")
    return t.view(getattr(torch, view_as)) if view_as else t


def _row_major(shape):
    strides, step = [], 1
    for d in reversed(shape):
        strides.insert(0, step)
        step *= d
    return strides
