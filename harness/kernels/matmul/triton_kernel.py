"""The Triton matmul for GPUs, and the small support kernels the GPU agent runs.

``matmul_kernel``: C = A @ B, fp16/bf16 (or fp32) inputs, fp32 accumulation, C in the dtype of
``c_ptr``. Layouts (NN, NT, TN, TT) come in through the strides: when a stride equals 1 the
compiler gets it as a constant (as the JIT does) and loads along that axis vectorize.

* GROUP_M: program ids are swizzled so that GROUP_M rows of tiles share B columns in L2.
* SPLIT_K: the grid's second axis splits K into SPLIT_K contiguous ranges of whole BLOCK_K steps
  (any SPLIT_K, any K). The reduction is deterministic and needs no float atomics: each split
  stores its fp32 partial tile into its own slice of ``ws_ptr`` (an fp32 SPLIT_K x M x N
  workspace) and bumps the tile's counter in ``lock_ptr``; the split that arrives last sums the
  SPLIT_K partials in split order (0, 1, ...), so the result is bit-identical whatever order the
  splits finished in, stores C and resets the counter. The counters are therefore zero again
  after every launch: allocate them zeroed once; the workspace needs no initial value. With
  SPLIT_K == 1 neither is touched.
* EVEN_K: K is a multiple of BLOCK_K, so the K loop needs no masks (the last split may have fewer
  steps than the others; that needs no mask). Otherwise the last K step is masked; M and N never
  need load masks (rows and columns past the edge wrap onto valid memory, their results are not
  stored).
* Offsets that scale with a whole row or matrix are 64-bit, so any M, N, K up to 65536 addresses
  correctly.
* TMA (config parameter, default 0; NVIDIA sm90+): A and B tiles are loaded through tensor
  descriptors (the bulk tensor copy engine, which pads out-of-bounds rows and K with zeros, so no
  masks). They are arguments, made on the host (``a_desc``, ``b_desc``, ``b2_desc``, ``c_desc``;
  which ones a config takes and their blocks: descriptors.py; the others are None). A_T / B_T
  (set by the compiler from the specialization when A's M stride / B's K stride is the constant
  1) say the descriptor's orientation, since a descriptor's last stride must be 1. Same grid, same
  split-K.
* SWAP_AB (config parameter, default 0): computes the tile of C transposed, C^T = B^T A^T, so a
  skinny product's wide N side feeds the M side of the MMA instruction (on sm90 a warpgroup MMA
  is at least 64 rows tall; BLOCK_M = 16 rows of A become its narrow N side) and the tile is
  stored transposed. Pointers or TMA, with or without split-K.
* PERSISTENT (config parameter, default 0; NVIDIA sm90+, with TMA = 1 and SPLIT_K = 1): the grid
  is one program per multiprocessor (``multiprocessors`` of the target), each walks the tiles
  in GROUP_M order; the tile loop and the K loop are flattened into one software pipeline so
  the next tile's loads overlap this tile's epilogue, and C is stored through a descriptor in
  two halves.
* STREAM_K (config parameter, 0/1, default 0; with PERSISTENT = 1): hybrid data-parallel +
  stream-K, so that a last partial wave of tiles does not leave multiprocessors idle. With P
  programs, T tiles and KT = cdiv(K, BLOCK_K) steps per tile, the last ``T % P`` tiles (all of
  them when there are fewer) are the stream-K tiles; the others run as above, the same number on
  every program. Each stream-K tile is cut into S = min(P // (T % P), 4, KT) contiguous K
  pieces; program p takes piece p % S of stream-K tile p // S (programs past (T % P) x S idle;
  harness/kernels/matmul/stream_k.py computes the same plan on the host). With S = 1 a program
  stores its tile; otherwise its fp32 partial goes to its own slot p of ``ws_ptr`` (P x BLOCK_M
  x BLOCK_N fp32) and bumps the tile's counter in ``lock_ptr`` (one per stream-K tile: fewer
  than P); the piece that arrives last sums the tile's S slots in piece order, all S loads of a
  chunk in flight at once, stores C and resets the counter. Deterministic, no float atomics, no
  waiting, counters zero after every launch, as for split-K.
* BLOCK_N = 3, 5 or 9 x 2^k (144, 160, 192, 288, 320; with TMA = 1, one tile a program, no split-K
  or swap): Triton's tensors are powers of two, so the tile is two MMAs on the same A tile, WIDE =
  BLOCK_N - NARROW and NARROW = the lowest set bit of BLOCK_N wide (192 = 128 + 64, 160 = 128 +
  32, 320 = 256 + 64, 288 = 256 + 32, 144 = 128 + 16), each with its own B descriptor and
  accumulator; C leaves in NARROW-wide pieces. Such tiles fill the last wave where 128 and 256
  cannot (cuBLAS runs 144- to 320-wide tiles on such shapes).
* BLOCK_M = 3 x 2^k (192; the same path): the tile's rows are two parts too, TOP = 2 x LOW and
  LOW rows (128 + 64), each with its own A descriptor (a_desc, a2_desc) and accumulators, both
  MMAs on the same B tile (four MMAs where BLOCK_N is split as well); C leaves in pieces LOW rows
  tall. 192 x 256 tiles fill one wave where 128 x 256 and 128 x 320 take two (1536x4096).
* On AMD, waves_per_eu, matrix_instr_nonkdim and kpack are compile options, not arguments.

The support kernels (``fill_kernel``, ``error_kernel``) generate test data on the device from
a seed and reduce the error figures of a result against its reference, so a GPU bundle ships
no data and the agent needs neither numpy nor torch.
"""

import triton
import triton.language as tl

# The tensor descriptor arguments (TMA), made on the host: which ones a config takes, descriptors.py.
MATMUL_DESCRIPTOR_ARGS = ("a_desc", "a2_desc", "b_desc", "b2_desc", "c_desc")
# The run-time arguments of matmul_kernel, in order (the compiler and the agent agree on them).
MATMUL_ARGS = ("a_ptr", "b_ptr", "c_ptr", "ws_ptr", "lock_ptr", "M", "N", "K",
               "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn") + MATMUL_DESCRIPTOR_ARGS
# The constexpr arguments a config provides (everything else in a config is a compile option).
MATMUL_CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K")
# Constexprs a config may leave out, with their defaults (the compiler passes them always).
MATMUL_OPTIONAL_CONSTEXPRS = {"TMA": 0, "SWAP_AB": 0, "PERSISTENT": 0, "STREAM_K": 0}


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, ws_ptr, lock_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  a_desc, a2_desc, b_desc, b2_desc, c_desc,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr,
                  IEEE: tl.constexpr, TMA: tl.constexpr, SWAP_AB: tl.constexpr, PERSISTENT: tl.constexpr,
                  A_T: tl.constexpr, B_T: tl.constexpr, STREAM_K: tl.constexpr = 0):
    if (BLOCK_N & (BLOCK_N - 1)) or (BLOCK_M & (BLOCK_M - 1)):  # not powers of two: an MMA per part
        _wide_tile(a_desc, a2_desc, b_desc, b2_desc, c_desc, c_ptr, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, A_T, B_T)
    elif PERSISTENT:
        _persistent_tma(a_desc, b_desc, c_desc, c_ptr, ws_ptr, lock_ptr, M, N, K, stride_cm,
                        BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STREAM_K, A_T, B_T)
    else:
        _one_tile(a_ptr, b_ptr, c_ptr, ws_ptr, lock_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, a_desc, b_desc,
                  BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SPLIT_K, EVEN_K, IEEE, TMA, SWAP_AB, A_T, B_T)


@triton.jit
def _tile_of(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """GROUP_M swizzle: consecutive tiles walk down GROUP_M rows of tiles, then move right."""
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    first_m = (tile // width) * GROUP_M
    group_size = min(grid_m - first_m, GROUP_M)
    return first_m + (tile % group_size), (tile % width) // group_size


@triton.jit
def _one_tile(a_ptr, b_ptr, c_ptr, ws_ptr, lock_ptr, M, N, K,
              stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, a_desc, b_desc,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr,
              TMA: tl.constexpr, SWAP_AB: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m, pid_n = _tile_of(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # this split's K steps: contiguous, the last split may have fewer (or none)
    k_steps = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_steps, SPLIT_K)
    first = pid_k * per_split
    steps = max(0, min(k_steps - first, per_split))
    if TMA:
        acc = _tma_mainloop(a_desc, b_desc, pid_m, pid_n, first, steps, BLOCK_M, BLOCK_N, BLOCK_K, SWAP_AB,
                            A_T, B_T)
    else:
        acc = _pointer_mainloop(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                                offs_m, offs_n, first, steps, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, IEEE, SWAP_AB)

    # with SWAP_AB the accumulator holds the tile of C transposed (BLOCK_N x BLOCK_M)
    if SWAP_AB:
        rows = offs_n[:, None]
        cols = offs_m[None, :]
        mask = (rows < N) & (cols < M)
        c_ptrs = c_ptr + rows * stride_cn + cols.to(tl.int64) * stride_cm
        ws_ptrs = ws_ptr + cols.to(tl.int64) * N + rows
    else:
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
        ws_ptrs = ws_ptr + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    _store_or_split(acc, c_ptrs, ws_ptrs, mask, c_ptr, ws_ptr, lock_ptr, M, N, stride_cm, stride_cn, pid, pid_k,
                    pid_m, pid_n, BLOCK_M, BLOCK_N, SPLIT_K)


@triton.jit
def _store_or_split(acc, c_ptrs, ws_ptrs, mask, c_ptr, ws_ptr, lock_ptr, M, N, stride_cm, stride_cn, pid, pid_k,
                    pid_m, pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr):
    """A tile's epilogue: ``acc`` into C (``c_ptrs``) in C's type, or with SPLIT_K > 1 this split's
    fp32 partial into its own slice of the workspace (``ws_ptrs``); the split that arrives last
    sums them (``_reduce_splits``) and resets the tile's counter for the next launch."""
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(ws_ptrs + pid_k.to(tl.int64) * M * N, acc, mask=mask)
        tl.debug_barrier()  # every thread's partial is written before the counter is bumped
        arrived = tl.atomic_add(lock_ptr + pid, 1, sem="acq_rel")
        if arrived == SPLIT_K - 1:
            _reduce_splits(ws_ptr, c_ptr, M, N, stride_cm, stride_cn, pid_m, pid_n, BLOCK_M, BLOCK_N, SPLIT_K)
            tl.atomic_xchg(lock_ptr + pid, 0)


@triton.jit
def _reduce_splits(ws_ptr, c_ptr, M, N, stride_cm, stride_cn, pid_m, pid_n, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr):
    """C tile = the SPLIT_K partials summed in split order (deterministic), 2048 elements at a time:
    the split loop is unrolled, so the loads of all partials are in flight together."""
    ROWS: tl.constexpr = min(BLOCK_M, 2048 // BLOCK_N)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    for r in tl.static_range(0, BLOCK_M, ROWS):
        offs_m = pid_m * BLOCK_M + r + tl.arange(0, ROWS)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        ws_ptrs = ws_ptr + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
        total = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
        for s in tl.static_range(SPLIT_K):
            # .cg: read at L2, where the other programs' partials are (never a stale L1 line)
            total += tl.load(ws_ptrs + s * tl.cast(M, tl.int64) * N, mask=mask, other=0.0, cache_modifier=".cg")
        c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _pointer_mainloop(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      offs_m, offs_n, first, steps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr, SWAP_AB: tl.constexpr):
    # wrap rows and columns past the edge onto valid memory: loads need no mask on M and N
    rm = tl.max_contiguous(tl.multiple_of(offs_m % M, BLOCK_M), BLOCK_M).to(tl.int64)
    rn = tl.max_contiguous(tl.multiple_of(offs_n % N, BLOCK_N), BLOCK_N).to(tl.int64)
    rk = first * BLOCK_K + tl.arange(0, BLOCK_K)
    if SWAP_AB:  # C^T = B^T A^T: the wide N side of a skinny product feeds the MMA's M side
        a_ptrs = a_ptr + rk[:, None].to(tl.int64) * stride_ak + rm[None, :] * stride_am
        b_ptrs = b_ptr + rn[:, None] * stride_bn + rk[None, :].to(tl.int64) * stride_bk
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :].to(tl.int64) * stride_ak
        b_ptrs = b_ptr + rk[:, None].to(tl.int64) * stride_bk + rn[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, steps):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_K  # rk is where this split starts
            if SWAP_AB:
                a = tl.load(a_ptrs, mask=rk[:, None] < k_left, other=0.0)
                b = tl.load(b_ptrs, mask=rk[None, :] < k_left, other=0.0)
            else:
                a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
                b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        if SWAP_AB:
            acc = _dot(b, a, acc, IEEE)
        else:
            acc = _dot(a, b, acc, IEEE)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def _dot(x, y, acc, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(x, y, acc, input_precision="ieee")
    else:
        return tl.dot(x, y, acc)


@triton.jit
def _load_tiles(a_desc, b_desc, off_m, off_n, off_k, A_T: tl.constexpr, B_T: tl.constexpr):
    """The A tile (BLOCK_M x BLOCK_K) and the B tile (BLOCK_K x BLOCK_N) at (off_m, off_n, off_k)."""
    return _load_a(a_desc, off_m, off_k, A_T), _load_b(b_desc, off_n, off_k, B_T)


@triton.jit
def _load_a(a_desc, off_m, off_k, A_T: tl.constexpr):
    if A_T:
        return tl.trans(a_desc.load([off_k, off_m]))
    else:
        return a_desc.load([off_m, off_k])


@triton.jit
def _load_b(b_desc, off_n, off_k, B_T: tl.constexpr):
    if B_T:
        return tl.trans(b_desc.load([off_n, off_k]))
    else:
        return b_desc.load([off_k, off_n])


@triton.jit
def _tma_mainloop(a_desc, b_desc, pid_m, pid_n, first, steps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, SWAP_AB: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr):
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    if SWAP_AB:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, steps):  # the descriptors fill K (and M, N) past the edge with zeros
        a, b = _load_tiles(a_desc, b_desc, off_m, off_n, (first + k) * BLOCK_K, A_T, B_T)
        if SWAP_AB:
            acc = tl.dot(tl.trans(b), tl.trans(a), acc)
        else:
            acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _wide_tile(a_desc, a2_desc, b_desc, b2_desc, c_desc, c_ptr, M, N, K, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, A_T: tl.constexpr,
               B_T: tl.constexpr):
    """One tile with BLOCK_N = 3, 5 or 9 x 2^k, or BLOCK_M = 3 x 2^k (a tall tile), through tensor
    descriptors. Triton's tensors are powers of two, so the tile is made of parts: along N a part
    WIDE and one NARROW wide (the lowest set bit of BLOCK_N), each with its own B descriptor
    (b_desc, b2_desc) and accumulator, and along M a TOP part of 2 x LOW rows and a LOW one (a_desc,
    a2_desc). Every part's MMA shares its A or B tile with the others. C leaves in pieces LOW rows
    tall and NARROW wide."""
    LOW: tl.constexpr = BLOCK_M & -BLOCK_M
    NARROW: tl.constexpr = BLOCK_N & -BLOCK_N
    TALL: tl.constexpr = LOW != BLOCK_M
    SPLIT_N: tl.constexpr = NARROW != BLOCK_N
    TOP: tl.constexpr = BLOCK_M - LOW if TALL else BLOCK_M
    WIDE: tl.constexpr = BLOCK_N - NARROW if SPLIT_N else BLOCK_N
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    top_w = tl.zeros((TOP, WIDE), dtype=tl.float32)
    if SPLIT_N:
        top_n = tl.zeros((TOP, NARROW), dtype=tl.float32)
    if TALL:
        low_w = tl.zeros((LOW, WIDE), dtype=tl.float32)
        if SPLIT_N:
            low_n = tl.zeros((LOW, NARROW), dtype=tl.float32)
    for k in range(tl.cdiv(K, BLOCK_K)):  # the descriptors fill K (and M, N) past the edge with zeros
        a, b = _load_tiles(a_desc, b_desc, off_m, off_n, k * BLOCK_K, A_T, B_T)
        top_w = tl.dot(a, b, top_w)
        if TALL:
            a2 = _load_a(a2_desc, off_m + TOP, k * BLOCK_K, A_T)
            low_w = tl.dot(a2, b, low_w)
        if SPLIT_N:
            b2 = _load_b(b2_desc, off_n + WIDE, k * BLOCK_K, B_T)
            top_n = tl.dot(a, b2, top_n)
            if TALL:
                low_n = tl.dot(a2, b2, low_n)
    if TALL:
        upper, lower = _row_halves(top_w, TOP, WIDE)
        _store_part(c_desc, c_ptr, upper, off_m, off_n, LOW, WIDE, NARROW)
        _store_part(c_desc, c_ptr, lower, off_m + LOW, off_n, LOW, WIDE, NARROW)
        _store_part(c_desc, c_ptr, low_w, off_m + TOP, off_n, LOW, WIDE, NARROW)
        if SPLIT_N:
            upper, lower = _row_halves(top_n, TOP, NARROW)
            c_desc.store([off_m, off_n + WIDE], upper.to(c_ptr.dtype.element_ty))
            c_desc.store([off_m + LOW, off_n + WIDE], lower.to(c_ptr.dtype.element_ty))
            c_desc.store([off_m + TOP, off_n + WIDE], low_n.to(c_ptr.dtype.element_ty))
    else:
        _store_part(c_desc, c_ptr, top_w, off_m, off_n, BLOCK_M, WIDE, NARROW)
        c_desc.store([off_m, off_n + WIDE], top_n.to(c_ptr.dtype.element_ty))


@triton.jit
def _store_part(c_desc, c_ptr, acc, off_m, off_n, ROWS: tl.constexpr, WIDTH: tl.constexpr, PIECE: tl.constexpr):
    """A ROWS x WIDTH part of C in PIECE-wide pieces (WIDTH = PIECE x 1, 2, 4 or 8; a power-of-two
    tile's part in halves)."""
    if WIDTH == PIECE:
        c_desc.store([off_m, off_n], acc.to(c_ptr.dtype.element_ty))
    elif WIDTH == 2 * PIECE:
        _store_halves(c_desc, c_ptr, acc, off_m, off_n, ROWS, WIDTH)
    elif WIDTH == 4 * PIECE:
        _store_quarters(c_desc, c_ptr, acc, off_m, off_n, ROWS, WIDTH)
    else:  # eight pieces
        left, right = _halves(acc, ROWS, WIDTH)
        _store_quarters(c_desc, c_ptr, left, off_m, off_n, ROWS, WIDTH // 2)
        _store_quarters(c_desc, c_ptr, right, off_m, off_n + WIDTH // 2, ROWS, WIDTH // 2)


@triton.jit
def _store_quarters(c_desc, c_ptr, acc, off_m, off_n, BLOCK_M: tl.constexpr, WIDTH: tl.constexpr):
    left, right = _halves(acc, BLOCK_M, WIDTH)
    _store_halves(c_desc, c_ptr, left, off_m, off_n, BLOCK_M, WIDTH // 2)
    _store_halves(c_desc, c_ptr, right, off_m, off_n + WIDTH // 2, BLOCK_M, WIDTH // 2)


@triton.jit
def _persistent_tma(a_desc, b_desc, c_desc, c_ptr, ws_ptr, lock_ptr, M, N, K, stride_cm, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, STREAM_K: tl.constexpr,
                    A_T: tl.constexpr, B_T: tl.constexpr):
    """A fixed grid (one program per multiprocessor) walks the tiles; the tile loop and the K loop
    are flattened into one software pipeline, so the next tile's loads overlap this tile's
    epilogue. C leaves through its descriptor too, in two halves (smaller staging buffer). With
    STREAM_K the last tiles are shared out by K steps instead (_stream_k)."""
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    programs = tl.num_programs(0)
    data_parallel = tiles
    if STREAM_K:
        data_parallel = tiles - tiles % programs
    for tile in tl.range(tl.program_id(0), data_parallel, programs, flatten=True):
        pid_m, pid_n = _tile_of(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(k_tiles):
            a, b = _load_tiles(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, k * BLOCK_K, A_T, B_T)
            acc = tl.dot(a, b, acc)
        _store_halves(c_desc, c_ptr, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_M, BLOCK_N)
    if STREAM_K:
        _stream_k(a_desc, b_desc, c_desc, c_ptr, ws_ptr, lock_ptr, M, N, stride_cm, data_parallel,
                  tiles - data_parallel, k_tiles, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, A_T, B_T)


@triton.jit
def _halves(acc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    return tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))


@triton.jit
def _row_halves(acc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    return tl.split(tl.permute(tl.reshape(acc, (2, BLOCK_M // 2, BLOCK_N)), (1, 2, 0)))


@triton.jit
def _store_halves(c_desc, c_ptr, acc, off_m, off_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    left, right = _halves(acc, BLOCK_M, BLOCK_N)
    c_desc.store([off_m, off_n], left.to(c_ptr.dtype.element_ty))
    c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_ptr.dtype.element_ty))


@triton.jit
def _pieces_per_tile(sk_tiles, programs, k_tiles):
    """How many contiguous K pieces each stream-K tile is cut into: as many as the programs allow
    (one piece per program), at most 4 (the reduction's loads in flight, _reduce_pieces) and at
    most one per K step. harness/kernels/matmul/stream_k.py's pieces_per_tile computes the same."""
    return max(1, min(min(programs // max(sk_tiles, 1), 4), k_tiles))


@triton.jit
def _stream_k(a_desc, b_desc, c_desc, c_ptr, ws_ptr, lock_ptr, M, N, stride_cm, first_tile, sk_tiles, k_tiles,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
              A_T: tl.constexpr, B_T: tl.constexpr):
    """Program p takes piece p % S of stream-K tile p // S (S pieces per tile, programs past
    sk_tiles x S idle): K steps [piece x KT / S, (piece + 1) x KT / S). With S = 1 it stores the
    tile; otherwise its fp32 partial goes to its own workspace slot p, and the piece that arrives
    last at the tile's counter sums the tile's S slots in piece order (_reduce_pieces)."""
    pid = tl.program_id(0)
    pieces = _pieces_per_tile(sk_tiles, tl.num_programs(0), k_tiles)
    if pid < sk_tiles * pieces:
        t = pid // pieces
        piece = pid % pieces
        pid_m, pid_n = _tile_of(first_tile + t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(piece * k_tiles // pieces, (piece + 1) * k_tiles // pieces):
            a, b = _load_tiles(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, k * BLOCK_K, A_T, B_T)
            acc = tl.dot(a, b, acc)
        if pieces == 1:
            _store_halves(c_desc, c_ptr, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_M, BLOCK_N)
        else:
            local = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            tl.store(ws_ptr + pid.to(tl.int64) * (BLOCK_M * BLOCK_N) + local, acc)
            tl.debug_barrier()  # every thread's partial is written before the counter is bumped
            arrived = tl.atomic_add(lock_ptr + t, 1, sem="acq_rel")
            if arrived == pieces - 1:
                _reduce_pieces(ws_ptr, c_ptr, M, N, stride_cm, pid_m, pid_n, t * pieces, pieces, BLOCK_M, BLOCK_N)
                tl.atomic_xchg(lock_ptr + t, 0)


@triton.jit
def _reduce_pieces(ws_ptr, c_ptr, M, N, stride_cm, pid_m, pid_n, first_slot, pieces, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    """C tile = slots first_slot .. first_slot + pieces - 1 summed in piece order (deterministic),
    4096 elements of each at a time: the four loads of a chunk are issued before any sum
    (the ones past ``pieces`` masked off, adding 0.0), so the reduction streams from L2 instead of
    waiting on one load after another."""
    ROWS: tl.constexpr = min(BLOCK_M, 4096 // BLOCK_N)
    tile_elems: tl.constexpr = BLOCK_M * BLOCK_N
    slots = ws_ptr + first_slot.to(tl.int64) * tile_elems
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    for r in tl.static_range(0, BLOCK_M, ROWS):
        local = (r + tl.arange(0, ROWS))[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        # .cg: read at L2, where the other programs' partials are (never a stale L1 line)
        x0 = tl.load(slots + local, cache_modifier=".cg")
        x1 = tl.load(slots + tile_elems + local, mask=local < tl.where(pieces > 1, tile_elems, 0), other=0.0,
                     cache_modifier=".cg")
        x2 = tl.load(slots + 2 * tile_elems + local, mask=local < tl.where(pieces > 2, tile_elems, 0), other=0.0,
                     cache_modifier=".cg")
        x3 = tl.load(slots + 3 * tile_elems + local, mask=local < tl.where(pieces > 3, tile_elems, 0), other=0.0,
                     cache_modifier=".cg")
        total = ((x0 + x1) + x2) + x3
        offs_m = pid_m * BLOCK_M + r + tl.arange(0, ROWS)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
        tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fill_kernel(out_ptr, n, seed, BLOCK: tl.constexpr):
    """out[i] = uniform(-1, 1) from Philox(seed, i), stored in out's dtype."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    r = tl.rand(seed, offs.to(tl.int32))
    tl.store(out_ptr + offs, (2.0 * r - 1.0).to(out_ptr.dtype.element_ty), mask=offs < n)


@triton.jit
def error_kernel(c_ptr, ref_ptr, out_ptr, n, rtol, atol, BLOCK: tl.constexpr):
    """Per program: sum (c - ref)^2, sum ref^2, max |c - ref| and the count of elements outside
    atol + rtol * |ref| (NaN counts as outside) -> out[pid * 4 + 0..3], all fp32."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inb = offs < n
    c = tl.load(c_ptr + offs, mask=inb, other=0.0).to(tl.float32)
    ref = tl.load(ref_ptr + offs, mask=inb, other=0.0).to(tl.float32)
    diff = tl.abs(c - ref)
    ok = diff <= atol + rtol * tl.abs(ref)  # False for NaN
    bad = tl.where(inb & (ok == 0), 1.0, 0.0)
    finite_diff = tl.where(diff == diff, diff, float("inf"))
    tl.store(out_ptr + pid * 4 + 0, tl.sum(diff * diff, axis=0))
    tl.store(out_ptr + pid * 4 + 1, tl.sum(ref * ref, axis=0))
    tl.store(out_ptr + pid * 4 + 2, tl.max(finite_diff, axis=0))
    tl.store(out_ptr + pid * 4 + 3, tl.sum(bad, axis=0))
