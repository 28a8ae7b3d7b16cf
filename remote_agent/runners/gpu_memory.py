"""Device memory of one shape in a GPU worker, from the operands the manifest declares: the input
buffers (rotated copies), the outputs, the fp32 references, the split-K / stream-K workspace,
the argument values that point at them, NaN poison for the outputs, and torch views of the
buffers (no copy) where the node has torch.
Standard library only (torch only when the caller passes it)."""

import zlib

from ..contract import DTYPE_BYTES, NAN_BITS
from .gpu_api import GpuError


def strides(M, N, K, layout):
    """Element strides of A (MxK), B (KxN), C (MxN) for a layout (same as harness.kernels.matmul)."""
    a_t, b_t = layout[0] == "T", layout[1] == "T"
    return {"stride_am": 1 if a_t else K, "stride_ak": M if a_t else 1,
            "stride_bk": 1 if b_t else N, "stride_bn": K if b_t else 1, "stride_cm": N, "stride_cn": 1}


def data_seed(seed, shape, role):
    """The fill kernel's seed of one operand of a shape (matmul: the text it always was)."""
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
        """A (MxK) and B (KxN) of a matmul shape as torch views of the device buffers, in its
        layout (a T operand is the transpose of a row-major view: no copy)."""
        s = self.shape
        d, dtype, layout = s["dims"], s["dtype"], s["layout"]
        M, N, K = d["M"], d["N"], d["K"]
        a_ptr, b_ptr = self.ptr("a", rotation), self.ptr("b", rotation)
        a = torch_view(torch, a_ptr, K if layout[0] == "T" else M, M if layout[0] == "T" else K, dtype)
        b = torch_view(torch, b_ptr, N if layout[1] == "T" else K, K if layout[1] == "T" else N, dtype)
        return (a.t() if layout[0] == "T" else a), (b.t() if layout[1] == "T" else b)

    def release(self):
        for ptr in self.buffers:
            try:
                self.api.free(ptr)
            except GpuError:
                pass
        self.buffers = []


def torch_view(torch, ptr, rows, cols, dtype):
    """A row-major rows x cols torch tensor on the device memory at ``ptr`` (no copy)."""
    typestr = {"fp16": "<f2", "bf16": "<i2", "fp32": "<f4", "u8": "|u1"}[dtype]

    class _CAI(object):
        __cuda_array_interface__ = {"shape": (rows, cols), "typestr": typestr, "data": (ptr, False),
                                    "version": 2, "strides": None}

    t = torch.as_tensor(_CAI(), device="cuda")
    return t.view(torch.bfloat16) if dtype == "bf16" else t
