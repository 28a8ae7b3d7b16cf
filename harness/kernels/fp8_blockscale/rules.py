"""Pruning rules for the fp8 block-scaled GEMM: a config is pruned for a shape when a rule says so."""

from __future__ import annotations

import functools
import importlib.util
import math
import os

from ...space import Rule
from ..gemm_tiles import (ACCUMULATOR_SPILLS, GROUP_M_USELESS, HIP_MULTIPROCESSORS, TMA_NEEDS_SM90, shared_memory,
                          split_k_rules, tile_rules)
from . import cuda_decode, cuda_kernel as cuda
from .descriptors import SCALE_CHUNK, tile_parts, warp_specialized
from .fp8 import SCALE_BLOCK, cdiv

# AMD arches with fp8 matrix instructions, and the e4m3 format each takes (NVIDIA sm89+: e4m3fn)
HIP_FP8 = {"gfx942": "fp8e4m3fnuz", "gfx950": "fp8e4m3fn"}


def native_format(target):
    """The e4m3 format the target's fp8 matrix instructions take (None: it has none)."""
    backend = getattr(target, "backend", "")
    arch = str(getattr(target, "gpu_arch", "") or "")
    if backend == "cuda":
        return "fp8e4m3fn" if arch.isdigit() and int(arch) >= 89 else None
    if backend == "hip":
        return HIP_FP8.get(arch)
    return None


def _block_k_splits_scale(c, s, t):
    # one K step must lie inside one 128-wide scale block: BLOCK_K divides 128
    return SCALE_BLOCK % c["BLOCK_K"] != 0


def _no_fp8_mma(c, s, t):
    # NVIDIA before sm89 and AMD other than gfx942 / gfx950 have no fp8 matrix instructions
    return native_format(t) is None


def _format_not_native(c, s, t):
    # gfx942 multiplies e4m3fnuz only (Triton would upcast e4m3fn to fp16 MMAs); NVIDIA e4m3fn only
    native = native_format(t)
    return native is not None and s.dtype != native


def _tma_rows_unaligned(c, s, t):
    # a tensor descriptor's row pitch must be a multiple of 16 bytes: K fp8 elements for A and B
    return bool(c.get("TMA")) and s.K % 16 != 0


WS_BLOCK_M = (64, 128, 192)  # one, two or three consumer warpgroups of 64 rows
# the widest tile by BLOCK_M: an fp32 accumulator and partial of 64 x BLOCK_N a warpgroup live in its
# setmaxnreg registers (gluon_kernel.CONSUMER_REGS): 256 columns spill at 232 (two consumers), 160
# at 160 (three consumers: 176 bytes of stack at 192 x 160)
WS_MAX_BLOCK_N = {64: 192, 128: 192, 192: 128}


def _ws_off_config(c, s, t):
    # the Gluon kernel: Hopper's wgmma (sm90 only), TMA, no split-K, one K step per scale block, 4 warps
    if not warp_specialized(c):
        return False
    arch = str(getattr(t, "gpu_arch", "") or "")
    return (getattr(t, "backend", "") != "cuda" or arch != "90" or not c.get("TMA") or c["SPLIT_K"] != 1
            or c["BLOCK_K"] != SCALE_BLOCK or c["num_warps"] != 4 or c["BLOCK_M"] not in WS_BLOCK_M)


def _ws_tile_n(c, s, t):
    # BLOCK_N one power of two, or two parts (WIDE a power of two, NARROW its lowest set bit: 96, 160, 192)
    if not warp_specialized(c):
        return False
    wide, narrow = tile_parts(c["BLOCK_N"])
    too_wide = c["BLOCK_N"] > WS_MAX_BLOCK_N.get(c["BLOCK_M"], 0)
    return too_wide or wide & (wide - 1) != 0 or (narrow and narrow < 16)


def _overlap_needs_ws(c, s, t):
    # OVERLAP is the WS kernel's (its epilogue under the next tile's MMA); the Triton kernel has none
    return bool(c.get("OVERLAP")) and not warp_specialized(c)


def _ordered_needs_consumers(c, s, t):
    # ORDERED passes the MMA turn between the WS kernel's consumers: two or three (BLOCK_M 128, 192)
    return bool(c.get("ORDERED")) and (not warp_specialized(c) or c["BLOCK_M"] <= 64)


def _pipe_config(c, s, t):
    # PIPE (two partials a consumer) is the WS kernel's: accumulator and two partials of 64 x BLOCK_N
    # fp32 fit a consumer's registers for one tile part up to 128 wide with one or two consumers
    # (three get 160 registers); it has its own K loop, without OVERLAP or ORDERED
    if not c.get("PIPE"):
        return False
    bn = c["BLOCK_N"]
    if cuda.cuda_kernel(c):  # the CUDA kernel's PIPE: one 64-row wave (BLOCK_M 128), BLOCK_N up to 128
        return c["BLOCK_M"] != 128 or bn > 128
    return (not warp_specialized(c) or bn > 128 or bn & (bn - 1) != 0 or c["BLOCK_M"] > 128
            or bool(c.get("OVERLAP")) or bool(c.get("ORDERED")))


def _smem_scales_config(c, s, t):
    # SMEM_SCALES (A's scales in shared memory: 1 staged by the consumers, 2 copied into the ring by
    # TMA) is the WS kernel's, in its plain and PIPE consumers (not OVERLAP's)
    return bool(c.get("SMEM_SCALES")) and (not warp_specialized(c) or bool(c.get("OVERLAP")))


def _smem_scales_unaligned(c, s, t):
    # SMEM_SCALES 2 reads A's scales M-major by TMA: a row of that copy (M fp32) must be a multiple
    # of 16 bytes
    return c.get("SMEM_SCALES") == 2 and s.M % 4 != 0


def _cluster_config(c, s, t):
    # num_ctas 2 (a cluster of two CTAs: a tile of 2 x BLOCK_M rows, B multicast to both) is the WS
    # kernel's plain and PIPE consumers; with clusters Gluon stacks shared buffers in powers of two
    # only: the ring's slots (num_stages) and the consumers (BLOCK_M 64 or 128)
    ctas = c.get("num_ctas", 1)
    if ctas == 1 or cuda.cuda_kernel(c):  # the CUDA kernel's clusters: rule cuda_config
        return False
    stages = c["num_stages"]
    return (ctas != 2 or not warp_specialized(c) or c["BLOCK_M"] not in (64, 128) or stages & (stages - 1) != 0
            or bool(c.get("SMEM_SCALES")) or bool(c.get("OVERLAP")) or bool(c.get("ORDERED")))


def _cluster_needs_multicast(c, s, t):
    # the host's Triton builds the cluster kernel only where Gluon's TMA load multicasts (3.9 does,
    # 3.6 does not)
    return c.get("num_ctas", 1) > 1 and not cuda.cuda_kernel(c) and not gluon_multicast()


@functools.lru_cache(maxsize=None)
def gluon_multicast() -> bool:
    """Whether the installed Triton's Gluon TMA load takes ``multicast`` (read from its source, so
    that pruning does not import Triton)."""
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.origin:
        return False
    path = os.path.join(os.path.dirname(spec.origin), "experimental", "gluon", "language", "nvidia", "hopper", "tma.py")
    try:
        with open(path) as f:
            return "multicast" in f.read()
    except OSError:
        return False


def ws_shared_bytes(c) -> int:
    """Shared memory of the WS kernel: num_stages ring slots of A (BLOCK_M x 128 fp8) and B (BLOCK_N x
    128 fp8), the bf16 C tile, the fp32 A scales of SMEM_SCALES (1: SCALE_CHUNK steps; 2: one step a
    slot), and 1 KiB for the barriers and the compiler's own (the sm90 builds: 128 x 128 x 6 takes
    229640 bytes, 192 x 128 x 4 213244, 192 x 128 x 4 with SMEM_SCALES 1 219436, 128 x 128 x 5 with
    SMEM_SCALES 2 199424)."""
    mode = c.get("SMEM_SCALES", 0)
    scales = 4 * c["BLOCK_M"] * (SCALE_CHUNK if mode == 1 else c["num_stages"] if mode == 2 else 0)
    return (c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * SCALE_BLOCK + 2 * c["BLOCK_M"] * c["BLOCK_N"] + scales
            + 1024)


def _ws_shared_memory(c, s, t):
    # the ring and the C tile must fit the block's shared memory (227 KiB on sm90)
    limit = shared_memory(t)
    return warp_specialized(c) and limit is not None and ws_shared_bytes(c) > limit


def _tile_in_parts_needs_ws(c, s, t):
    # Triton's tensors are powers of two: only the warp-specialized kernel splits a tile in parts
    # (BLOCK_N 80, 96, 160, 192 as two MMAs; BLOCK_M 192 as three consumer warpgroups)
    bm, bn = c["BLOCK_M"], c["BLOCK_N"]
    return not warp_specialized(c) and not cuda.cuda_kernel(c) and (bn & (bn - 1) != 0 or bm & (bm - 1) != 0)


def _ws_unaligned(c, s, t):
    # host descriptors: rows of A and B (K bytes) and of C (2 N bytes) multiples of 16 bytes
    return warp_specialized(c) and (s.K % 16 != 0 or s.N % 8 != 0)


def _ws_without_multiprocessors(c, s, t):
    # the persistent grid is one program per multiprocessor: the target must say how many
    return warp_specialized(c) and not getattr(t, "multiprocessors", None)


def _accumulator_spills_one_program(c, s, t):
    # the warp-specialized and CUDA kernels spread the accumulator over BLOCK_M / 64 warpgroups (rules
    # ws_tile_n, cuda_tile)
    return not warp_specialized(c) and not cuda.cuda_kernel(c) and ACCUMULATOR_SPILLS.prunes(c, s, t)


def _cuda_config(c, s, t):
    # the CUDA C++ kernels (cuda_kernel.cu; SWAP_AB: cuda_decode.cu): sm90a, their own TMA loads, one K
    # step a scale block; the keys of the other kernels at their first value (num_warps 4: one config,
    # not four). The prefill kernel: no split-K, BLOCK_M 128 or 256, num_ctas 1 or 2; the decode
    # kernel: BLOCK_M 16 to 64 tokens, BLOCK_N 64 or 128 weight rows, split-K, no clusters or PIPE
    if not cuda.cuda_kernel(c):
        return False
    arch = str(getattr(t, "gpu_arch", "") or "")
    if (getattr(t, "backend", "") != "cuda" or arch != "90" or bool(c.get("WS")) or not c.get("TMA")
            or c["BLOCK_K"] != SCALE_BLOCK or c["num_warps"] != 4 or bool(c.get("OVERLAP"))
            or bool(c.get("ORDERED")) or bool(c.get("SMEM_SCALES"))):
        return True
    if cuda_decode.swap_ab(c):
        return (c["BLOCK_M"] not in cuda_decode.BLOCK_M or c["BLOCK_N"] not in cuda_decode.BLOCK_N
                or c.get("num_ctas", 1) != 1 or bool(c.get("PIPE")) or c.get("GROUP_M", 1) != 1)
    return c["SPLIT_K"] != 1 or c["BLOCK_M"] not in (128, 256) or c.get("num_ctas", 1) not in (1, 2)


def _swap_ab_needs_cuda(c, s, t):
    return bool(c.get("SWAP_AB")) and not cuda.cuda_kernel(c)


# the widest tile by BLOCK_M: a consumer's fp32 total (BLOCK_M / 128 waves of 64 x BLOCK_N) and its
# partial in 232 registers (BLOCK_N / 2 a wave; BLOCK_N 256 runs two 128-column halves through one
# 64-register partial)
CUDA_MAX_BLOCK_N = {128: 256, 256: 128}


def _cuda_tile(c, s, t):
    # BLOCK_N a multiple of 16 (a multicast half: whole 1024-byte swizzle periods); over 128 columns
    # a tile must span at most two 128-column scale blocks wherever it starts (144, 160, 192, 256)
    if not cuda.cuda_kernel(c) or cuda_decode.swap_ab(c):  # the decode kernel's tiles: rule cuda_config
        return False
    bn = c["BLOCK_N"]
    two_scale_blocks = bn <= SCALE_BLOCK or math.gcd(bn, SCALE_BLOCK) == bn - SCALE_BLOCK
    return bn % 16 != 0 or bn > CUDA_MAX_BLOCK_N.get(c["BLOCK_M"], 0) or not two_scale_blocks


def _block_m_256_needs_cuda(c, s, t):
    # 256-row tiles are the CUDA kernel's (two waves a consumer); the Triton kernel keeps its space
    return c["BLOCK_M"] == 256 and not cuda.cuda_kernel(c)


def _share_a_config(c, s, t):
    # SHARE_A (the cluster's CTAs share A instead of B) is the CUDA kernel's, with num_ctas 2
    return bool(c.get("SHARE_A")) and (not cuda.cuda_kernel(c) or c.get("num_ctas", 1) != 2)


def _cuda_shared_memory(c, s, t):
    limit = shared_memory(t)
    if not cuda.cuda_kernel(c) or limit is None:
        return False
    return (cuda_decode if cuda_decode.swap_ab(c) else cuda).shared_bytes(c) > limit


def _cuda_unaligned(c, s, t):
    # tensor maps: rows of A and B (K bytes), of C (2N bytes) and of A's M-major scales (4M bytes)
    # multiples of 16 bytes; the kernel keeps a tile's B scales for K up to 65536. The decode kernel
    # maps A and B only (rule tma_unaligned)
    return cuda.cuda_kernel(c) and not cuda_decode.swap_ab(c) and (s.K % 16 != 0 or s.N % 8 != 0 or s.M % 4 != 0
                                    or cdiv(s.K, SCALE_BLOCK) > cuda.MAX_KS)


def _cuda_without_multiprocessors(c, s, t):
    return cuda.cuda_kernel(c) and not cuda_decode.swap_ab(c) and not getattr(t, "multiprocessors", None)


def _cuda_needs_nvrtc(c, s, t):
    return cuda.cuda_kernel(c) and not nvrtc_available()


@functools.lru_cache(maxsize=None)
def nvrtc_available() -> bool:
    """Whether this host can build the CUDA kernel (NVRTC loads)."""
    from ...compile import cuda_cpp
    from ...errors import HarnessError

    try:
        cuda_cpp.nvrtc()
        return True
    except HarnessError:
        return False


def _ws_floor_exempt(rule: Rule) -> Rule:
    """tile_m_exceeds_dim, but not for the WS kernel's 64-row tile: its MMA is 64 rows at least and
    TMA reads no row past M (decode shapes, M of 16, stream B through it)."""
    return Rule(rule.name, rule.why + " (the WS kernel's 64-row tile excepted: its smallest)",
                lambda c, s, t: not (warp_specialized(c) and c["BLOCK_M"] == 64) and rule.prunes(c, s, t))


def _tile_rules():
    return [_ws_floor_exempt(r) if r.name == "tile_m_exceeds_dim" else r for r in tile_rules(m_floor=16, n_floor=32)]


GPU_RULES = [
    Rule("no_fp8_mma", "the target has no fp8 matrix instructions (NVIDIA sm89+ and AMD gfx942 / gfx950 have)",
         _no_fp8_mma),
    Rule("fp8_format_not_native", "the shape's fp8 format is not the one the target's fp8 MMA takes "
         "(NVIDIA and gfx950: fp8e4m3fn; gfx942: fp8e4m3fnuz)", _format_not_native),
    Rule("block_k_splits_scale", "BLOCK_K does not divide the 128-wide scale block (a K step must have one scale)",
         _block_k_splits_scale),
    *_tile_rules(),
    *split_k_rules(hip_multiprocessors=HIP_MULTIPROCESSORS, full_grid_fills="the multiprocessors"),
    GROUP_M_USELESS,
    TMA_NEEDS_SM90,
    Rule("tma_unaligned", "TMA = 1 where a row of A or B (K bytes) is not a multiple of 16 bytes", _tma_rows_unaligned),
    Rule("ws_config", "WS = 1 is the warp-specialized Gluon kernel: sm90, TMA = 1, SPLIT_K 1, BLOCK_K 128, "
         "num_warps 4, BLOCK_M 64, 128 or 192", _ws_off_config),
    Rule("ws_tile_n", "WS = 1 takes BLOCK_N a power of two or 80, 96, 160, 192 (two parts), at most 192 "
         "(128 with BLOCK_M 192: three consumers' registers)", _ws_tile_n),
    Rule("overlap_needs_ws", "OVERLAP = 1 (the epilogue under the next tile's MMA) without WS = 1", _overlap_needs_ws),
    Rule("ordered_needs_consumers", "ORDERED = 1 (consumers' MMAs in turn) without WS = 1 or with one consumer "
         "(BLOCK_M 64)", _ordered_needs_consumers),
    Rule("pipe_config", "PIPE = 1 (two partials a consumer) without WS = 1, with BLOCK_N over 128 or not a power "
         "of two, BLOCK_M 192, OVERLAP or ORDERED", _pipe_config),
    Rule("smem_scales_config", "SMEM_SCALES 1 or 2 (A scales in shared memory) without WS = 1 or with "
         "OVERLAP = 1", _smem_scales_config),
    Rule("smem_scales_unaligned", "SMEM_SCALES = 2 (A scales M-major by TMA) where M is not a multiple of 4 "
         "(a row of M fp32 must be a multiple of 16 bytes)", _smem_scales_unaligned),
    Rule("cluster_config", "num_ctas 2 (B multicast to a cluster of two CTAs) without WS = 1, with BLOCK_M 192, "
         "num_stages not a power of two, SMEM_SCALES, OVERLAP or ORDERED", _cluster_config),
    Rule("cluster_needs_multicast", "num_ctas 2 where this host's Triton has no Gluon TMA multicast (3.9 has)",
         _cluster_needs_multicast),
    Rule("ws_shared_memory", "WS = 1 whose ring of num_stages A and B slots and C tile exceed the shared memory",
         _ws_shared_memory),
    Rule("tile_in_parts_needs_ws", "BLOCK_N (80, 96, 160, 192) or BLOCK_M (192) not a power of two without WS = 1",
         _tile_in_parts_needs_ws),
    Rule("ws_unaligned", "WS = 1 where a row of A or B (K bytes) or of C (2N bytes) is not a multiple of 16 bytes",
         _ws_unaligned),
    Rule("ws_needs_multiprocessors", "WS = 1 (a persistent grid) on a target without `multiprocessors`",
         _ws_without_multiprocessors),
    Rule(ACCUMULATOR_SPILLS.name, ACCUMULATOR_SPILLS.why, _accumulator_spills_one_program),
    Rule("cuda_config", "CUDA = 1 is the CUDA C++ kernels': sm90, WS = 0, TMA = 1, BLOCK_K 128, num_warps 4, no "
         "OVERLAP, ORDERED or SMEM_SCALES; the prefill kernel SPLIT_K 1, BLOCK_M 128 or 256, num_ctas 1 or 2; the "
         "decode kernel (SWAP_AB = 1) BLOCK_M 16, 32 or 64, BLOCK_N 64 or 128, GROUP_M 1, num_ctas 1, no PIPE",
         _cuda_config),
    Rule("swap_ab_needs_cuda", "SWAP_AB = 1 (the CUDA decode kernel: C^T = B A^T) without CUDA = 1",
         _swap_ab_needs_cuda),
    Rule("cuda_tile", "CUDA = 1 takes BLOCK_N a multiple of 16, at most 256 (128 with BLOCK_M 256: a consumer's "
         "registers), over 128 only where a tile spans two scale blocks (144, 160, 192, 256)", _cuda_tile),
    Rule("block_m_256_needs_cuda", "BLOCK_M 256 (two 64-row waves a consumer) without CUDA = 1",
         _block_m_256_needs_cuda),
    Rule("share_a_config", "SHARE_A = 1 (the cluster shares A) without CUDA = 1 and num_ctas 2", _share_a_config),
    Rule("cuda_shared_memory", "CUDA = 1 whose ring, B scales and C tile exceed the shared memory",
         _cuda_shared_memory),
    Rule("cuda_unaligned", "CUDA = 1, SWAP_AB = 0 where a row of A or B (K bytes), C (2N bytes) or A's M-major "
         "scales (4M bytes) is not a multiple of 16 bytes, or K is over 65536", _cuda_unaligned),
    Rule("cuda_needs_multiprocessors", "CUDA = 1, SWAP_AB = 0 (a persistent grid) on a target without "
         "`multiprocessors`",
         _cuda_without_multiprocessors),
    Rule("cuda_needs_nvrtc", "CUDA = 1 where this host has no NVRTC to build it (pip install nvidia-cuda-nvrtc-cu12)",
         _cuda_needs_nvrtc),
]
