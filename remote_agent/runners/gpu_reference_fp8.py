"""The reference of the fp8 block-scaled GEMM (harness/kernels/fp8_blockscale; the manifest's
``device_reference: fp8_blockscale``): C = dequantize(A) @ dequantize(B)^T in fp32, with A fp8
M x K and one fp32 scale per 1 x 128 block, B fp8 N x K and one fp32 scale per 128 x 128 block.

torch computes it where the node has it (the fp8 codes widened to fp32, times their scales, an
fp32 product without TF32); the host check of the bundle's reference kernel decodes the fp8 codes
here (numpy where present, else plain Python). Standard library only."""

import array
import math

from ..contract import DTYPE_BYTES
from .gpu_memory import torch_view

NAME = "fp8_blockscale"
SCALE_BLOCK = 128
# e4m3 formats: exponent bias and the NaN codes
FORMATS = {"fp8e4m3fn": (7, (0x7F, 0xFF)), "fp8e4m3fnuz": (8, (0x80,))}
TORCH_DTYPES = {"fp8e4m3fn": "float8_e4m3fn", "fp8e4m3fnuz": "float8_e4m3fnuz"}


def cdiv(a, b):
    return -(-a // b)


def decode_table(dtype):
    """The value of each of the 256 codes of an e4m3 format (NaN codes: NaN)."""
    bias, nans = FORMATS[dtype]
    table = []
    for code in range(256):
        exp, mant = (code >> 3) & 0xF, code & 7
        value = (mant / 8.0) * 2.0 ** (1 - bias) if exp == 0 else (1 + mant / 8.0) * 2.0 ** (exp - bias)
        table.append(float("nan") if code in nans else (-value if code & 0x80 else value))
    return table


def strides(M, N, K):
    """The kernel's stride arguments (harness.kernels.fp8_blockscale.strides)."""
    sk = cdiv(K, SCALE_BLOCK)
    return {"stride_am": K, "stride_ak": 1, "stride_bn": K, "stride_bk": 1, "stride_cm": N, "stride_cn": 1,
            "stride_asm": sk, "stride_ask": 1, "stride_bsn": sk, "stride_bsk": 1}


def shape(M, N, K, dtype, shape_id="selfcheck"):
    """A shape as the manifest writes it for this kernel (its operand declaration)."""
    sk, sn = cdiv(K, SCALE_BLOCK), cdiv(N, SCALE_BLOCK)

    def op(name, role, rows, cols, op_dtype):
        n = rows * cols
        return {"name": name, "role": role, "dtype": op_dtype, "shape": [rows, cols], "strides": [cols, 1],
                "elements": n, "bytes": n * DTYPE_BYTES[op_dtype]}

    scalars = {"M": M, "N": N, "K": K}
    scalars.update(strides(M, N, K))
    return {"id": shape_id, "dims": {"M": M, "N": N, "K": K}, "dtype": dtype, "layout": "",
            "operands": [op("a", "input", M, K, dtype), op("b", "input", N, K, dtype),
                         op("c", "output", M, N, "bf16"), op("a_scale", "input", M, sk, "fp32"),
                         op("b_scale", "input", sn, sk, "fp32"), op("ref", "reference", M, N, "fp32")],
            "scalars": scalars}


def torch_operands(torch, data, rotation=0):
    """(A, B, a_scale, b_scale) of the shape as torch views of the device buffers (no copy):
    A M x K and B N x K in their fp8 type, the scales fp32."""
    d = data.shape["dims"]
    M, N, K = d["M"], d["N"], d["K"]
    sk, sn = cdiv(K, SCALE_BLOCK), cdiv(N, SCALE_BLOCK)
    fp8 = getattr(torch, TORCH_DTYPES[data.shape["dtype"]])
    a = torch_view(torch, data.ptr("a", rotation), M, K, "u8").view(fp8)
    b = torch_view(torch, data.ptr("b", rotation), N, K, "u8").view(fp8)
    a_scale = torch_view(torch, data.ptr("a_scale", rotation), M, sk, "fp32")
    b_scale = torch_view(torch, data.ptr("b_scale", rotation), sn, sk, "fp32")
    return a, b, a_scale, b_scale


def torch_reference(torch, data):
    """ref = (A * a_scale) @ (B * b_scale)^T in fp32 (no TF32), into the ``ref`` buffer."""
    d = data.shape["dims"]
    M, N, K = d["M"], d["N"], d["K"]
    a, b, a_scale, b_scale = torch_operands(torch, data)
    a32 = a.float() * a_scale.repeat_interleave(SCALE_BLOCK, dim=1)[:, :K]
    b32 = b.float() * b_scale.repeat_interleave(SCALE_BLOCK, dim=0).repeat_interleave(SCALE_BLOCK, dim=1)[:N, :K]
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = a32 @ b32.t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow
    torch_view(torch, data.ptr("ref"), M, N, "fp32").copy_(ref)
    torch.cuda.synchronize()


def host_reference(a_codes, a_scale, b_codes, b_scale, M, N, K, dtype):
    """float64 dequantize(A) @ dequantize(B)^T of the downloaded bytes and scales (row-major lists)."""
    table = decode_table(dtype)
    sk = cdiv(K, SCALE_BLOCK)
    try:
        import numpy as np

        lut = np.array(table)
        a = lut[np.frombuffer(a_codes, dtype=np.uint8).reshape(M, K)]
        b = lut[np.frombuffer(b_codes, dtype=np.uint8).reshape(N, K)]
        sa = np.repeat(np.array(a_scale, dtype=np.float64).reshape(M, sk), SCALE_BLOCK, axis=1)[:, :K]
        sb = np.array(b_scale, dtype=np.float64).reshape(-1, sk)
        sb = np.repeat(np.repeat(sb, SCALE_BLOCK, axis=0), SCALE_BLOCK, axis=1)[:N, :K]
        return ((a * sa) @ (b * sb).T).ravel().tolist()
    except ImportError:
        pass
    a = [table[x] * a_scale[(i // K) * sk + (i % K) // SCALE_BLOCK] for i, x in enumerate(bytearray(a_codes))]
    b = [table[x] * b_scale[((i // K) // SCALE_BLOCK) * sk + (i % K) // SCALE_BLOCK]
         for i, x in enumerate(bytearray(b_codes))]
    return [math.fsum(a[m * K + k] * b[n * K + k] for k in range(K)) for m in range(M) for n in range(N)]


def floats(raw):
    out = array.array("f")
    out.frombytes(raw)
    return list(out)


def self_check(worker, data_cls, run_reference_kernel, dtype, M=67, N=45, K=300):
    """The bundle's reference kernel against the host on a small odd shape (partial tiles and a
    partial last scale block): the relative error norm."""
    api = worker.api
    small = shape(M, N, K, dtype)
    data = data_cls(api, small, 1)
    try:
        for seed, op in enumerate(o for o in small["operands"] if o["role"] == "input"):
            worker.fill(data.ptr(op["name"]), op["elements"], op["dtype"], 11 + seed)
        run_reference_kernel(worker, data, data.ptr("ref"))
        api.synchronize()
        got = {op["name"]: api.dtoh(data.ptr(op["name"]), op["bytes"]) for op in small["operands"]
               if op["role"] in ("input", "reference")}
    finally:
        data.release()
    want = host_reference(got["a"], floats(got["a_scale"]), got["b"], floats(got["b_scale"]), M, N, K, dtype)
    ref = floats(got["ref"])
    d2 = math.fsum((g - w) ** 2 for g, w in zip(ref, want))
    r2 = math.fsum(w * w for w in want)
    return math.sqrt(d2 / r2) if r2 else float("inf")

