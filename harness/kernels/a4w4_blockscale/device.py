"""The MXFP4 GEMM's side of the GPU agent: shipped in the bundle (the manifest's
``device_plugin``, hash-checked) and loaded by the GPU worker on the node, which knows no kernel
by name.

The reference is C = dequantize(A) @ dequantize(B)^T in fp32, with A M x K/2 bytes (two e2m1
codes a byte along K, low nibble first) and one e8m0 scale per 1 x 32 block, B N x K/2 likewise.
torch computes it where the node has it (codes decoded through a 16-entry table, times
2^(scale - 127), an fp32 product without TF32); the host check of the bundle's reference kernel
decodes the bytes here in float64 (numpy where present, else plain Python).

The library row (``dequantize+torch.matmul``): sm90 has no fp4 MMA, and torch's MX-scaled
``torch._scaled_mm`` (float4_e2m1fn_x2 operands with e8m0 block scales) is cuBLASLt's block-scaled
fp4 GEMM, which runs on sm100+ only; so the best torch offers for these operands on an H100/H200
is to dequantize A and B to bf16 (exact: an e2m1 value times a power of two, inside bf16's
range for the e8m0 scales the fill writes) and run cuBLAS's bf16 GEMM with ``torch.matmul``.
The timed launch does both, since the operands given are MXFP4; the message of the row says so.
Runs on the node: Python >= 3.8 standard library, torch and numpy where present."""

import math

from remote_agent.contract import DTYPE_BYTES
from remote_agent.runners.gpu_api import GpuError
from remote_agent.runners.gpu_library import torch_runtime
from remote_agent.runners.gpu_memory import torch_view
from remote_agent.runners.gpu_reference import check_each_dtype, small_product_error

MX_BLOCK = 32
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def cdiv(a, b):
    return -(-a // b)


def strides(M, N, K):
    """The kernel's stride arguments (harness.kernels.a4w4_blockscale.strides)."""
    kb, ks = cdiv(K, 2), cdiv(K, MX_BLOCK)
    return {"stride_am": kb, "stride_ak": 1, "stride_bn": kb, "stride_bk": 1, "stride_cm": N, "stride_cn": 1,
            "stride_asm": ks, "stride_ask": 1, "stride_bsn": ks, "stride_bsk": 1}


def shape(M, N, K, dtype="mxfp4", shape_id="selfcheck"):
    """A shape as the manifest writes it for this kernel (its operand declaration)."""
    kb, ks = cdiv(K, 2), cdiv(K, MX_BLOCK)

    def op(name, role, rows, cols, op_dtype):
        n = rows * cols
        return {"name": name, "role": role, "dtype": op_dtype, "shape": [rows, cols], "strides": [cols, 1],
                "elements": n, "bytes": n * DTYPE_BYTES[op_dtype]}

    scalars = {"M": M, "N": N, "K": K}
    scalars.update(strides(M, N, K))
    return {"id": shape_id, "dims": {"M": M, "N": N, "K": K}, "dtype": dtype, "layout": "",
            "operands": [op("a", "input", M, kb, "u8"), op("b", "input", N, kb, "u8"),
                         op("c", "output", M, N, "bf16"), op("a_scale", "input", M, ks, "e8m0"),
                         op("b_scale", "input", N, ks, "e8m0"), op("ref", "reference", M, N, "fp32")],
            "scalars": scalars}


def reference_grid(shape, config):
    """The bundle's reference kernel's grid: one program per BLOCK_M x BLOCK_N tile of C."""
    d = shape["dims"]
    return (cdiv(d["M"], config["BLOCK_M"]) * cdiv(d["N"], config["BLOCK_N"]), 1, 1)


def dequantize(torch, packed, scales, K, dtype):
    """R x K ``dtype`` values of R x K/2 packed codes and R x K/32 e8m0 scales (torch, on the device)."""
    table = torch.tensor(E2M1, dtype=torch.float32, device=packed.device)
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(packed.shape[0], -1)[:, :K].long()
    scale = torch.exp2(scales.float() - 127.0).repeat_interleave(MX_BLOCK, dim=1)[:, :K]
    return (table[codes] * scale).to(dtype)


def torch_operands(torch, data, rotation=0):
    """(A, B, a_scale, b_scale) as uint8 torch views of the device buffers (no copy)."""
    ops = data.torch_operands(torch, rotation)
    return ops["a"], ops["b"], ops["a_scale"], ops["b_scale"]


def torch_reference(torch, data):
    """ref = dequantize(A) @ dequantize(B)^T in fp32 (no TF32), into the ``ref`` buffer."""
    d = data.shape["dims"]
    M, N, K = d["M"], d["N"], d["K"]
    a, b, a_scale, b_scale = torch_operands(torch, data)
    a32 = dequantize(torch, a, a_scale, K, torch.float32)
    b32 = dequantize(torch, b, b_scale, K, torch.float32)
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = a32 @ b32.t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow
    del a32, b32
    torch_view(torch, data.ptr("ref"), M, N, "fp32").copy_(ref)
    torch.cuda.synchronize()


def host_reference(a_bytes, a_scale, b_bytes, b_scale, M, N, K):
    """float64 dequantize(A) @ dequantize(B)^T of the downloaded bytes (row-major)."""
    kb, ks = cdiv(K, 2), cdiv(K, MX_BLOCK)
    try:
        import numpy as np

        def deq(raw, scale_raw, rows):
            packed = np.frombuffer(raw, dtype=np.uint8).reshape(rows, kb)
            codes = np.stack((packed & 0xF, packed >> 4), axis=-1).reshape(rows, -1)[:, :K]
            s = np.frombuffer(scale_raw, dtype=np.uint8).reshape(rows, ks).astype(np.float64)
            return np.array(E2M1)[codes] * np.repeat(np.exp2(s - 127.0), MX_BLOCK, axis=1)[:, :K]

        return (deq(a_bytes, a_scale, M) @ deq(b_bytes, b_scale, N).T).ravel().tolist()
    except ImportError:
        pass

    def value(raw, scale_raw, r, k):
        byte = raw[r * kb + k // 2]
        code = (byte >> (4 * (k % 2))) & 0xF
        return E2M1[code] * 2.0 ** (scale_raw[r * ks + k // MX_BLOCK] - 127)

    a_raw, b_raw, sa, sb = bytearray(a_bytes), bytearray(b_bytes), bytearray(a_scale), bytearray(b_scale)
    a = [[value(a_raw, sa, m, k) for k in range(K)] for m in range(M)]
    b = [[value(b_raw, sb, n, k) for k in range(K)] for n in range(N)]
    return [math.fsum(x * y for x, y in zip(a[m], b[n])) for m in range(M) for n in range(N)]


def check_reference_kernel(worker):
    """The bundle's reference kernel against the host on a 67x45x320 product; a failure stops
    the run. Returns the errors."""
    return check_each_dtype(worker, self_check, "67x45x320")


def self_check(worker, dtype, M=67, N=45, K=320):
    """The bundle's reference kernel against the host on a small odd shape (partial tiles, an
    odd count of MX blocks): the relative error norm."""
    return small_product_error(worker, shape(M, N, K, dtype), lambda got: host_reference(
        got["a"], got["a_scale"], got["b"], got["b_scale"], M, N, K))


def pair_table(torch, device, dtype):
    """256 x 2: the two values (low nibble first) of every byte of packed codes."""
    return torch.tensor([[E2M1[b & 0xF], E2M1[b >> 4]] for b in range(256)], dtype=dtype, device=device)


def dequantize_bf16(torch, pairs, packed, scales):
    """R x K bf16 values of R x K/2 packed codes and R x K/32 scales, K a multiple of 32: one
    table lookup per byte, then each 32-value block times its power of two (exact in bf16)."""
    rows = packed.shape[0]
    values = pairs[packed.long()].reshape(rows, -1, MX_BLOCK)
    scale = torch.exp2(scales.to(torch.float32) - 127.0).to(torch.bfloat16)
    return (values * scale.unsqueeze(-1)).reshape(rows, -1)


def dequantize_matmul_launcher(torch, stream, data):
    """Dequantize A and B to bf16 and ``torch.matmul`` them into C (cuBLAS bf16 GEMM, fp32
    accumulation), both inside each timed launch: the operands are MXFP4 and sm90 has no fp4
    MMA (see the module's docstring). One product runs here first: where this torch or shape
    cannot do it (K not a multiple of 32), its error is the row's load_error."""
    d = data.shape["dims"]
    M, N = d["M"], d["N"]
    c = torch_view(torch, data.ptr("c"), M, N, "bf16")
    stream = torch.cuda.ExternalStream(stream)
    with torch.cuda.stream(stream):
        sets = [torch_operands(torch, data, r) for r in range(data.sets)]
        pairs = pair_table(torch, c.device, torch.bfloat16)

        def launch(i, stream_=None):
            a, b, sa, sb = sets[i % len(sets)]
            torch.matmul(dequantize_bf16(torch, pairs, a, sa), dequantize_bf16(torch, pairs, b, sb).t(), out=c)

        try:
            launch(0)
            torch.cuda.synchronize()
        except Exception as exc:  # this torch or shape cannot do it
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            raise GpuError("torch %s cannot dequantize and multiply this shape: %s" % (torch.__version__,
                                                                                     lines[0][:240]), load=True)
    note = "torch %s (%s): MXFP4 dequantized to bf16, then torch.matmul (sm90 has no fp4 MMA)" % (
        torch.__version__, torch_runtime(torch))
    return launch, torch.cuda.stream(stream), note


# library name (the manifest's ``library``, a row's ``lib:<name>``) -> launcher(torch, stream, data)
LIBRARIES = {"dequantize+torch.matmul": dequantize_matmul_launcher}
