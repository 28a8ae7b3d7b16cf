"""The Triton fp8 block-scaled GEMM, and the support kernels the GPU agent runs with it.

``fp8_blockscale_kernel``: C[M, N] = (A * a_scale) @ (B * b_scale)^T in bf16, the layout of
aiter's ``gemm_a8w8_blockscale`` and DeepSeek-V3's ``fp8_gemm``:

* A: fp8 e4m3, M x K row-major; ``a_scale``: fp32, M x cdiv(K, 128), one per 1 x 128 block.
* B: fp8 e4m3, N x K row-major (the weight, "TN"); ``b_scale``: fp32, cdiv(N, 128) x cdiv(K, 128),
  one per 128 x 128 block.
* C: bf16, M x N row-major.

Each BLOCK_K step is one fp8 ``tl.dot`` into a fresh fp32 tile, multiplied by the step's A scale
per row and B scale per column and added to the fp32 accumulator (the scales are applied per K
block, so the fp8 MMA never accumulates across blocks of different scales). BLOCK_K divides 128,
so a K step lies inside one scale block. The fp8 type is that of the pointers: ``fp8e4nv``
(e4m3fn) on NVIDIA sm89+ and AMD gfx950, ``fp8e4b8`` (e4m3fnuz) on AMD gfx942.

* GROUP_M: program ids are swizzled so that GROUP_M rows of tiles share B columns in L2.
* SPLIT_K: as in the matmul: the grid's second axis splits K into SPLIT_K contiguous ranges of
  whole BLOCK_K steps; each split stores its fp32 partial tile into its own slice of ``ws_ptr``
  (fp32 SPLIT_K x M x N) and bumps the tile's counter in ``lock_ptr``; the split that arrives
  last sums the partials in split order (deterministic, no float atomics), stores C and resets
  the counter.
* EVEN_K: K is a multiple of BLOCK_K: no masks along K.
* TMA (NVIDIA sm90+): A and B tiles come through device-side tensor descriptors (the bulk tensor
  copy engine; rows and K past the edges read as zeros, so no masks); the descriptors live in the
  launch's global scratch. Scales are small loads either way.

Support kernels: ``fill_kernel`` writes seeded test data in the pointer's type (fp8: uniform in
[-FILL_FP8, FILL_FP8] rounded by the conversion; fp32 scales: 2^u with u uniform in [-8, -4]),
``reference_kernel`` computes the fp32 reference from the dequantized inputs with IEEE fp32 dots
(a code path of its own: dequantize, then multiply), ``error_kernel`` is the matmul's.
"""

import triton
import triton.language as tl

# the GROUP_M tile order and the store of a tile with split-K (shared with the other block-scaled GEMM),
# the agent's error reduction (the matmul's)
from ..blockscale_triton import store_tile, tile_of
from ..matmul.triton_kernel import error_kernel  # noqa: F401

# The run-time arguments of fp8_blockscale_kernel, in order (the compiler and the agent agree on them).
ARGS = ("a_ptr", "b_ptr", "c_ptr", "a_scale_ptr", "b_scale_ptr", "ws_ptr", "lock_ptr", "M", "N", "K",
        "stride_am", "stride_ak", "stride_bn", "stride_bk", "stride_cm", "stride_cn",
        "stride_asm", "stride_ask", "stride_bsn", "stride_bsk")
# The constexpr arguments a config provides (everything else in a config is a compile option).
CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K")
# Constexprs a config may leave out, with their defaults (the compiler passes them always).
OPTIONAL_CONSTEXPRS = {"TMA": 0}
# WS = 1 configs run on gluon_kernel.py's kernel, CUDA = 1 ones on cuda_kernel.cu; this one takes WS = 0
# and CUDA = 0 only (checked, not passed)
FIXED = {"WS": 0, "CUDA": 0, "OVERLAP": 0, "ORDERED": 0, "PIPE": 0, "SMEM_SCALES": 0, "SHARE_A": 0, "SWAP_AB": 0}
# The agent's reference: reference_kernel at this config (the grid: BLOCK_M x BLOCK_N tiles of C).
REFERENCE = {"fn": "reference_kernel",
             "config": {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4, "num_stages": 1}}
SCALE_BLOCK = 128
FILL_FP8 = 224.0  # inside both formats' range (e4m3fnuz tops out at 240)
SCALE_BLOCK_K = tl.constexpr(SCALE_BLOCK)  # the kernels read these as compile-time globals
SCALE_BLOCK_N = tl.constexpr(SCALE_BLOCK)
FILL_FP8_VALUE = tl.constexpr(FILL_FP8)


@triton.jit
def fp8_blockscale_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, ws_ptr, lock_ptr, M, N, K,
                          stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
                          stride_asm, stride_ask, stride_bsn, stride_bsk,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, TMA: tl.constexpr):
    tl.static_assert(SCALE_BLOCK_K % BLOCK_K == 0, "BLOCK_K must divide the 128-wide scale block")
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m, pid_n = tile_of(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # rows and columns past the edge wrap onto valid memory: loads need no mask on M and N
    rm = tl.max_contiguous(tl.multiple_of(offs_m % M, BLOCK_M), BLOCK_M)
    rn = tl.max_contiguous(tl.multiple_of(offs_n % N, BLOCK_N), BLOCK_N)
    a_scale_ptrs = a_scale_ptr + rm * stride_asm
    b_scale_ptrs = b_scale_ptr + (rn // SCALE_BLOCK_N) * stride_bsn
    if TMA:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, stride_ak],
                                           block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, stride_bk],
                                           block_shape=[BLOCK_N, BLOCK_K])
    # this split's K steps: contiguous, the last split may have fewer (or none)
    k_steps = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_steps, SPLIT_K)
    first = pid_k * per_split
    steps = max(0, min(k_steps - first, per_split))
    rk = first * BLOCK_K + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rn[None, :].to(tl.int64) * stride_bn + rk[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, steps):
        k_start = (first + k) * BLOCK_K  # < K: every step has at least one valid element
        if TMA:  # the bulk tensor copy engine zero-fills rows and K past the edges
            a = a_desc.load([pid_m * BLOCK_M, k_start])
            b = b_desc.load([pid_n * BLOCK_N, k_start]).T
        elif EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_K  # rk is where this split starts
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        k_scale = k_start // SCALE_BLOCK_K  # BLOCK_K divides 128: the whole step has this scale
        a_s = tl.load(a_scale_ptrs + k_scale * stride_ask)
        b_s = tl.load(b_scale_ptrs + k_scale * stride_bsk)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    store_tile(acc, c_ptr, ws_ptr, lock_ptr, M, N, stride_cm, stride_cn, pid, pid_k, pid_m, pid_n, BLOCK_M, BLOCK_N,
               SPLIT_K)


@triton.jit
def reference_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, M, N, K,
                     stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
                     stride_asm, stride_ask, stride_bsn, stride_bsk,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C (fp32) = dequantize(A) @ dequantize(B)^T: every element times its scale in fp32 first,
    then IEEE fp32 dots; masks everywhere, no specialization. Slow and plain on purpose."""
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BLOCK_N)
    offs_m = (pid // grid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % grid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        a_mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
        b_mask = (offs_k[:, None] < K) & (offs_n[None, :] < N)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak, mask=a_mask, other=0.0)
        b = tl.load(b_ptr + offs_n[None, :] * stride_bn + offs_k[:, None] * stride_bk, mask=b_mask, other=0.0)
        a_s = tl.load(a_scale_ptr + offs_m[:, None] * stride_asm + (offs_k[None, :] // SCALE_BLOCK_K) * stride_ask,
                      mask=a_mask, other=0.0)
        b_s = tl.load(b_scale_ptr + (offs_n[None, :] // SCALE_BLOCK_N) * stride_bsn
                      + (offs_k[:, None] // SCALE_BLOCK_K) * stride_bsk, mask=b_mask, other=0.0)
        acc = tl.dot(a.to(tl.float32) * a_s, b.to(tl.float32) * b_s, acc, input_precision="ieee")
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc, mask=mask)


@triton.jit
def fill_kernel(out_ptr, n, seed, BLOCK: tl.constexpr):
    """Seeded test data from Philox(seed, i) in out's type: fp8 codes uniform in [-FILL_FP8,
    FILL_FP8] (rounded by the conversion), fp32 scales 2^u with u uniform in [-8, -4]."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    r = tl.rand(seed, offs.to(tl.int32))
    if out_ptr.dtype.element_ty == tl.float32:
        value = tl.exp2(-8.0 + 4.0 * r)
    else:
        value = (2.0 * r - 1.0) * FILL_FP8_VALUE
    tl.store(out_ptr + offs, value.to(out_ptr.dtype.element_ty), mask=offs < n)
