"""The stream-K plan of the persistent matmul (triton_kernel.py, STREAM_K = 1), on the host: which
tiles are shared out, into how many K pieces, which program takes which piece. The rules, the
seeds, the tests and the GPU probes (which load this file by its path: it is standard library
only) read the kernel's plan from here."""

MAX_PIECES = 4  # the kernel's reduction keeps one load of each piece in flight (_reduce_pieces)


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
