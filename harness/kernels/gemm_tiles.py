"""What the GEMM-like kernels (matmul, fp8_blockscale) share: the grid of output tiles (times the
splits of K), the pruning rules of tiles, split-K, GROUP_M, tensor
descriptors and the accumulator's registers, and the completion of seed configs against a
target's space. Each kernel's rules.py lists these rules in its own order, among its own."""

from __future__ import annotations

from typing import List

from ..space import Rule, first_pruning_rule

CUDA_MULTIPROCESSORS = 132  # an H100 / H200 SXM: the count of a target that names none
HIP_MULTIPROCESSORS = 304  # an MI300X


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def multiprocessors(target, hip_default: int = HIP_MULTIPROCESSORS) -> int:
    """The target's multiprocessor count; where it names none, an H100's on NVIDIA and
    ``hip_default`` on AMD."""
    count = getattr(target, "multiprocessors", None)
    if count:
        return count
    return hip_default if getattr(target, "backend", "") == "hip" else CUDA_MULTIPROCESSORS


# shared memory a block may opt in to, by NVIDIA arch (the CUDA programming guide's table)
CUDA_SHARED_MEMORY = {"80": 166912, "86": 101376, "87": 166912, "89": 101376, "90": 232448, "100": 232448,
                      "120": 101376}


def shared_memory(target):
    """Bytes of shared memory a block may use: the target's ``shared_mem_max``, else its NVIDIA
    arch's (None where neither is known)."""
    limit = getattr(target, "shared_mem_max", None)
    if limit:
        return limit
    if getattr(target, "backend", "") == "cuda":
        return CUDA_SHARED_MEMORY.get(str(getattr(target, "gpu_arch", "")))
    return None


def tiles(config: dict, shape) -> int:
    """Output tiles of the M x N grid."""
    return cdiv(shape.M, config["BLOCK_M"]) * cdiv(shape.N, config["BLOCK_N"])


def grid(config: dict, shape, target=None) -> tuple:
    """One program per output tile and split of K."""
    return (tiles(config, shape), config.get("SPLIT_K", 1), 1)


def flops(shape) -> int:
    return 2 * shape.M * shape.N * shape.K


# ---- pruning rules -------------------------------------------------------------------------------
def _exceeds(dim: str, floor: int):
    return lambda c, s, t: c["BLOCK_" + dim] > max(floor, pow2_at_least(getattr(s, dim)))


def tile_rules(m_floor: int, n_floor: int, k_floor: int = 0) -> List[Rule]:
    """tile_m/n(/k)_exceeds_dim: a tile edge past the next power of two of its dimension (and past
    the smallest tile of that edge). The kernels mask the K tail: BLOCK_K up to the next power of
    two of K serves any K. ``k_floor`` 0: no rule on BLOCK_K."""
    rules = [Rule("tile_m_exceeds_dim", "BLOCK_M larger than the next power of two of M", _exceeds("M", m_floor)),
             Rule("tile_n_exceeds_dim", "BLOCK_N larger than the next power of two of N", _exceeds("N", n_floor))]
    if k_floor:
        rules.append(Rule("tile_k_exceeds_dim", "BLOCK_K larger than the next power of two of K",
                          _exceeds("K", k_floor)))
    return rules


def _split_k_too_deep(c, s, t):
    # splits take whole BLOCK_K steps, ceil(steps / SPLIT_K) each: some split would get none
    steps = cdiv(s.K, c["BLOCK_K"])
    return c["SPLIT_K"] > 1 and cdiv(steps, cdiv(steps, c["SPLIT_K"])) < c["SPLIT_K"]


def split_k_rules(hip_multiprocessors: int, full_grid_fills: str = "the GPU") -> List[Rule]:
    """split_k_too_deep, split_k_on_full_grid, split_k_overfills. Split-K pays off when the M x N
    grid alone leaves multiprocessors idle, and up to four programs per multiprocessor (a larger
    split: a smaller one already fills the GPU). A target without ``multiprocessors`` counts as
    an H100, or on AMD as ``hip_multiprocessors``; ``full_grid_fills`` ends the full-grid rule's why."""

    def on_full_grid(c, s, t):
        return c["SPLIT_K"] > 1 and tiles(c, s) >= multiprocessors(t, hip_multiprocessors)

    def overfills(c, s, t):
        return c["SPLIT_K"] > 1 and tiles(c, s) * c["SPLIT_K"] > 4 * multiprocessors(t, hip_multiprocessors)

    return [
        Rule("split_k_too_deep", "some split of K would get no BLOCK_K step", _split_k_too_deep),
        Rule("split_k_on_full_grid", "SPLIT_K > 1 where the M x N grid alone fills %s" % full_grid_fills,
             on_full_grid),
        Rule("split_k_overfills", "SPLIT_K > 1 with more than four programs per multiprocessor", overfills),
    ]


def _group_m_useless(c, s, t):
    return c["GROUP_M"] > 1 and cdiv(s.M, c["BLOCK_M"]) <= 1


def _tma_needs_hopper(c, s, t):
    # device-side tensor descriptors (the bulk tensor copy engine) exist on NVIDIA sm90 and newer
    arch = str(getattr(t, "gpu_arch", "") or "")
    return bool(c.get("TMA")) and (getattr(t, "backend", "") != "cuda" or not arch.isdigit() or int(arch) < 90)


ACCUMULATOR_REGISTERS = 192  # of a thread, at most, for the fp32 accumulator


def _accumulator_spills(c, s, t):
    # the fp32 accumulator alone takes BLOCK_M x BLOCK_N / threads registers of each thread: 128 for
    # the 128 x 256 tile on 8 warps, 160 for the 128 x 320 tile (186 registers in all on sm90, no
    # spills), 192 for the 256 x 192 and 192 x 256 tiles (218 registers and no spills; 255 and 144
    # bytes of stack, and still as fast); the next step, 256, is more than a
    # thread can hold beside its operands
    warp = 64 if getattr(t, "backend", "") == "hip" else 32
    return c["BLOCK_M"] * c["BLOCK_N"] > ACCUMULATOR_REGISTERS * c["num_warps"] * warp


GROUP_M_USELESS = Rule("group_m_useless", "GROUP_M > 1 with a single row of tiles repeats GROUP_M = 1",
                       _group_m_useless)
TMA_NEEDS_SM90 = Rule("tma_needs_sm90", "TMA = 1 (tensor descriptors) on a target that is not NVIDIA sm90 or newer",
                      _tma_needs_hopper)
ACCUMULATOR_SPILLS = Rule("accumulator_spills", "the fp32 accumulator needs more than %d registers per thread"
                          % ACCUMULATOR_REGISTERS,
                          _accumulator_spills)


# ---- seeds ---------------------------------------------------------------------------------------
def skinny_tile(m: int) -> int:
    """The narrowest BLOCK_M (16 to 64) that covers M."""
    tile = 16
    while tile < min(m, 64):
        tile *= 2
    return tile


def complete_seeds(seeds, kernel, shape, target) -> List[dict]:
    """Each seed completed with the first value of every parameter of ``kernel``'s space on
    ``target`` it does not name; kept once, and only when it names no parameter outside the space
    (TMA on hip, ...), its values are in the space and no pruning rule of the kernel rejects it."""
    space = kernel.space_for(target)
    rules = kernel.rules_for(target)
    out, seen = [], set()
    for seed in seeds:
        if set(seed) - set(space):
            continue
        cfg = {name: seed.get(name, values[0]) for name, values in space.items()}
        if any(cfg[name] not in values for name, values in space.items()):
            continue
        if first_pruning_rule(rules, cfg, shape, target) is not None:
            continue
        k = tuple(sorted(cfg.items()))
        if k not in seen:
            seen.add(k)
            out.append(cfg)
    return out
