"""fp8 e4m3 in numpy (no torch on the host): encode, decode, block quantization.

Two e4m3 formats (1 sign, 4 exponent, 3 mantissa bits), named as the harness names dtypes:

* ``fp8e4m3fn`` (OCP FP8, torch.float8_e4m3fn, Triton ``fp8e4nv``; NVIDIA sm89+, AMD gfx950):
  exponent bias 7, largest finite 448, ``0x7F``/``0xFF`` NaN, no infinities, a negative zero.
* ``fp8e4m3fnuz`` (torch.float8_e4m3fnuz, Triton ``fp8e4b8``; what AMD gfx942's MFMA takes):
  exponent bias 8, largest finite 240, ``0x80`` the only NaN, no negative zero, no infinities.

Encoding rounds to the nearest value, ties to the even code (the even mantissa), and saturates
past the largest finite value (as ``cvt.rn.satfinite`` does on NVIDIA); NaN stays NaN.
"""

from __future__ import annotations

import numpy as np

FORMATS = ("fp8e4m3fn", "fp8e4m3fnuz")
MAX = {"fp8e4m3fn": 448.0, "fp8e4m3fnuz": 240.0}
_BIAS = {"fp8e4m3fn": 7, "fp8e4m3fnuz": 8}
_NAN_CODE = {"fp8e4m3fn": 0x7F, "fp8e4m3fnuz": 0x80}
SCALE_BLOCK = 128  # the quantization block: 1 x 128 for A, 128 x 128 for B


def _check(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError("unknown fp8 format %r (known: %s)" % (fmt, ", ".join(FORMATS)))


def _positive_values(fmt: str) -> np.ndarray:
    """The value of every code 0x00..0x7F (sign bit clear), NaN where the code is NaN."""
    codes = np.arange(128)
    exp, mant = codes >> 3, codes & 7
    bias = _BIAS[fmt]
    normal = (1.0 + mant / 8.0) * np.exp2(exp - bias)
    sub = (mant / 8.0) * np.exp2(1 - bias)
    values = np.where(exp == 0, sub, normal)
    if fmt == "fp8e4m3fn":
        values[0x7F] = np.nan
    return values


_TABLES = {}


def decode_table(fmt: str) -> np.ndarray:
    """float64[256]: the value of every byte."""
    _check(fmt)
    if fmt not in _TABLES:
        pos = _positive_values(fmt)
        neg = -pos
        if fmt == "fp8e4m3fnuz":
            neg[0] = np.nan  # 0x80: NaN, not -0
        _TABLES[fmt] = np.concatenate([pos, neg])
    return _TABLES[fmt]


def decode(codes: np.ndarray, fmt: str = "fp8e4m3fn") -> np.ndarray:
    """uint8 codes -> float64 values."""
    return decode_table(fmt)[np.asarray(codes, dtype=np.uint8)]


def encode(x: np.ndarray, fmt: str = "fp8e4m3fn") -> np.ndarray:
    """float values -> uint8 codes: nearest, ties to even, saturating, NaN kept."""
    _check(fmt)
    x = np.asarray(x, dtype=np.float64)
    finite = _positive_values(fmt)
    finite = finite[~np.isnan(finite)]  # ascending in the code
    mag = np.minimum(np.abs(x), finite[-1])
    hi = np.clip(np.searchsorted(finite, mag, side="left"), 1, len(finite) - 1)
    lo = hi - 1
    d_lo, d_hi = mag - finite[lo], finite[hi] - mag
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(mag == 0, 0, code).astype(np.uint8)
    negative = np.signbit(x) & (code != 0) if fmt == "fp8e4m3fnuz" else np.signbit(x)
    code = code | np.where(negative, 0x80, 0).astype(np.uint8)
    return np.where(np.isnan(x), _NAN_CODE[fmt], code).astype(np.uint8)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def quantize_rows(x: np.ndarray, fmt: str, block: int = SCALE_BLOCK):
    """Per 1 x ``block`` quantization of an R x C matrix: (codes R x C, fp32 scales R x cdiv(C, block)),
    the scale of a block is its largest magnitude over the format's largest value (1 for an
    all-zero block), as DeepSeek-V3's act_quant does."""
    rows, cols = x.shape
    pad = cdiv(cols, block) * block - cols
    blocks = np.pad(np.abs(x), ((0, 0), (0, pad))).reshape(rows, -1, block)
    scale = _scale_of(blocks.max(axis=2), fmt)
    codes = encode(x / np.repeat(scale, block, axis=1)[:, :cols], fmt)
    return codes, scale


def quantize_blocks(x: np.ndarray, fmt: str, block: int = SCALE_BLOCK):
    """Per ``block`` x ``block`` quantization of an R x C matrix: (codes R x C, fp32 scales
    cdiv(R, block) x cdiv(C, block)), as DeepSeek-V3's weight_quant does."""
    rows, cols = x.shape
    br, bc = cdiv(rows, block), cdiv(cols, block)
    padded = np.pad(np.abs(x), ((0, br * block - rows), (0, bc * block - cols)))
    amax = padded.reshape(br, block, bc, block).max(axis=(1, 3))
    scale = _scale_of(amax, fmt)
    codes = encode(x / expand_scales(scale, rows, cols, block, block), fmt)
    return codes, scale


def _scale_of(amax: np.ndarray, fmt: str) -> np.ndarray:
    scale = (amax / MAX[fmt]).astype(np.float32)
    return np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)


def expand_scales(scale: np.ndarray, rows: int, cols: int, block_rows: int, block_cols: int) -> np.ndarray:
    """A scale per element: each scale repeated over its block_rows x block_cols block, cut to rows x cols."""
    full = np.repeat(np.repeat(np.asarray(scale, dtype=np.float64), block_rows, axis=0), block_cols, axis=1)
    return full[:rows, :cols]


def dequantize(codes: np.ndarray, scale: np.ndarray, block_rows: int, block_cols: int, fmt: str) -> np.ndarray:
    """float64 values of block-quantized codes."""
    rows, cols = codes.shape
    return decode(codes, fmt) * expand_scales(scale, rows, cols, block_rows, block_cols)
