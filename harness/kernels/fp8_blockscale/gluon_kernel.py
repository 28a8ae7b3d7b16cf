"""The fp8 block-scaled GEMM as a persistent, warp-specialized Gluon kernel for NVIDIA Hopper (sm90).

The Triton kernel (triton_kernel.py) runs one fp8 warpgroup MMA per 128-wide K step and then
rescales its result in registers before the next MMA can start, so the tensor cores idle while
the CUDA cores promote. This kernel does what DeepGEMM does instead:

* the grid is persistent: one program per multiprocessor walks the tiles, GROUP_M rows of tiles
  at a time (the kernel's ``grid``: min(tiles, multiprocessors));
* one loader warp issues every TMA load into a ring of STAGES slots (the config's num_stages):
  A in BLOCK_M / 64 blocks of 64 rows x 128 K, B (N x K, K-major as the fp8 wgmma needs it) in
  one part, or in two (WIDE + NARROW) where BLOCK_N is not a power of two (96 = 64 + 32,
  160 = 128 + 32, 192 = 128 + 64): Triton's tensors are powers of two;
* BLOCK_M / 64 consumer warpgroups (cooperative: each owns 64 rows of the tile) each run the
  step's fp8 wgmma into a fresh fp32 partial, wait for it, free the slot and promote the partial
  into the fp32 accumulator times the step's A scale per row and B scale per column. While one
  warpgroup promotes, the other's MMA keeps the tensor cores busy: the promotion overlaps the
  MMAs across warpgroups (two or three of them). A step's scales are loaded right after its MMAs
  are issued, so that they arrive while the MMAs run, neither before the MMAs' issue nor between
  their wait and the promotion. With SMEM_SCALES, A's scales come from shared memory instead: each
  consumer loads its 64 rows' scales of the next 8 K steps while the present 8 run, and stages
  them K-major at a chunk's first step, so a step reads its 64 scales with one shared-memory load:
  on an H100, 52 % of the plain kernel's warp stalls waited on its per-row global scale loads
  (Nsight Compute), an eighth of whose sectors missed L1. With SMEM_SCALES 2 (DeepGEMM's form)
  the loader copies a K step's A scales into the step's ring slot by TMA too, 64 rows a consumer
  from the M-major copy of A's scales (the ``a_scale_t`` operand), and each consumer reads its
  rows there with two shared-memory loads a thread: no global load for them at all;
* B's scale is one scalar a step where the tile lies inside one 128-wide scale block (BLOCK_N a
  power of two up to 128), else two scalars a part and a select by column: a part that
  straddles two scale blocks (96, 160, 192 and 256 wide tiles) is promoted right;
* C leaves through TMA stores (bf16, 64 rows a warpgroup), clipped at M and N.
* with num_ctas 2 (a compile option) the kernel runs in clusters of two CTAs: a tile of 2 x BLOCK_M
  rows, each CTA its own BLOCK_M rows of A and C, and CTA 0's TMA multicasts the tile's B into both
  CTAs' slots (Gluon's CGA layouts: the descriptors' ``cga``; the consumers release a slot to both
  loaders, _release). Triton 3.9's Gluon has the multicast, 3.6's not (rules
  cluster_needs_multicast). On an H200 it ran within a few per cent of the same tiles without.

TMA zero-fills loads past M, N and K, so any K that is a multiple of 16 and any N that is a
multiple of 8 runs (rules ws_unaligned). One scale per 128-wide K step: BLOCK_K is 128. The
kernel has no interpreter: the tests build it for sm90 and check its registers; its answers are
checked on a GPU like every variant's.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

# the matmul's Gluon GROUP_M tile order and TMA copies (named by the Triton version: 3.9's or 3.6's)
from ..matmul.gluon_kernel import tile_of, tma_load, tma_store
from .descriptors import SCALE_CHUNK, WS_ROWS
from .fp8 import SCALE_BLOCK

# a barrier among the partition's threads (3.9's name, else 3.6's)
thread_barrier = getattr(gl, "barrier", None) or gl.thread_barrier

LANGUAGE = "gluon"  # built through GluonASTSource, each descriptor's shared layout in its signature
# The tensor descriptor arguments, made on the host (descriptors.py in this folder); b2_desc and
# c2_desc only where BLOCK_N is in two parts (otherwise None)
DESCRIPTOR_ARGS = ("a_desc", "b_desc", "b2_desc", "c_desc", "c2_desc", "as_desc")
# The run-time arguments (the pointers of A, B and C are there so that every artifact of the
# kernel takes them alike; the kernel reads A, B and C through the descriptors)
ARGS = ("a_ptr", "b_ptr", "c_ptr", "a_scale_ptr", "b_scale_ptr", "M", "N", "K",
        "stride_am", "stride_ak", "stride_bn", "stride_bk", "stride_cm", "stride_cn",
        "stride_asm", "stride_ask", "stride_bsn", "stride_bsk") + DESCRIPTOR_ARGS
CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
OPTION_CONSTEXPRS = {"STAGES": "num_stages"}
# OVERLAP 1: the epilogue under the next tile's first MMA (_consumer_overlap); ORDERED 1: the
# consumers issue each K step's MMAs in turn (_take_turn); PIPE 1: each promotion under the next
# step's MMA (_consumer_pipelined); SMEM_SCALES 1: A's scales staged in shared memory (_chunk_scale),
# 2: copied into each ring slot by TMA (_ring_scales)
OPTIONAL_CONSTEXPRS = {"OVERLAP": 0, "ORDERED": 0, "PIPE": 0, "SMEM_SCALES": 0}
# constexprs the config gives as compile options
# what every config of this kernel has (rules.ws_config); the compiler checks them
FIXED = {"WS": 1, "TMA": 1, "SPLIT_K": 1, "num_warps": 4, "BLOCK_K": 128, "CUDA": 0, "SHARE_A": 0, "SWAP_AB": 0}

ROWS = gl.constexpr(WS_ROWS)  # the rows of a tile each consumer warpgroup computes
SCALE = gl.constexpr(SCALE_BLOCK)
CHUNK = gl.constexpr(SCALE_CHUNK)  # SMEM_SCALES: the K steps of A scales a consumer stages at a time
# a chunk in registers: four consecutive steps of a row a thread (16 rows x 2 a warp)
CHUNK_LAYOUT = gl.constexpr(gl.BlockedLayout([1, 4], [16, 2], [4, 1], [1, 0]))
# setmaxnreg of the consumer warpgroups, by their count: consumers x 128 threads x regs and the
# loader's warpgroup fit the 64 K registers of a multiprocessor
# (the loader's warpgroup keeps the rest: 65536 - consumers x 128 x regs, over 128 threads)
CONSUMER_REGS = {1: 256, 2: 232, 3: 160}
REGS_1 = gl.constexpr(CONSUMER_REGS[1])
REGS_2 = gl.constexpr(CONSUMER_REGS[2])
REGS_3 = gl.constexpr(CONSUMER_REGS[3])


@gluon.jit
def _cta_rank():
    """This program's rank in its cluster of CTAs (0 where the kernel runs without clusters)."""
    return gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r", [], dtype=gl.int32, is_pure=True,
                                     pack=1)


@gluon.jit
def _release(empty, pair, s, CTAS: gl.constexpr):
    """A consumer is done with ring slot s: it arrives on its CTA's barrier of the slot and, in a
    cluster of two (num_ctas 2), on the pair's barrier in CTA 0 too, which counts both CTAs'
    consumers: CTA 0's loader multicasts B into both CTAs' slots, so it waits for the pair's
    barrier; CTA 1's loader, which writes only its own A rows, for its own. (sm90 has no multicast
    arrive, and Gluon routes a plain arrive only to its own CTA or from CTA 0 to all.)"""
    mbarrier.arrive(empty.index(s))
    if CTAS > 1:
        mbarrier.arrive(pair.index(s))


@gluon.jit
def _loader(a_desc, b_desc, b2_desc, as_desc, a_bufs, b_bufs, b2_bufs, sa_bufs, ready, empty, pair, M, N, K,
            BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
            STAGES: gl.constexpr, TWO_PARTS: gl.constexpr, RING_SCALES: gl.constexpr):
    """Every TMA load of the ring. In a cluster of two CTAs (num_ctas 2: a tile of 2 x BLOCK_M rows,
    each CTA its BLOCK_M) each CTA loads its own rows of A and CTA 0 multicasts B to both."""
    CTAS: gl.constexpr = gl.num_ctas()
    W: gl.constexpr = BLOCK_M // ROWS
    WIDE: gl.constexpr = b_desc.block_type.shape[0]
    # the bytes that land in this CTA's slot: its 64-row A blocks and all of B
    a_bytes: gl.constexpr = W * ROWS * BLOCK_K * a_desc.dtype.primitive_bitwidth // 8
    nbytes: gl.constexpr = (a_bytes + b_desc.block_type.nbytes + (b2_desc.block_type.nbytes if TWO_PARTS else 0)
                            + (W * as_desc.block_type.nbytes if RING_SCALES else 0))
    num_pid_m = gl.cdiv(M, BLOCK_M * CTAS)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    steps = gl.cdiv(K, BLOCK_K)
    step = 0
    for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        pid_m, pid_n = tile_of(t, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M * CTAS
        off_n = pid_n * BLOCK_N
        for kk in range(steps):
            s = step % STAGES
            phase = ((step // STAGES) & 1) ^ 1
            if CTAS == 1:
                mbarrier.wait(empty.index(s), phase)  # the slot's last readers are done
            else:  # CTA 0 multicasts B: both CTAs' readers (_release)
                leader = _cta_rank() == 0
                mbarrier.wait(pair.index(s), phase, pred=leader)
                mbarrier.wait(empty.index(s), phase, pred=not leader)
            bar = ready.index(s)
            k = kk * BLOCK_K
            mbarrier.expect(bar, nbytes)
            for w in gl.static_range(W):
                tma_load(a_desc, [off_m + ROWS * CTAS * w, k], bar, a_bufs.index(s * W + w))
            if RING_SCALES:  # A's scales of this K step, a consumer's 64 rows a copy (M-major: one row)
                for w in gl.static_range(W):
                    tma_load(as_desc, [kk, off_m + ROWS * w], bar, sa_bufs.index(s * W + w))
            if CTAS == 1:
                tma_load(b_desc, [off_n, k], bar, b_bufs.index(s))
                if TWO_PARTS:
                    tma_load(b2_desc, [off_n + WIDE, k], bar, b2_bufs.index(s))
            else:
                tma_load(b_desc, [off_n, k], bar, b_bufs.index(s), multicast=True)
                if TWO_PARTS:
                    tma_load(b2_desc, [off_n + WIDE, k], bar, b2_bufs.index(s), multicast=True)
            step += 1


@gluon.jit
def _b_scales(b_scale_ptr, N, off_n, kk, stride_bsn, stride_bsk):
    """The two B scales a part at column off_n may need at K step kk: its first 128-wide scale
    block's and the next one's (clipped at the last block). Two scalar loads, so no per-column
    pointers live in registers."""
    first = off_n // SCALE
    s0 = gl.load(b_scale_ptr + first * stride_bsn + kk * stride_bsk)
    s1 = gl.load(b_scale_ptr + gl.minimum(first + 1, (N - 1) // SCALE) * stride_bsn + kk * stride_bsk)
    return s0, s1


@gluon.jit
def _scale_chunk(a_scale_ptr, off_m, kk, M, steps, stride_asm, stride_ask):
    """SMEM_SCALES: the A scales of the warpgroup's 64 rows from off_m (rows past M: the last row's)
    at K steps kk to kk + CHUNK - 1 (0 past the last step), as ROWS x CHUNK in registers. The
    offsets are 32-bit (64-bit addresses a value spilled PIPE's registers)."""
    rows = gl.minimum(off_m + gl.arange(0, ROWS, gl.SliceLayout(1, CHUNK_LAYOUT)), M - 1)
    cols = kk + gl.arange(0, CHUNK, gl.SliceLayout(0, CHUNK_LAYOUT))
    return gl.load(a_scale_ptr + (rows[:, None] * stride_asm + cols[None, :] * stride_ask), mask=cols[None, :] < steps,
                   other=0.0)


if hasattr(mbarrier, "allocate_mbarrier"):  # Triton 3.9: one barrier a CTA of the cluster (or CTA 0's, two_ctas)
    cluster_barriers = mbarrier.allocate_mbarrier
else:  # Triton 3.6 (the name must resolve: Triton looks up every global a kernel names, built or not)
    @gluon.jit
    def cluster_barriers(batch: gl.constexpr = None, two_ctas: gl.constexpr = False):
        gl.static_assert(False, "clusters need Triton 3.9's Gluon (rules cluster_needs_multicast)")


ROW_LAYOUT = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [0]))
if hasattr(gl.shared_memory_descriptor, "reinterpret"):  # Triton 3.9's name
    @gluon.jit
    def _step_rows(sc_smem):
        """The chunk buffer as CHUNK rows of one step's 64 scales (a layout that one index takes)."""
        return sc_smem.reinterpret(gl.float32, [CHUNK, ROWS], ROW_LAYOUT)
    @gluon.jit
    def _slot_rows(sa_bufs):
        """SMEM_SCALES 2: the ring's A scale buffers (slots x consumers, 1, 64) as rows of 64."""
        return sa_bufs.reinterpret(gl.float32, [sa_bufs.shape[0], ROWS], ROW_LAYOUT)
else:  # Triton 3.6's
    @gluon.jit
    def _slot_rows(sa_bufs):
        """SMEM_SCALES 2: the ring's A scale buffers (slots x consumers, 1, 64) as rows of 64."""
        return sa_bufs._reinterpret(gl.float32, [sa_bufs.shape[0], ROWS], ROW_LAYOUT)

    @gluon.jit
    def _step_rows(sc_smem):
        """The chunk buffer as CHUNK rows of one step's 64 scales (a layout that one index takes)."""
        return sc_smem._reinterpret(gl.float32, [CHUNK, ROWS], ROW_LAYOUT)


@gluon.jit
def _ring_scales(sa_bufs, s, W: gl.constexpr, WHO: gl.constexpr, layout: gl.constexpr):
    """SMEM_SCALES 2: consumer WHO's 64 A scales of the K step in ring slot s, where the loader's
    TMA copied them (one M-major row of 64) with the step's A and B: one per row of the MMA's
    accumulator, read with two shared-memory loads a thread, no global load."""
    return _slot_rows(sa_bufs).index(s * W + WHO).load(gl.SliceLayout(1, layout))


@gluon.jit
def _scale_smem(sc_bufs, sa_bufs, WHO: gl.constexpr, RING: gl.constexpr):
    """The shared memory of consumer WHO's A scales: the ring's scale buffers (SMEM_SCALES 2, RING)
    or its own chunk buffer (SMEM_SCALES 1; a stand-in otherwise)."""
    if RING:
        out = sa_bufs
    else:
        out = sc_bufs.index(WHO)
    return out


@gluon.jit
def _stage_chunk(sc_smem, chunk):
    """Write a chunk of A scales into the warpgroup's K-major buffer (CHUNK x ROWS: a step's 64
    scales are one row, read with one dynamic index), between barriers: every thread has read the
    last chunk before, and sees this one after."""
    thread_barrier()
    sc_smem.store(gl.permute(chunk, (1, 0)))
    thread_barrier()


@gluon.jit
def _chunk_scale(sc_smem, chunk, j, fresh, a_scale_ptr, off_m, M, steps, stride_asm, stride_ask,
                 layout: gl.constexpr):
    """SMEM_SCALES: (A scales of K step j from the staged chunk, the chunk in flight). Where j
    starts a chunk and is ``fresh`` (not a repeated read of the tile's last step), the chunk in
    registers is staged first and the next one's loads issued: they have CHUNK steps to land. A
    tile's first chunk is loaded at its first step, after that step's MMAs are issued."""
    if fresh:
        if j % CHUNK == 0:
            if j == 0:
                chunk = _scale_chunk(a_scale_ptr, off_m, 0, M, steps, stride_asm, stride_ask)
            _stage_chunk(sc_smem, chunk)
            chunk = _scale_chunk(a_scale_ptr, off_m, j + CHUNK, M, steps, stride_asm, stride_ask)
    return _step_rows(sc_smem).index(j % CHUNK).load(gl.SliceLayout(1, layout)), chunk


@gluon.jit
def _promote(acc, part, a_s, s0, s1, off_n, WIDTH: gl.constexpr, ONE_BLOCK: gl.constexpr, layout: gl.constexpr):
    """acc + part x (A scale of the row) x (B scale of the column), for a WIDTH-wide part of the
    tile at column off_n whose B scales are s0 (its first scale block) and s1 (the next). The part
    lies in one 128-wide scale block (ONE_BLOCK: a power of two BLOCK_N up to 128: one FFMA an
    element with the row's product a_s * s0) or may straddle two (a select by column)."""
    if ONE_BLOCK:
        return acc + part * (a_s * s0)[:, None]
    else:
        cols = off_n + gl.arange(0, WIDTH, gl.SliceLayout(0, layout))
        b_s = gl.where(cols < (off_n // SCALE + 1) * SCALE, s0, s1)
        return acc + part * (a_s[:, None] * b_s[None, :])


@gluon.jit
def _take_turn(turn, g, WHO: gl.constexpr, ORDER: gl.constexpr):
    """ORDER: before issuing its MMAs of step g (counted over all its tiles) consumer WHO waits
    until consumer WHO - 1 has issued its own (consumer 0: until the last consumer issued step
    g - 1). The tensor cores then run one consumer's step after the other's instead of both
    interleaved, so one promotes while the next one's MMAs run rather than both finishing, and
    promoting, together."""
    if ORDER:
        if WHO == 0:
            if g > 0:
                mbarrier.wait(turn.index(0), (g - 1) & 1)
        else:
            mbarrier.wait(turn.index(WHO), g & 1)


@gluon.jit
def _pass_turn(turn, WHO: gl.constexpr, W: gl.constexpr, ORDER: gl.constexpr):
    if ORDER:
        mbarrier.arrive(turn.index((WHO + 1) % W))


@gluon.constexpr_function
def _mma_layout(width, ctas):
    """The fp8 wgmma's accumulator layout of a consumer's 64 x width part; in a cluster of two
    CTAs, of its 128 x width part whose rows the CTAs split (each CTA its 64)."""
    if ctas == 1:
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, width, 32])
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, width, 32],
                                     cga_layout=[[1, 0]])


@gluon.jit
def _consumer_steps(c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pair, turn, sc_smem, c_smem, c2_smem,
                    a_scale_ptr, b_scale_ptr, M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
                    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                    STAGES: gl.constexpr, TWO_PARTS: gl.constexpr, WHO: gl.constexpr, ORDER: gl.constexpr,
                    SMEM_SCALES: gl.constexpr):
    """One warpgroup: rows WHO * 64 to WHO * 64 + 63 of each tile; per K step an fp8 wgmma into a
    fresh partial (two, one a part, where BLOCK_N is in two parts), then the promotion."""
    CTAS: gl.constexpr = gl.num_ctas()
    CROWS: gl.constexpr = ROWS * CTAS  # the consumer's rows of the cluster's tile, ROWS in each CTA
    W: gl.constexpr = BLOCK_M // ROWS
    WIDE: gl.constexpr = c_desc.block_type.shape[1]
    ONE_BLOCK: gl.constexpr = (not TWO_PARTS) and WIDE <= SCALE  # each tile inside one B scale block
    layout: gl.constexpr = _mma_layout(WIDE, CTAS)
    num_pid_m = gl.cdiv(M, BLOCK_M * CTAS)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    steps = gl.cdiv(K, BLOCK_K)
    step = 0
    for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        off_m, off_n, a_scale_rows = _tile_rows(t, a_scale_ptr, M, N, stride_asm, BLOCK_M, BLOCK_N, GROUP_M, WHO,
                                                layout)
        acc = gl.zeros((CROWS, WIDE), gl.float32, layout)
        part = gl.zeros((CROWS, WIDE), gl.float32, layout)
        if TWO_PARTS:
            NARROW: gl.constexpr = c2_desc.block_type.shape[1]
            layout2: gl.constexpr = _mma_layout(NARROW, CTAS)
            acc2 = gl.zeros((CROWS, NARROW), gl.float32, layout2)
            part2 = gl.zeros((CROWS, NARROW), gl.float32, layout2)
        if SMEM_SCALES == 1:
            chunk = gl.zeros((ROWS, CHUNK), gl.float32, CHUNK_LAYOUT)  # loaded at the tile's first step
        for kk in range(steps):
            s = step % STAGES
            mbarrier.wait(ready.index(s), (step // STAGES) & 1)
            a = a_bufs.index(s * W + WHO)
            _take_turn(turn, step, WHO, ORDER)
            part = warpgroup_mma(a, b_bufs.index(s).permute((1, 0)), part, use_acc=False, is_async=True)
            if TWO_PARTS:
                part2 = warpgroup_mma(a, b2_bufs.index(s).permute((1, 0)), part2, use_acc=False, is_async=True)
            _pass_turn(turn, WHO, W, ORDER)
            # this step's scales load while its MMAs run (loaded a step ahead, before the MMAs'
            # issue, the one-part tiles were 0 to 8 % slower on an H200)
            if SMEM_SCALES == 2:
                a_s = _ring_scales(sc_smem, s, W, WHO, layout)
            elif SMEM_SCALES == 1:
                a_s, chunk = _chunk_scale(sc_smem, chunk, kk, True, a_scale_ptr, off_m, M, steps, stride_asm,
                                          stride_ask, layout)
            else:
                a_s = gl.load(a_scale_rows + kk * stride_ask)
            s0, s1 = _b_scales(b_scale_ptr, N, off_n, kk, stride_bsn, stride_bsk)
            if TWO_PARTS:
                t0, t1 = _b_scales(b_scale_ptr, N, off_n + WIDE, kk, stride_bsn, stride_bsk)
                part, part2 = warpgroup_mma_wait(0, deps=[part, part2])
            else:
                part = warpgroup_mma_wait(0, deps=[part])
            _release(empty, pair, s, CTAS)  # the slot is read: the loader may refill it
            acc = _promote(acc, part, a_s, s0, s1, off_n, WIDE, ONE_BLOCK, layout)
            if TWO_PARTS:
                acc2 = _promote(acc2, part2, gl.convert_layout(a_s, gl.SliceLayout(1, layout2)), t0, t1,
                                off_n + WIDE, NARROW, False, layout2)
            step += 1
        tma.store_wait(0)  # this warpgroup's last tile has left its C buffers
        c_smem.store(acc.to(c_desc.dtype))
        if TWO_PARTS:
            c2_smem.store(acc2.to(c2_desc.dtype))
        fence_async_shared()
        tma_store(c_desc, [off_m, off_n], c_smem)
        if TWO_PARTS:
            tma_store(c2_desc, [off_m, off_n + WIDE], c2_smem)
    tma.store_wait(0)


@gluon.jit
def _tile_rows(t, a_scale_ptr, M, N, stride_asm, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
               GROUP_M: gl.constexpr, WHO: gl.constexpr, layout: gl.constexpr):
    """Tile t's first row for warpgroup WHO, first column, and its rows' A scale pointers (rows
    past M clipped to the last: TMA zero-fills them and the C store drops them)."""
    CTAS: gl.constexpr = gl.num_ctas()
    pid_m, pid_n = tile_of(t, gl.cdiv(M, BLOCK_M * CTAS), gl.cdiv(N, BLOCK_N), GROUP_M)
    off_m = pid_m * BLOCK_M * CTAS + ROWS * CTAS * WHO
    rows = gl.minimum(off_m + gl.arange(0, ROWS * CTAS, gl.SliceLayout(1, layout)), M - 1)
    return off_m, pid_n * BLOCK_N, a_scale_ptr + rows * stride_asm


@gluon.jit
def _consumer_overlap(c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pair, turn, c_smem, c2_smem, a_scale_ptr,
                      b_scale_ptr, M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
                      BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                      STAGES: gl.constexpr, TWO_PARTS: gl.constexpr, WHO: gl.constexpr, ORDER: gl.constexpr):
    """_consumer with the epilogue under the next tile's first MMA (OVERLAP = 1): one flat loop over
    this program's K steps of all its tiles; each step waits for its MMA, promotes, then issues the
    next step's MMA (the next tile's first at a tile's end) before the tile's C store, so the
    store's conversion and shared-memory writes run while the tensor cores work. The scales are
    prefetched a step ahead across tiles too."""
    W: gl.constexpr = BLOCK_M // ROWS
    WIDE: gl.constexpr = c_desc.block_type.shape[1]
    ONE_BLOCK: gl.constexpr = (not TWO_PARTS) and WIDE <= SCALE
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                     instr_shape=[16, WIDE, 32])
    tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    steps = gl.cdiv(K, BLOCK_K)
    me = gl.program_id(0)
    programs = gl.num_programs(0)
    total = gl.cdiv(tiles - me, programs) * steps  # this program's K steps, all tiles
    t = me
    off_m, off_n, a_scale_rows = _tile_rows(t, a_scale_ptr, M, N, stride_asm, BLOCK_M, BLOCK_N, GROUP_M, WHO, layout)
    acc = gl.zeros((ROWS, WIDE), gl.float32, layout)
    part = gl.zeros((ROWS, WIDE), gl.float32, layout)
    a_s = gl.load(a_scale_rows)
    s0, s1 = _b_scales(b_scale_ptr, N, off_n, 0, stride_bsn, stride_bsk)
    if TWO_PARTS:
        NARROW: gl.constexpr = c2_desc.block_type.shape[1]
        layout2: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, NARROW, 32])
        acc2 = gl.zeros((ROWS, NARROW), gl.float32, layout2)
        part2 = gl.zeros((ROWS, NARROW), gl.float32, layout2)
        t0, t1 = _b_scales(b_scale_ptr, N, off_n + WIDE, 0, stride_bsn, stride_bsk)
    # the first step's MMA
    mbarrier.wait(ready.index(0), 0)
    _take_turn(turn, 0, WHO, ORDER)
    part = warpgroup_mma(a_bufs.index(WHO), b_bufs.index(0).permute((1, 0)), part, use_acc=False, is_async=True)
    if TWO_PARTS:
        part2 = warpgroup_mma(a_bufs.index(WHO), b2_bufs.index(0).permute((1, 0)), part2, use_acc=False,
                              is_async=True)
    _pass_turn(turn, WHO, W, ORDER)
    kk = 0
    for step in range(total):
        # the next step's tile and K step, and its scales (in flight while this step's MMA runs)
        # (the next tile's offsets are worked out at a tile's last step only: a tile index to offsets
        # every step would double the consumers' instructions a step)
        last = kk == steps - 1
        nk = kk + 1
        nt = t
        n_off_m = off_m
        n_off_n = off_n
        n_rows = a_scale_rows
        if last:
            nk = 0
            nt = t + programs
            n_off_m, n_off_n, n_rows = _tile_rows(gl.minimum(nt, tiles - 1), a_scale_ptr, M, N, stride_asm, BLOCK_M,
                                                  BLOCK_N, GROUP_M, WHO, layout)
        a_next = gl.load(n_rows + nk * stride_ask)
        s0_next, s1_next = _b_scales(b_scale_ptr, N, n_off_n, nk, stride_bsn, stride_bsk)
        if TWO_PARTS:
            t0_next, t1_next = _b_scales(b_scale_ptr, N, n_off_n + WIDE, nk, stride_bsn, stride_bsk)
        s = step % STAGES
        if TWO_PARTS:
            part, part2 = warpgroup_mma_wait(0, deps=[part, part2])
        else:
            part = warpgroup_mma_wait(0, deps=[part])
        mbarrier.arrive(empty.index(s))  # the slot is read: the loader may refill it
        acc = _promote(acc, part, a_s, s0, s1, off_n, WIDE, ONE_BLOCK, layout)
        if TWO_PARTS:
            acc2 = _promote(acc2, part2, gl.convert_layout(a_s, gl.SliceLayout(1, layout2)), t0, t1,
                            off_n + WIDE, NARROW, False, layout2)
        # the next step's MMA, before this tile's store; after the last step it reads a stale slot
        # (nothing refills it any more) and is drained below: the loop carries one MMA in flight
        ns = (step + 1) % STAGES
        if step + 1 < total:
            mbarrier.wait(ready.index(ns), ((step + 1) // STAGES) & 1)
        _take_turn(turn, step + 1, WHO, ORDER)
        part = warpgroup_mma(a_bufs.index(ns * W + WHO), b_bufs.index(ns).permute((1, 0)), part, use_acc=False,
                             is_async=True)
        if TWO_PARTS:
            part2 = warpgroup_mma(a_bufs.index(ns * W + WHO), b2_bufs.index(ns).permute((1, 0)), part2,
                                  use_acc=False, is_async=True)
        _pass_turn(turn, WHO, W, ORDER)
        if last:  # the tile's C leaves through TMA stores; its accumulators start over
            tma.store_wait(0)
            c_smem.store(acc.to(c_desc.dtype))
            if TWO_PARTS:
                c2_smem.store(acc2.to(c2_desc.dtype))
            fence_async_shared()
            tma_store(c_desc, [off_m, off_n], c_smem)
            if TWO_PARTS:
                tma_store(c2_desc, [off_m, off_n + WIDE], c2_smem)
            acc = gl.zeros((ROWS, WIDE), gl.float32, layout)
            if TWO_PARTS:
                acc2 = gl.zeros((ROWS, NARROW), gl.float32, layout2)
        off_m = n_off_m
        off_n = n_off_n
        a_scale_rows = n_rows
        t = nt
        kk = nk
        a_s = a_next
        s0 = s0_next
        s1 = s1_next
        if TWO_PARTS:
            t0 = t0_next
            t1 = t1_next
    if TWO_PARTS:
        part, part2 = warpgroup_mma_wait(0, deps=[part, part2])
    else:
        part = warpgroup_mma_wait(0, deps=[part])
    tma.store_wait(0)


@gluon.jit
def _step_mma(a_bufs, b_bufs, ready, part, step, real, STAGES: gl.constexpr, W: gl.constexpr, WHO: gl.constexpr):
    """K step ``step`` (counted over all this program's tiles): wait for its ring slot (``real``;
    else a step past the tile's last: its MMA reads whatever the slot holds, and nobody reads its
    result), issue its MMAs into ``part`` (a fresh partial)."""
    s = step % STAGES
    if real:
        mbarrier.wait(ready.index(s), (step // STAGES) & 1)
    return warpgroup_mma(a_bufs.index(s * W + WHO), b_bufs.index(s).permute((1, 0)), part, use_acc=False,
                         is_async=True)


@gluon.jit
def _consumer_pipelined(c_desc, a_bufs, b_bufs, ready, empty, pair, sc_smem, c_smem, a_scale_ptr, b_scale_ptr, M, N, K,
                        stride_asm, stride_ask, stride_bsn, stride_bsk,
                        BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                        STAGES: gl.constexpr, WHO: gl.constexpr, SMEM_SCALES: gl.constexpr):
    """PIPE = 1: two partials a warpgroup, so that each K step's promotion runs under the next
    step's MMA instead of between them: wait for step k's MMA, issue step k + 1's into the other
    partial, promote k while it runs, and so on. The tensor cores then hold this warpgroup's next
    MMA while it promotes, not only the other consumers' (on an H200: 2 to 7 % faster than PIPE = 0
    where K has 56 to 128 steps, 4 % slower at 16).

    What ptxas accepts: it serializes every wgmma of the kernel (C7514) when a partial is read after
    a wait that leaves the other partial's MMA in flight, or after the loop that carries it; so each
    step waits for all MMAs before issuing the next, and the loop runs pairs of steps (Gluon carries
    an in-flight MMA across iterations only as itself) with p1's MMA in flight at each iteration's
    start and end, the last a step past the tile's last, whose result nobody reads (one MMA a tile
    more). Where a tile's steps are odd its first runs alone. A step's scales load right after its
    MMAs are issued. Accumulator and two partials of 64 x BLOCK_N fp32 live in registers: BLOCK_N a
    power of two up to 128, inside one B scale block, at most two consumers (rules pipe_config)."""
    CTAS: gl.constexpr = gl.num_ctas()
    CROWS: gl.constexpr = ROWS * CTAS
    W: gl.constexpr = BLOCK_M // ROWS
    layout: gl.constexpr = _mma_layout(BLOCK_N, CTAS)
    steps = gl.cdiv(K, BLOCK_K)
    alone = steps % 2  # the first step runs alone where the steps are odd
    step = 0
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M * CTAS) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        off_m, off_n, a_scale_rows = _tile_rows(t, a_scale_ptr, M, N, stride_asm, BLOCK_M, BLOCK_N, GROUP_M, WHO,
                                                layout)
        b_scale_col = b_scale_ptr + (off_n // SCALE) * stride_bsn
        acc = gl.zeros((CROWS, BLOCK_N), gl.float32, layout)
        p0 = gl.zeros((CROWS, BLOCK_N), gl.float32, layout)
        if SMEM_SCALES == 1:
            chunk = gl.zeros((ROWS, CHUNK), gl.float32, CHUNK_LAYOUT)  # loaded at the tile's first step
        if alone:
            p0 = _step_mma(a_bufs, b_bufs, ready, p0, step, True, STAGES, W, WHO)
            if SMEM_SCALES == 2:
                a0 = _ring_scales(sc_smem, step % STAGES, W, WHO, layout)
            elif SMEM_SCALES == 1:
                a0, chunk = _chunk_scale(sc_smem, chunk, 0, True, a_scale_ptr, off_m, M, steps, stride_asm,
                                         stride_ask, layout)
            else:
                a0 = gl.load(a_scale_rows)
            b0 = gl.load(b_scale_col)
            p0 = warpgroup_mma_wait(0, deps=[p0])
            _release(empty, pair, step % STAGES, CTAS)  # the slot is read: the loader may refill it
            acc = acc + p0 * (a0 * b0)[:, None]
            step += 1
        # step `alone` into p1 (past the last where the tile had one step); then pairs
        last = steps - 1
        p1 = _step_mma(a_bufs, b_bufs, ready, gl.zeros((CROWS, BLOCK_N), gl.float32, layout), step, alone < steps,
                       STAGES, W, WHO)
        if SMEM_SCALES == 2:
            a1 = _ring_scales(sc_smem, step % STAGES, W, WHO, layout)
        elif SMEM_SCALES == 1:
            a1, chunk = _chunk_scale(sc_smem, chunk, gl.minimum(alone, last), alone < steps, a_scale_ptr, off_m, M,
                                     steps, stride_asm, stride_ask, layout)
        else:
            a1 = gl.load(a_scale_rows + gl.minimum(alone, last) * stride_ask)
        b1 = gl.load(b_scale_col + gl.minimum(alone, last) * stride_bsk)
        for k in range(alone, steps, 2):  # p1 holds step k; k + 1 into p0, k + 2 into p1
            done = warpgroup_mma_wait(0, deps=[p1])  # step k
            p0 = _step_mma(a_bufs, b_bufs, ready, p0, step + 1, True, STAGES, W, WHO)
            if SMEM_SCALES == 2:  # the scales load while the MMAs run
                a0 = _ring_scales(sc_smem, (step + 1) % STAGES, W, WHO, layout)
            elif SMEM_SCALES == 1:
                a0, chunk = _chunk_scale(sc_smem, chunk, k + 1, True, a_scale_ptr, off_m, M, steps, stride_asm,
                                         stride_ask, layout)
            else:
                a0 = gl.load(a_scale_rows + (k + 1) * stride_ask)
            b0 = gl.load(b_scale_col + (k + 1) * stride_bsk)
            _release(empty, pair, step % STAGES, CTAS)
            acc = acc + done * (a1 * b1)[:, None]
            p0 = warpgroup_mma_wait(0, deps=[p0])  # step k + 1
            p1 = _step_mma(a_bufs, b_bufs, ready, done, step + 2, k + 2 < steps, STAGES, W, WHO)
            if SMEM_SCALES == 2:  # past the last step: a stale slot's scales, unread like its MMA
                a1 = _ring_scales(sc_smem, (step + 2) % STAGES, W, WHO, layout)
            elif SMEM_SCALES == 1:
                a1, chunk = _chunk_scale(sc_smem, chunk, gl.minimum(k + 2, last), k + 2 < steps, a_scale_ptr, off_m,
                                         M, steps, stride_asm, stride_ask, layout)
            else:
                a1 = gl.load(a_scale_rows + gl.minimum(k + 2, last) * stride_ask)
            b1 = gl.load(b_scale_col + gl.minimum(k + 2, last) * stride_bsk)
            _release(empty, pair, (step + 1) % STAGES, CTAS)
            acc = acc + p0 * (a0 * b0)[:, None]
            step += 2
        p1 = warpgroup_mma_wait(0, deps=[p1])  # the step past the last, unread
        tma.store_wait(0)  # this warpgroup's last tile has left its C buffer
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma_store(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(0)


@gluon.jit
def _consumer(c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pair, turn, sc_smem, c_smem, c2_smem, a_scale_ptr,
              b_scale_ptr, M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
              STAGES: gl.constexpr, TWO_PARTS: gl.constexpr, WHO: gl.constexpr, OVERLAP: gl.constexpr,
              ORDERED: gl.constexpr, PIPE: gl.constexpr, SMEM_SCALES: gl.constexpr):
    """Consumer warpgroup WHO: each promotion under the next step's MMA (PIPE); the epilogue under
    the next tile's first MMA (OVERLAP) or after it; the consumers' MMAs in turn (ORDERED, two or
    three consumers) or as they come; A's scales from shared memory (SMEM_SCALES, sc_smem: this
    consumer's chunk buffer) or global memory."""
    ORDER: gl.constexpr = ORDERED and BLOCK_M > ROWS
    if PIPE:
        gl.static_assert(not TWO_PARTS and not OVERLAP and not ORDERED, "PIPE: one tile part, no OVERLAP or ORDERED")
        _consumer_pipelined(c_desc, a_bufs, b_bufs, ready, empty, pair, sc_smem, c_smem, a_scale_ptr, b_scale_ptr,
                            M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
                            BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, WHO, SMEM_SCALES)
    elif OVERLAP:
        gl.static_assert(not SMEM_SCALES, "SMEM_SCALES: the plain and PIPE consumers")
        _consumer_overlap(c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pair, turn, c_smem, c2_smem,
                          a_scale_ptr, b_scale_ptr, M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
                          BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, TWO_PARTS, WHO, ORDER)
    else:
        _consumer_steps(c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pair, turn, sc_smem, c_smem, c2_smem,
                        a_scale_ptr, b_scale_ptr, M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
                        BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, TWO_PARTS, WHO, ORDER, SMEM_SCALES)


@gluon.jit
def fp8_blockscale_ws_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, M, N, K,
                             stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
                             stride_asm, stride_ask, stride_bsn, stride_bsk,
                             a_desc, b_desc, b2_desc, c_desc, c2_desc, as_desc,
                             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                             GROUP_M: gl.constexpr, STAGES: gl.constexpr, OVERLAP: gl.constexpr = 0,
                             ORDERED: gl.constexpr = 0, PIPE: gl.constexpr = 0, SMEM_SCALES: gl.constexpr = 0):
    gl.static_assert(BLOCK_K == SCALE, "one scale per K step: BLOCK_K is the 128-wide scale block")
    gl.static_assert(BLOCK_M % ROWS == 0, "BLOCK_M is 64 rows a consumer warpgroup")
    TWO_PARTS: gl.constexpr = (BLOCK_N & (BLOCK_N - 1)) != 0
    W: gl.constexpr = BLOCK_M // ROWS
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES * W] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [W] + c_desc.block_type.shape, c_desc.layout)
    if TWO_PARTS:
        b2_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b2_desc.block_type.shape, b2_desc.layout)
        c2_bufs = gl.allocate_shared_memory(c2_desc.dtype, [W] + c2_desc.block_type.shape, c2_desc.layout)
    else:  # unused stand-ins: the partitions take the same arguments either way
        b2_bufs = b_bufs
        c2_bufs = c_bufs
    # SMEM_SCALES: each consumer's chunk of A scales, K-major (a one-row stand-in otherwise)
    SC_ROWS: gl.constexpr = CHUNK if SMEM_SCALES == 1 else 1
    RING_SCALES: gl.constexpr = SMEM_SCALES == 2
    CTAS: gl.constexpr = gl.num_ctas()
    if RING_SCALES:  # SMEM_SCALES 2: each slot's A scales, 64 rows a consumer (as_desc: 1 x 64, M-major)
        sa_bufs = gl.allocate_shared_memory(gl.float32, [STAGES * W] + as_desc.block_type.shape, as_desc.layout)
    if CTAS == 1:
        sc_bufs = gl.allocate_shared_memory(gl.float32, [W, SC_ROWS, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [W, 1], mbarrier.MBarrierLayout())  # ORDERED: consumer i's turn
        pair = empty  # a stand-in: no cluster
    else:  # a cluster: one barrier a CTA
        gl.static_assert(not SMEM_SCALES and not OVERLAP and not ORDERED, "a cluster: no SMEM_SCALES, OVERLAP, ORDERED")
        sc_bufs = c_bufs  # a stand-in: unused without SMEM_SCALES
        ready = cluster_barriers(batch=STAGES)
        empty = cluster_barriers(batch=STAGES)
        pair = cluster_barriers(batch=STAGES, two_ctas=True)  # CTA 0's: both CTAs' consumers
        turn = cluster_barriers(batch=W)
    if not RING_SCALES:
        sa_bufs = sc_bufs  # a stand-in: unused
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=W)  # each consumer releases the slot (_release)
        if CTAS > 1:  # W arrivals a CTA (Gluon counts a pair's barrier per CTA: 2 x W in all)
            mbarrier.init(pair.index(i), count=W)
    for i in gl.static_range(W):
        mbarrier.init(turn.index(i), count=1)
    fence_async_shared()
    # The loader is the default partition (its warpgroup: the kernel's num_warps 4; one thread
    # issues the copies) and gives up its registers; the consumers are the workers, each with
    # CONSUMER_REGS: a consumer in the default partition would keep the kernel's entry cap
    # (65536 / 384 threads: 168) and spill its accumulator, partial and scales.
    # (the argument tuples are written out: constexprs joined into a tuple lose their constexpr-ness)
    if W == 1:
        sc0 = _scale_smem(sc_bufs, sa_bufs, 0, RING_SCALES)
        gl.warp_specialize([
            (_loader, (a_desc, b_desc, b2_desc, as_desc, a_bufs, b_bufs, b2_bufs, sa_bufs, ready, empty, pair, M, N,
                       K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, TWO_PARTS, RING_SCALES)),
            (_consumer, (c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pair, turn, sc0,
                         c_bufs.index(0), c2_bufs.index(0), a_scale_ptr, b_scale_ptr,
                         M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
                         BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, TWO_PARTS, 0, OVERLAP, ORDERED, PIPE, SMEM_SCALES)),
        ], [4], [REGS_1])
    elif W == 2:
        sc0 = _scale_smem(sc_bufs, sa_bufs, 0, RING_SCALES)
        sc1 = _scale_smem(sc_bufs, sa_bufs, 1, RING_SCALES)
        gl.warp_specialize([
            (_loader, (a_desc, b_desc, b2_desc, as_desc, a_bufs, b_bufs, b2_bufs, sa_bufs, ready, empty, pair, M, N,
                       K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, TWO_PARTS, RING_SCALES)),
            (_consumer, (c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pair, turn, sc0,
                         c_bufs.index(0), c2_bufs.index(0), a_scale_ptr, b_scale_ptr,
                         M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
                         BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, TWO_PARTS, 0, OVERLAP, ORDERED, PIPE, SMEM_SCALES)),
            (_consumer, (c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pair, turn, sc1,
                         c_bufs.index(1), c2_bufs.index(1), a_scale_ptr, b_scale_ptr,
                         M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
                         BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, TWO_PARTS, 1, OVERLAP, ORDERED, PIPE, SMEM_SCALES)),
        ], [4, 4], [REGS_2, REGS_2])
    else:
        gl.static_assert(W == 3, "one, two or three consumer warpgroups (BLOCK_M 64, 128, 192)")
        sc0 = _scale_smem(sc_bufs, sa_bufs, 0, RING_SCALES)
        sc1 = _scale_smem(sc_bufs, sa_bufs, 1, RING_SCALES)
        sc2 = _scale_smem(sc_bufs, sa_bufs, 2, RING_SCALES)
        gl.warp_specialize([
            (_loader, (a_desc, b_desc, b2_desc, as_desc, a_bufs, b_bufs, b2_bufs, sa_bufs, ready, empty, pair, M, N,
                       K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, TWO_PARTS, RING_SCALES)),
            (_consumer, (c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pair, turn, sc0,
                         c_bufs.index(0), c2_bufs.index(0), a_scale_ptr, b_scale_ptr,
                         M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
                         BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, TWO_PARTS, 0, OVERLAP, ORDERED, PIPE, SMEM_SCALES)),
            (_consumer, (c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pair, turn, sc1,
                         c_bufs.index(1), c2_bufs.index(1), a_scale_ptr, b_scale_ptr,
                         M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
                         BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, TWO_PARTS, 1, OVERLAP, ORDERED, PIPE, SMEM_SCALES)),
            (_consumer, (c_desc, c2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pair, turn, sc2,
                         c_bufs.index(2), c2_bufs.index(2), a_scale_ptr, b_scale_ptr,
                         M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk,
                         BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, TWO_PARTS, 2, OVERLAP, ORDERED, PIPE, SMEM_SCALES)),
        ], [4, 4, 4], [REGS_3, REGS_3, REGS_3])
