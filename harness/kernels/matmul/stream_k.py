"""The stream-K plans of the persistent matmul (triton_kernel.py), on the host: which tiles are
shared out and which program takes which K steps of them. STREAM_K = 1 cuts each tile of the last
partial wave into whole pieces (_stream_k); STREAM_K = 2 shares out the last whole wave and the
partial one, every program an even share of their K steps (_stream_k_even). The rules, the
seeds, the tests and bench/streamk_probe.py (which loads this file by its path: standard library
only) read the kernel's plan from here."""

MAX_PIECES = 4  # the kernel's reduction keeps one load of each piece in flight (_reduce_slots)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def stream_k_tiles(tiles: int, programs: int) -> int:
    """How many of the last tiles the stream-K phase shares out: the partial wave (all tiles when
    there are fewer than programs; none when the waves are whole)."""
    return tiles % programs


def pieces_per_tile(tiles: int, programs: int, k_tiles: int) -> int:
    """Contiguous K pieces per stream-K tile: one per program as far as the programs go, at most
    MAX_PIECES and at most one per K step. 1 (also when there are no stream-K tiles) means no tile
    is shared: STREAM_K = 0's work."""
    left = stream_k_tiles(tiles, programs)
    return max(1, min(programs // left, MAX_PIECES, k_tiles)) if left else 1


def stream_k_pieces(tiles: int, programs: int, k_tiles: int) -> list:
    """(program, stream-K tile, first K step, end K step) of every piece: program p takes piece
    p % S of stream-K tile p // S; the programs past the last piece take none."""
    pieces = pieces_per_tile(tiles, programs, k_tiles)
    return [(p, p // pieces, (p % pieces) * k_tiles // pieces, (p % pieces + 1) * k_tiles // pieces)
            for p in range(stream_k_tiles(tiles, programs) * pieces)]


def steps_saved(tiles: int, programs: int, k_tiles: int) -> int:
    """K steps of the last wave each busy program is spared against STREAM_K = 0 (a whole tile's
    K steps against its longest piece): what must pay for the partials and their reduction."""
    return k_tiles - cdiv(k_tiles, pieces_per_tile(tiles, programs, k_tiles))


def even_stream_k_tiles(tiles: int, programs: int) -> int:
    """STREAM_K = 2: the tiles shared out, the partial wave and the whole wave before it (all
    tiles when there are fewer than programs; none when the waves are whole)."""
    left = tiles % programs
    return 0 if not left else left + (programs if tiles > programs else 0)


def even_shares(tiles: int, programs: int, k_tiles: int) -> list:
    """(program, stream-K tile, first K step, end K step) of every piece of STREAM_K = 2: program p
    takes steps [p x S / P, (p + 1) x S / P) of the S = stream-K tiles x k_tiles steps, P = the
    programs (at most S; the others idle), in tile order."""
    total = even_stream_k_tiles(tiles, programs) * k_tiles
    active = min(programs, total)
    out = []
    for p in range(active):
        start, end = p * total // active, (p + 1) * total // active
        for t in range(start // k_tiles, (end - 1) // k_tiles + 1):
            out.append((p, t, max(start, t * k_tiles) - t * k_tiles, min(end, (t + 1) * k_tiles) - t * k_tiles))
    return out


def even_most_pieces(tiles: int, programs: int, k_tiles: int) -> int:
    """The most programs that share one stream-K tile under STREAM_K = 2 (1: none is shared)."""
    pieces = {}
    for _, t, _, _ in even_shares(tiles, programs, k_tiles):
        pieces[t] = pieces.get(t, 0) + 1
    return max(pieces.values(), default=1)


def longest_share(tiles: int, programs: int, k_tiles: int, stream_k: int) -> int:
    """The K steps of the busiest program under STREAM_K = 0, 1 or 2 (the time of the launch, in
    steps, before the cost of partials and their reduction)."""
    if stream_k == 2 and even_stream_k_tiles(tiles, programs):
        shared = even_stream_k_tiles(tiles, programs)
        return (tiles - shared) // programs * k_tiles + cdiv(shared * k_tiles, programs)
    whole_waves = tiles // programs * k_tiles
    if stream_k == 1 and tiles % programs:
        return whole_waves + cdiv(k_tiles, pieces_per_tile(tiles, programs, k_tiles))
    return cdiv(tiles, programs) * k_tiles
