"""Device memory of one shape in a GPU worker: the input buffers (rotated copies), the output,
the fp32 reference, the split-K workspace, the argument values that point at them, NaN poison
for the output, and torch views of the buffers (no copy) where the node has torch.
Standard library only (torch only when the caller passes it)."""

import zlib

from .gpu_api import GpuError

ELEM_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
NAN_BITS = {"fp16": 0x7E00, "bf16": 0x7FC0, "fp32": 0x7FC00000}


def strides(M, N, K, layout):
    """Element strides of A (MxK), B (KxN), C (MxN) for a layout (same as harness.kernels.matmul)."""
    a_t, b_t = layout[0] == "T", layout[1] == "T"
    return {"stride_am": 1 if a_t else K, "stride_ak": M if a_t else 1,
            "stride_bk": 1 if b_t else N, "stride_bn": K if b_t else 1, "stride_cm": N, "stride_cn": 1}


def data_seed(seed, shape, role):
    text = "%d:%d:%d:%d:%s:%s:%s" % (seed, shape["M"], shape["N"], shape["K"], shape["dtype"],
                                       shape["layout"], role)
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


class ShapeData(object):
    """Device buffers of one shape: inputs (rotated copies), C, the fp32 reference, workspace."""

    def __init__(self, api, shape, sets):
        self.api = api
        self.shape = shape
        M, N, K, dtype = shape["M"], shape["N"], shape["K"], shape["dtype"]
        e = ELEM_BYTES[dtype]
        self.a_bytes, self.b_bytes, self.c_bytes = M * K * e, K * N * e, M * N * e
        self.a, self.b = [], []
        self.buffers = []
        for _ in range(sets):
            self.a.append(self._alloc(self.a_bytes))
            self.b.append(self._alloc(self.b_bytes))
        self.c = self._alloc(self.c_bytes)
        self.ref = self._alloc(M * N * 4)
        self.ws = None
        self.ws_count = 0
        self.locks = None
        self.locks_count = 0
        self.strides = strides(M, N, K, shape["layout"])

    def _alloc(self, nbytes):
        ptr = self.api.alloc(nbytes)
        self.buffers.append(ptr)
        return ptr

    def workspace(self, tiles, splits):
        """Split-K buffers: an fp32 workspace of ``splits`` x M x N (one slice per split) and one
        zeroed counter per tile (the kernel leaves them zero again). Grown, never shrunk, across
        the variants of the shape."""
        M, N = self.shape["M"], self.shape["N"]
        need = splits * M * N
        if self.ws_count < need:
            self.ws = self._alloc(need * 4)
            self.ws_count = need
        if self.locks_count < tiles:
            self.locks = self._alloc(tiles * 4)
            self.locks_count = tiles
        self.api.memset32(self.ws, 0, self.ws_count)
        self.api.memset32(self.locks, 0, self.locks_count)
        return self.ws, self.locks

    def values(self, rotation=0):
        s = self.shape
        v = {"a_ptr": self.a[rotation % len(self.a)], "b_ptr": self.b[rotation % len(self.b)],
             "c_ptr": self.c, "M": s["M"], "N": s["N"], "K": s["K"]}
        v.update(self.strides)
        return v

    def poison(self):
        """Fill C with NaN, so that a kernel that writes nothing cannot pass the check."""
        dtype = self.shape["dtype"]
        n = self.shape["M"] * self.shape["N"]
        if ELEM_BYTES[dtype] == 2:
            self.api.memset16(self.c, NAN_BITS[dtype], n)
        else:
            self.api.memset32(self.c, NAN_BITS[dtype], n)

    def torch_operands(self, torch, rotation=0):
        """A (MxK) and B (KxN) of the shape as torch views of the device buffers, in its layout
        (a T operand is the transpose of a row-major view: no copy)."""
        s = self.shape
        M, N, K, dtype = s["M"], s["N"], s["K"], s["dtype"]
        a_ptr, b_ptr = self.a[rotation % len(self.a)], self.b[rotation % len(self.b)]
        a = torch_view(torch, a_ptr, K if s["layout"][0] == "T" else M, M if s["layout"][0] == "T" else K, dtype)
        b = torch_view(torch, b_ptr, N if s["layout"][1] == "T" else K, K if s["layout"][1] == "T" else N, dtype)
        return (a.t() if s["layout"][0] == "T" else a), (b.t() if s["layout"][1] == "T" else b)

    def release(self):
        for ptr in self.buffers:
            try:
                self.api.free(ptr)
            except GpuError:
                pass
        self.buffers = []


def torch_view(torch, ptr, rows, cols, dtype):
    """A row-major rows x cols torch tensor on the device memory at ``ptr`` (no copy)."""
    typestr = {"fp16": "<f2", "bf16": "<i2", "fp32": "<f4"}[dtype]

    class _CAI(object):
        __cuda_array_interface__ = {"shape": (rows, cols), "typestr": typestr, "data": (ptr, False),
                                    "version": 2, "strides": None}

    t = torch.as_tensor(_CAI(), device="cuda")
    return t.view(torch.bfloat16) if dtype == "bf16" else t
