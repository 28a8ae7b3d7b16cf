"""The matmul's 192 x 192 tile as a warp-specialized Gluon kernel for NVIDIA Hopper (sm90).

Triton's own layouts split a 192-row tile's 64-row MMAs by columns; cuBLAS runs this tile on the
few-wave prefill shapes with one warpgroup per 64 rows. Gluon (Triton's lower-level language)
lets the kernel say so:

* the grid is persistent (one program a multiprocessor walks the tiles, GROUP_M rows of tiles at
  a time, as matmul_kernel's persistent path does);
* one loader warp issues every TMA load of the program's tiles into a ring of STAGES slots (the
  config's num_stages): A in three 64-row blocks, B in its two parts (128 + 64 columns);
* three consumer warpgroups (the kernel's 4 warps are the first) each take 64 rows of the tile
  and run a 128-wide and a 64-wide wgmma on the same B slot, then store their rows of C through
  two TMA stores. A consumer releases a slot once the MMAs that read it have retired.

Configs reach it through the persistent grid on a tile in parts (descriptors.warp_specialized:
PERSISTENT = 1 with BLOCK_M = BLOCK_N = 192; rule warp_specialized_tile keeps it to that tile,
num_warps 4 and fp16/bf16 on sm90). TMA zero-fills loads past M, N and K and clips stores, so any
shape whose rows are 16-byte multiples runs. Gluon has no interpreter: the tests build it for sm90,
and its answers are checked on a GPU (every run checks every variant's answer).

It pays where its tiles fill whole waves of the multiprocessors and loses where a 128-row tile's
waves hold less work (seeds.py seeds it accordingly); docs/gpu.md has its current numbers and
docs/notes/2026-11-26-gpu-runs.md the measurements.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

from .descriptors import WARP_SPECIALIZED_ROWS

# Triton 3.9 (the host's) names the TMA copies async_load / async_store; 3.6 (the node's) has the old names only
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

LANGUAGE = "gluon"  # built through GluonASTSource, each descriptor's shared layout in its signature
# The tensor descriptor arguments, made on the host (descriptors.py: warp_specialized)
DESCRIPTOR_ARGS = ("a_desc", "b_desc", "b2_desc", "c_desc", "c2_desc")
# The matmul's run-time arguments that this kernel takes (it reads A, B and C through the descriptors
# only; the pointers are there so that every matmul artifact takes them alike)
ARGS = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
        "stride_cm", "stride_cn") + DESCRIPTOR_ARGS
CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
OPTION_CONSTEXPRS = {"STAGES": "num_stages"}  # constexprs the config gives as compile options
# what every config of this kernel has (rules.warp_specialized_tile); the compiler checks them
FIXED = {"TMA": 1, "PERSISTENT": 1, "SPLIT_K": 1, "SWAP_AB": 0, "STREAM_K": 0, "num_warps": 4}

ROWS = gl.constexpr(WARP_SPECIALIZED_ROWS)  # the rows of a tile each consumer warpgroup computes
# setmaxnreg of the consumers and the loader: 3 x 128 x 152 + 32 x 40 fit the 64 K registers of a
# multiprocessor, 152 the most that leaves the consumers (each holds a 64 x 192 fp32 accumulator: 96)
CONSUMER_REGS = gl.constexpr(152)
LOADER_REGS = gl.constexpr(40)


@gluon.jit
def tile_of(t, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    group = GROUP_M * num_pid_n
    first_m = (t // group) * GROUP_M
    size_m = gl.minimum(num_pid_m - first_m, GROUP_M)
    return first_m + (t % group) % size_m, (t % group) // size_m


@gluon.jit
def _loader(a_desc, b_desc, b2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, M, N, K,
            BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
            STAGES: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr):
    W: gl.constexpr = BLOCK_M // ROWS
    WIDE: gl.constexpr = b_desc.block_type.shape[0] if B_T else b_desc.block_type.shape[1]
    nbytes: gl.constexpr = W * a_desc.block_type.nbytes + b_desc.block_type.nbytes + b2_desc.block_type.nbytes
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    steps = gl.cdiv(K, BLOCK_K)
    step = 0
    for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        pid_m, pid_n = tile_of(t, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        for kk in range(steps):
            s = step % STAGES
            mbarrier.wait(empty.index(s), ((step // STAGES) & 1) ^ 1)  # the slot's last readers are done
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            k = kk * BLOCK_K
            for w in gl.static_range(W):
                if A_T:
                    tma_load(a_desc, [k, off_m + ROWS * w], bar, a_bufs.index(s * W + w))
                else:
                    tma_load(a_desc, [off_m + ROWS * w, k], bar, a_bufs.index(s * W + w))
            if B_T:
                tma_load(b_desc, [off_n, k], bar, b_bufs.index(s))
                tma_load(b2_desc, [off_n + WIDE, k], bar, b2_bufs.index(s))
            else:
                tma_load(b_desc, [k, off_n], bar, b_bufs.index(s))
                tma_load(b2_desc, [k, off_n + WIDE], bar, b2_bufs.index(s))
            step += 1


@gluon.jit
def _consumer(c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, c_smem, c2_smem, M, N, K,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
              STAGES: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr, WHO: gl.constexpr):
    """One warpgroup: rows WHO * 64 to WHO * 64 + 63 of each tile, a WIDE- and a NARROW-wide MMA."""
    W: gl.constexpr = BLOCK_M // ROWS
    WIDE: gl.constexpr = c_desc.block_type.shape[1]
    NARROW: gl.constexpr = c2_desc.block_type.shape[1]
    wide_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, WIDE, 16])
    narrow_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, NARROW, 16])
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    steps = gl.cdiv(K, BLOCK_K)
    step = 0
    for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        pid_m, pid_n = tile_of(t, num_pid_m, num_pid_n, GROUP_M)
        acc = gl.zeros((ROWS, WIDE), gl.float32, wide_layout)
        acc2 = gl.zeros((ROWS, NARROW), gl.float32, narrow_layout)
        for kk in range(steps):
            s = step % STAGES
            mbarrier.wait(ready.index(s), (step // STAGES) & 1)
            a = a_bufs.index(s * W + WHO)
            if A_T:
                a = a.permute((1, 0))
            b = b_bufs.index(s)
            b2 = b2_bufs.index(s)
            if B_T:
                b = b.permute((1, 0))
                b2 = b2.permute((1, 0))
            acc = warpgroup_mma(a, b, acc, is_async=True)
            acc2 = warpgroup_mma(a, b2, acc2, is_async=True)
            acc, acc2 = warpgroup_mma_wait(2, deps=[acc, acc2])  # the previous step's MMAs have retired
            if kk > 0:
                mbarrier.arrive(empty.index((step - 1) % STAGES))
            step += 1
        acc, acc2 = warpgroup_mma_wait(0, deps=[acc, acc2])
        mbarrier.arrive(empty.index((step - 1) % STAGES))
        tma.store_wait(0)  # this warpgroup's last tile has left its C buffers
        c_smem.store(acc.to(c_desc.dtype))
        c2_smem.store(acc2.to(c2_desc.dtype))
        fence_async_shared()
        off_m = pid_m * BLOCK_M + ROWS * WHO
        tma_store(c_desc, [off_m, pid_n * BLOCK_N], c_smem)
        tma_store(c2_desc, [off_m, pid_n * BLOCK_N + WIDE], c2_smem)
    tma.store_wait(0)


@gluon.jit
def matmul_ws_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     a_desc, b_desc, b2_desc, c_desc, c2_desc,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                     STAGES: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr):
    gl.static_assert(BLOCK_M == 3 * ROWS, "three consumer warpgroups of 64 rows")
    dtype: gl.constexpr = a_desc.dtype
    W: gl.constexpr = BLOCK_M // ROWS
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES * W] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    b2_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b2_desc.block_type.shape, b2_desc.layout)
    c_bufs = gl.allocate_shared_memory(dtype, [W] + c_desc.block_type.shape, c_desc.layout)
    c2_bufs = gl.allocate_shared_memory(dtype, [W] + c2_desc.block_type.shape, c2_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=W)  # each consumer releases the slot
    fence_async_shared()
    # (the argument tuples are written out: constexprs joined into a tuple lose their constexpr-ness)
    gl.warp_specialize([
        (_consumer, (c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, c_bufs.index(0), c2_bufs.index(0),
                     M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, A_T, B_T, 0)),
        (_consumer, (c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, c_bufs.index(1), c2_bufs.index(1),
                     M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, A_T, B_T, 1)),
        (_consumer, (c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, c_bufs.index(2), c2_bufs.index(2),
                     M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, A_T, B_T, 2)),
        (_loader, (a_desc, b_desc, b2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, M, N, K,
                   BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, A_T, B_T)),
    ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, LOADER_REGS])
