"""The fp8 block-scaled GEMM's side of the GPU agent: shipped in the bundle (the manifest's
``device_plugin``, hash-checked) and loaded by the GPU worker on the node, which knows no kernel
by name.

The reference is C = dequantize(A) @ dequantize(B)^T in fp32, with A fp8 M x K and one fp32 scale
per 1 x 128 block, B fp8 N x K and one fp32 scale per 128 x 128 block. torch computes it where
the node has it (the fp8 codes widened to fp32, times their scales, an fp32 product without
TF32); the host check of the bundle's reference kernel decodes the fp8 codes here (numpy where
present, else plain Python). The library is ``torch._scaled_mm`` with blockwise scales. Runs on
the node: Python >= 3.8 standard library, torch and numpy where present."""

import math

from remote_agent.contract import DTYPE_BYTES
from remote_agent.runners.gpu_api import GpuError
from remote_agent.runners.gpu_library import torch_runtime
from remote_agent.runners.gpu_memory import torch_view
from remote_agent.runners.gpu_reference import check_each_dtype, floats, small_product_error

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
    ops = data.torch_operands(torch, rotation)
    return ops["a"], ops["b"], ops["a_scale"], ops["b_scale"]


def reference_grid(shape, config):
    """The bundle's reference kernel's grid: one program per BLOCK_M x BLOCK_N tile of C."""
    d = shape["dims"]
    return (cdiv(d["M"], config["BLOCK_M"]) * cdiv(d["N"], config["BLOCK_N"]), 1, 1)


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


def check_reference_kernel(worker):
    """The bundle's reference kernel against the host on a 67x45x300 product per dtype in the
    bundle; a failure stops the run. Returns the errors."""
    return check_each_dtype(worker, self_check, "67x45x300")


def self_check(worker, dtype, M=67, N=45, K=300):
    """The bundle's reference kernel against the host on a small odd shape (partial tiles and a
    partial last scale block): the relative error norm."""
    return small_product_error(worker, shape(M, N, K, dtype), lambda got: host_reference(
        got["a"], floats(got["a_scale"]), got["b"], floats(got["b_scale"]), M, N, K, dtype))


def torch_scaled_mm_launcher(torch, stream, data):
    """``torch._scaled_mm`` with blockwise scales (1 x 128 on A, 128 x 128 on B: cuBLASLt's
    DeepSeek-style scaling, CUDA 12.9+ on sm90) on the kernel's buffers: A (M x K), B (N x K,
    given as its K x N transpose), C in bf16, no fast accumulation (torch refuses it with block
    scales). torch wants A's scales M-major and the rows of B's scales padded to a multiple of 4:
    those copies are made here, once per input copy, outside the timing. One product runs here
    first: where this torch cannot do it, its error is the row's load_error."""
    d = data.shape["dims"]
    M, N = d["M"], d["N"]
    c = torch_view(torch, data.ptr("c"), M, N, "bf16")
    stream = torch.cuda.ExternalStream(stream)
    operands = []
    with torch.cuda.stream(stream):
        for r in range(data.sets):
            a, b, a_scale, b_scale = torch_operands(torch, data, r)
            sn, sk = b_scale.shape
            padded = torch.zeros((sn, cdiv(sk, 4) * 4), dtype=torch.float32, device=b_scale.device)[:, :sk]
            padded.copy_(b_scale)
            operands.append((a, b.t(), a_scale.t().contiguous().t(), padded.t()))

        def launch(i, stream_=None):
            a, b, sa, sb = operands[i % len(operands)]
            torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, out=c)

        try:
            launch(0)
            torch.cuda.synchronize()
        except Exception as exc:  # this torch, GPU or shape has no blockwise-scaled product
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            raise GpuError("torch %s cannot do this blockwise-scaled product: %s" % (torch.__version__, lines[0][:240]),
                           load=True)
    note = "torch %s (%s), blockwise 1x%d / %dx%d scales" % (torch.__version__, torch_runtime(torch), SCALE_BLOCK,
                                                           SCALE_BLOCK, SCALE_BLOCK)
    return launch, torch.cuda.stream(stream), note


# library name (the manifest's ``library``, a row's ``lib:<name>``) -> launcher(torch, stream, data)
LIBRARIES = {"torch._scaled_mm": torch_scaled_mm_launcher}
