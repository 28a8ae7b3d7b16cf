"""What the block-scaled GEMMs' Triton kernels (fp8_blockscale, a4w4_blockscale) share: the GROUP_M
tile order and the epilogue that stores a tile of C or, with SPLIT_K > 1, this split's fp32 partial
and, for the split that arrives last, the deterministic reduction (the matmul's ``_reduce_splits``:
each split's partial in its own slice of ``ws_ptr``, summed in split order, no float atomics, the
tile's counter in ``lock_ptr`` reset for the next launch)."""

import triton
import triton.language as tl

from .matmul.triton_kernel import _reduce_splits, _tile_of

tile_of = _tile_of  # the matmul's GROUP_M order: consecutive tiles walk down GROUP_M rows of tiles


@triton.jit
def store_tile(acc, c_ptr, ws_ptr, lock_ptr, M, N, stride_cm, stride_cn, pid, pid_k, pid_m, pid_n,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr):
    """C's tile (pid_m, pid_n) in C's type, or this split's partial, reduced by the last split."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        # this split's partial into its own slice of the workspace; the last to arrive reduces
        ws_ptrs = ws_ptr + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
        tl.store(ws_ptrs + pid_k.to(tl.int64) * M * N, acc, mask=mask)
        tl.debug_barrier()  # every thread's partial is written before the counter is bumped
        arrived = tl.atomic_add(lock_ptr + pid, 1, sem="acq_rel")
        if arrived == SPLIT_K - 1:
            _reduce_splits(ws_ptr, c_ptr, M, N, stride_cm, stride_cn, pid_m, pid_n, BLOCK_M, BLOCK_N, SPLIT_K)
            tl.atomic_xchg(lock_ptr + pid, 0)
