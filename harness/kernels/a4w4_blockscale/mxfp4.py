"""MXFP4 in numpy (no torch on the host): e2m1 codes packed two per byte, e8m0 scales.

aiter's layout (``gemm_a4w4``, ``gemm_afp4wfp4`` and their tests): a row of K values is K/2
bytes, value 2i in the low nibble of byte i and value 2i+1 in the high nibble (aiter's
``mxfp4_to_f32``: ``x & 0xF`` then ``x >> 4``; Triton's ``dot_scaled`` "e2m1" packs the same
way along K). An e2m1 code is 1 sign, 2 exponent, 1 mantissa bit: magnitudes 0, 0.5, 1, 1.5, 2,
3, 4, 6, every code finite. An e8m0 scale byte ``s`` is 2^(s - 127), 255 is NaN; one scale per
32 consecutive values along K (the MX block).
"""

from __future__ import annotations

import numpy as np

MX_BLOCK = 32  # values per e8m0 scale along K
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
SCALE_LOW, SCALE_HIGH = 124, 130  # test data's e8m0 range: 2^-3 .. 2^3, products stay finite


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def unpack(packed: np.ndarray) -> np.ndarray:
    """R x K/2 bytes -> R x K e2m1 codes (low nibble first)."""
    packed = np.asarray(packed, dtype=np.uint8)
    codes = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), dtype=np.uint8)
    codes[..., 0::2] = packed & 0xF
    codes[..., 1::2] = packed >> 4
    return codes


def pack(codes: np.ndarray) -> np.ndarray:
    """R x K e2m1 codes (K even) -> R x K/2 bytes, value 2i in the low nibble of byte i."""
    codes = np.asarray(codes, dtype=np.uint8)
    return (codes[..., 0::2] & 0xF) | ((codes[..., 1::2] & 0xF) << 4)


def scale_values(scales: np.ndarray) -> np.ndarray:
    """e8m0 bytes -> float64 2^(s - 127) (255: NaN)."""
    s = np.asarray(scales, dtype=np.uint8).astype(np.float64)
    return np.where(s == 255, np.nan, np.exp2(s - 127.0))


def dequantize(packed: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float64 R x K values of R x K/2 packed codes with R x K/32 e8m0 scales."""
    values = E2M1_VALUES[unpack(packed)]
    return values * np.repeat(scale_values(scales), MX_BLOCK, axis=-1)[..., :values.shape[-1]]


def random_operand(rng: np.random.Generator, rows: int, K: int):
    """(R x K/2 packed random codes, R x K/32 e8m0 scales in [SCALE_LOW, SCALE_HIGH])."""
    packed = rng.integers(0, 256, (rows, K // 2), dtype=np.uint8)
    scales = rng.integers(SCALE_LOW, SCALE_HIGH + 1, (rows, cdiv(K, MX_BLOCK)), dtype=np.uint8)
    return packed, scales
