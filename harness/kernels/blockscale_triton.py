"""What the block-scaled GEMMs' Triton kernels (fp8_blockscale, a4w4_blockscale) share: the GROUP_M
tile order and the epilogue that stores a tile of C or, with SPLIT_K > 1, this split's fp32 partial
and, for the split that arrives last, the deterministic reduction (the matmul's epilogue,
``_store_or_split``: each split's partial in its own slice of ``ws_ptr``, summed in split order, no
float atomics, the tile's counter in ``lock_ptr`` reset for the next launch)."""

import triton
import triton.language as tl

from .matmul.triton_kernel import _store_or_split, _tile_of

tile_of = _tile_of  # the matmul's GROUP_M order: consecutive tiles walk down GROUP_M rows of tiles


@triton.jit
def store_tile(acc, c_ptr, ws_ptr, lock_ptr, M, N, stride_cm, stride_cn, pid, pid_k, pid_m, pid_n,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr):
    """C's tile (pid_m, pid_n) in C's type, or this split's partial, reduced by the last split."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    ws_ptrs = ws_ptr + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    _store_or_split(acc, c_ptrs, ws_ptrs, mask, c_ptr, ws_ptr, lock_ptr, M, N, stride_cm, stride_cn, pid, pid_k,
                    pid_m, pid_n, BLOCK_M, BLOCK_N, SPLIT_K)
