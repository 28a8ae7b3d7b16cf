"""The Triton MXFP4 GEMM (aiter's a4w4 blockscale), and the support kernels the GPU agent runs with it.

``a4w4_blockscale_kernel``: C[M, N] = (A * a_scale) @ (B * b_scale)^T in bf16, aiter's layout:

* A: M x K/2 bytes, two e2m1 codes per byte along K (value 2i in the low nibble of byte i);
  ``a_scale``: M x K/32 e8m0 bytes, one per 1 x 32 block along K.
* B: N x K/2 bytes packed likewise (the weight, "TN"); ``b_scale``: N x K/32 e8m0 bytes.
* C: bf16, M x N row-major.

Each BLOCK_K step (BLOCK_K counts unpacked values, as aiter's BLOCK_SIZE_K does: BLOCK_K / 2
bytes of a row, BLOCK_K / 32 scales) is one ``tl.dot_scaled(a, a_s, "e2m1", b, b_s, "e2m1")``
into the fp32 accumulator: gfx950 has scaled fp4 MFMAs; on sm90 Triton decomposes it (the codes
and scales widened to bf16, bf16 MMAs). Only the common subset of ``tl.dot_scaled`` is used (the
six positional operands and ``acc``), which Triton 3.6 and 3.9 both take. The scale pointers are
``*i8`` (Triton has no e8m0 pointer type; the dtype ``e8m0`` maps to it so that the fill kernel
tells scales from the packed ``*u8`` codes) and are bitcast to uint8 before the dot.

* GROUP_M: program ids are swizzled so that GROUP_M rows of tiles share B columns in L2.
* SPLIT_K: as in the matmul and fp8_blockscale: contiguous ranges of whole BLOCK_K steps, fp32
  partials in ``ws_ptr``, the last split to arrive sums them in split order.
* EVEN_K: K is a multiple of BLOCK_K: no masks along K (a masked K tail reads code 0, value 0).

Support kernels: ``fill_kernel`` writes seeded test data by the pointer's type (``*u8``: uniform
random bytes, i.e. random e2m1 pairs, every code finite; ``*i8``: e8m0 scales uniform in 124..130,
2^-3 .. 2^3); ``reference_kernel`` decodes every nibble and scale to fp32 itself (a code path of
its own, no dot_scaled) and multiplies with IEEE fp32 dots; ``error_kernel`` is the matmul's.
"""

import triton
import triton.language as tl

# the GROUP_M tile order and the store of a tile with split-K (shared with the other block-scaled GEMM),
# the agent's error reduction (the matmul's)
from ..blockscale_triton import store_tile, tile_of
from ..matmul.triton_kernel import error_kernel  # noqa: F401

# The run-time arguments of a4w4_blockscale_kernel, in order (the compiler and the agent agree on them).
ARGS = ("a_ptr", "b_ptr", "c_ptr", "a_scale_ptr", "b_scale_ptr", "ws_ptr", "lock_ptr", "M", "N", "K",
        "stride_am", "stride_ak", "stride_bn", "stride_bk", "stride_cm", "stride_cn",
        "stride_asm", "stride_ask", "stride_bsn", "stride_bsk")
# The constexpr arguments a config provides (everything else in a config is a compile option).
CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K")
# The agent's reference: reference_kernel at this config (the grid: BLOCK_M x BLOCK_N tiles of C).
REFERENCE = {"fn": "reference_kernel",
             "config": {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4, "num_stages": 1}}
MX_BLOCK = 32
SCALE_LOW, SCALE_SPAN = 124, 7  # fill: e8m0 scales 124 .. 130
# the kernels read these as compile-time globals (the MX block, 32, is written out in them)
FILL_SCALE_LOW = tl.constexpr(SCALE_LOW)
FILL_SCALE_SPAN = tl.constexpr(SCALE_SPAN)


@triton.jit
def a4w4_blockscale_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, ws_ptr, lock_ptr, M, N, K,
                           stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
                           stride_asm, stride_ask, stride_bsn, stride_bsk,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr):
    tl.static_assert(BLOCK_K % 64 == 0, "BLOCK_K must be a multiple of 64 (whole 32-value MX blocks)")
    PACKED_K: tl.constexpr = BLOCK_K // 2
    SCALES_K: tl.constexpr = BLOCK_K // 32  # one e8m0 scale per 32 values (MX_BLOCK)
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m, pid_n = tile_of(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # rows and columns past the edge wrap onto valid memory: loads need no mask on M and N
    rm = tl.max_contiguous(tl.multiple_of(offs_m % M, BLOCK_M), BLOCK_M)
    rn = tl.max_contiguous(tl.multiple_of(offs_n % N, BLOCK_N), BLOCK_N)
    # this split's K steps: contiguous, the last split may have fewer (or none)
    k_steps = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_steps, SPLIT_K)
    first = pid_k * per_split
    steps = max(0, min(k_steps - first, per_split))
    rkb = first * PACKED_K + tl.arange(0, PACKED_K)  # bytes along K
    rks = first * SCALES_K + tl.arange(0, SCALES_K)  # scales along K
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + rkb[None, :] * stride_ak
    b_ptrs = b_ptr + rn[None, :].to(tl.int64) * stride_bn + rkb[:, None] * stride_bk
    a_s_ptrs = a_scale_ptr + rm[:, None].to(tl.int64) * stride_asm + rks[None, :] * stride_ask
    b_s_ptrs = b_scale_ptr + rn[:, None].to(tl.int64) * stride_bsn + rks[None, :] * stride_bsk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, steps):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
            a_s = tl.load(a_s_ptrs)
            b_s = tl.load(b_s_ptrs)
        else:
            bytes_left = K // 2 - (first + k) * PACKED_K
            scales_left = tl.cdiv(K, 32) - (first + k) * SCALES_K
            a = tl.load(a_ptrs, mask=tl.arange(0, PACKED_K)[None, :] < bytes_left, other=0)
            b = tl.load(b_ptrs, mask=tl.arange(0, PACKED_K)[:, None] < bytes_left, other=0)
            a_s = tl.load(a_s_ptrs, mask=tl.arange(0, SCALES_K)[None, :] < scales_left, other=127)
            b_s = tl.load(b_s_ptrs, mask=tl.arange(0, SCALES_K)[None, :] < scales_left, other=127)
        acc = tl.dot_scaled(a, a_s.to(tl.uint8, bitcast=True), "e2m1", b, b_s.to(tl.uint8, bitcast=True), "e2m1",
                            acc)
        a_ptrs += PACKED_K * stride_ak
        b_ptrs += PACKED_K * stride_bk
        a_s_ptrs += SCALES_K * stride_ask
        b_s_ptrs += SCALES_K * stride_bsk

    store_tile(acc, c_ptr, ws_ptr, lock_ptr, M, N, stride_cm, stride_cn, pid, pid_k, pid_m, pid_n, BLOCK_M, BLOCK_N,
               SPLIT_K)


@triton.jit
def _e2m1(code):
    """fp32 value of e2m1 codes (0..15): sign, 2 exponent bits (bias 1), 1 mantissa bit."""
    exp = (code >> 1) & 3
    mant = (code & 1).to(tl.float32)
    mag = tl.where(exp == 0, 0.5 * mant, (1.0 + 0.5 * mant) * tl.exp2((exp - 1).to(tl.float32)))
    return tl.where((code & 8) != 0, -mag, mag)


@triton.jit
def reference_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, M, N, K,
                     stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
                     stride_asm, stride_ask, stride_bsn, stride_bsk,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C (fp32) = dequantize(A) @ dequantize(B)^T: every nibble and scale decoded to fp32 by
    arithmetic (no dot_scaled), then IEEE fp32 dots; masks everywhere. Slow and plain on purpose."""
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BLOCK_N)
    offs_m = (pid // grid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % grid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        a_mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
        b_mask = (offs_k[:, None] < K) & (offs_n[None, :] < N)
        a_byte = tl.load(a_ptr + offs_m[:, None] * stride_am + (offs_k[None, :] // 2) * stride_ak, mask=a_mask,
                         other=0).to(tl.int32)
        b_byte = tl.load(b_ptr + offs_n[None, :] * stride_bn + (offs_k[:, None] // 2) * stride_bk, mask=b_mask,
                         other=0).to(tl.int32)
        a_code = (a_byte >> ((offs_k[None, :] % 2) * 4)) & 0xF
        b_code = (b_byte >> ((offs_k[:, None] % 2) * 4)) & 0xF
        a_s = tl.load(a_scale_ptr + offs_m[:, None] * stride_asm + (offs_k[None, :] // 32) * stride_ask,
                      mask=a_mask, other=127).to(tl.uint8, bitcast=True).to(tl.float32)
        b_s = tl.load(b_scale_ptr + offs_n[None, :] * stride_bsn + (offs_k[:, None] // 32) * stride_bsk,
                      mask=b_mask, other=127).to(tl.uint8, bitcast=True).to(tl.float32)
        a = _e2m1(a_code) * tl.exp2(a_s - 127.0)
        b = _e2m1(b_code) * tl.exp2(b_s - 127.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc, mask=mask)


@triton.jit
def fill_kernel(out_ptr, n, seed, BLOCK: tl.constexpr):
    """Seeded test data from Philox(seed, i) by out's type: ``*u8`` random bytes (two random
    e2m1 codes each), ``*i8`` e8m0 scales uniform in 124..130 (their bits), else uniform [-1, 1]."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    if out_ptr.dtype.element_ty == tl.uint8:
        value = tl.randint(seed, offs.to(tl.int32)) & 0xFF
        tl.store(out_ptr + offs, value.to(tl.uint8), mask=offs < n)
    elif out_ptr.dtype.element_ty == tl.int8:
        r = tl.rand(seed, offs.to(tl.int32))
        code = FILL_SCALE_LOW + tl.minimum((r * FILL_SCALE_SPAN).to(tl.int32), FILL_SCALE_SPAN - 1)
        tl.store(out_ptr + offs, code.to(tl.uint8).to(tl.int8, bitcast=True), mask=offs < n)
    else:
        r = tl.rand(seed, offs.to(tl.int32))
        tl.store(out_ptr + offs, (2.0 * r - 1.0).to(out_ptr.dtype.element_ty), mask=offs < n)
