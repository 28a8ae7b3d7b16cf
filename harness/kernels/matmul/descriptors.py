"""The tensor descriptors a TMA config of the matmul takes as arguments, made on the host.

A descriptor made inside the kernel (``tl.make_tensor_descriptor``) is written to global memory
and fenced by every program before its first load, a cost paid per program that measured about
6.5 % of a one-tile-a-program kernel's time on an H200 (docs/notes/2026-11-26-gpu-runs.md,
"Tensor descriptors made on the host"). So the compiler
declares these arguments as Triton ``tensordesc`` parameters, the GPU agent encodes each one
with cuTensorMapEncodeTiled before the launch, and the tests' interpreter runs build them from
the same plan.

Standard library only: the compiler, the tests and the GPU probes read the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple


@dataclass(frozen=True)
class Descriptor:
    """One descriptor argument: a 2-D view of an operand's memory, outermost dimension first."""

    name: str                # the kernel argument (triton_kernel.MATMUL_DESCRIPTOR_ARGS), e.g. a_desc
    operand: str             # whose memory: the kernel argument ``<operand>_ptr``
    shape: Tuple[str, str]   # the run-time values that size the view, e.g. ("K", "M")
    strides: Tuple[str, str]  # the run-time strides of those dimensions (the last is 1)
    block: Tuple[int, int]   # the tile one load or store moves
    # how a cluster's CTAs share the block (Gluon's cga_layout bases; none without clusters):
    # ((1, 0),) splits its rows between two CTAs, ((0, 0),) gives each the whole block (multicast)
    cga: Tuple[Tuple[int, int], ...] = ()

    def as_dict(self) -> dict:
        out = {"name": self.name, "operand": self.operand, "shape": list(self.shape),
               "strides": list(self.strides), "block": list(self.block)}
        if self.cga:
            out["cga"] = [list(basis) for basis in self.cga]
        return out


def _a(name: str, rows: int, bk: int, a_t: bool) -> Descriptor:
    if a_t:  # A stored K x M: the descriptor's last stride must be 1
        return Descriptor(name, "a", ("K", "M"), ("stride_ak", "stride_am"), (bk, rows))
    return Descriptor(name, "a", ("M", "K"), ("stride_am", "stride_ak"), (rows, bk))


def _b(name: str, width: int, bk: int, b_t: bool) -> Descriptor:
    if b_t:  # B stored N x K
        return Descriptor(name, "b", ("N", "K"), ("stride_bn", "stride_bk"), (width, bk))
    return Descriptor(name, "b", ("K", "N"), ("stride_bk", "stride_bn"), (bk, width))


def _c(width: int, bm: int, name: str = "c_desc") -> Descriptor:
    return Descriptor(name, "c", ("M", "N"), ("stride_cm", "stride_cn"), (bm, width))


def wide_tile(config: dict) -> bool:
    """BLOCK_N (144, 160, 192, 288, 320) or BLOCK_M (192) is not a power of two: the kernel computes the
    tile in parts, an MMA each."""
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    return bn & (bn - 1) != 0 or bm & (bm - 1) != 0


WARP_SPECIALIZED_ROWS = 64  # the rows of a tile each consumer warpgroup of the Gluon kernel computes


def warp_specialized(config: dict) -> bool:
    """A tile in parts on the persistent grid: the warp-specialized Gluon kernel runs it
    (gluon_kernel.py; rule warp_specialized_tile keeps it to 192 x 192)."""
    return bool(config.get("PERSISTENT")) and wide_tile(config)


def tile_parts(block: int) -> Tuple[int, int]:
    """The sizes of a tile edge's two parts: (WIDE, NARROW), NARROW the lowest set bit of the edge
    (192 = 128 + 64, 160 = 128 + 32, 320 = 256 + 64, 288 = 256 + 32, 144 = 128 + 16); a power of two
    is one part, (block, block). The kernel has them for BLOCK_N 3, 5 or 9 times NARROW and BLOCK_M 3
    times (rule wide_tile_needs_tma)."""
    narrow = block & -block
    return (block - narrow, narrow) if narrow != block else (block, block)


def tensor_descriptors(config: dict, a_t: bool, b_t: bool) -> List[Descriptor]:
    """The descriptors ``config`` takes (none without TMA; the kernel's other descriptor arguments
    are None). a_t / b_t: A's M stride / B's K stride is 1 (the kernel's A_T / B_T).

    * every TMA tile: A's tile and B's tile;
    * a tile in parts (wide_tile): B in its two parts (b_desc, b2_desc) where BLOCK_N is not a power
      of two, A in its two (a_desc, a2_desc) where BLOCK_M is not, and C in pieces as tall and as
      wide as the narrow parts;
    * the persistent grid: C in halves (its epilogue stores the tile in two);
    * the warp-specialized kernel (a tile in parts on the persistent grid): A in blocks of 64 rows
      (a consumer warpgroup's), B and C (64 rows) in the two parts of BLOCK_N.
    """
    if not config.get("TMA"):
        return []
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    if warp_specialized(config):
        wide, narrow = tile_parts(bn)
        rows = WARP_SPECIALIZED_ROWS
        return [_a("a_desc", rows, bk, a_t), _b("b_desc", wide, bk, b_t), _b("b2_desc", narrow, bk, b_t),
                _c(wide, rows), _c(narrow, rows, "c2_desc")]
    if wide_tile(config):
        top, low = tile_parts(bm)
        wide, narrow = tile_parts(bn)
        out = [_a("a_desc", top, bk, a_t), _b("b_desc", wide, bk, b_t)]
        if low != bm:
            out.append(_a("a2_desc", low, bk, a_t))
        if narrow != bn:
            out.append(_b("b2_desc", narrow, bk, b_t))
        return out + [_c(narrow, low)]
    out = [_a("a_desc", bm, bk, a_t), _b("b_desc", bn, bk, b_t)]
    if config.get("PERSISTENT"):
        out.append(_c(bn // 2, bm))
    return out
