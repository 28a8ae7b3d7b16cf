"""Where shapes come from: command-line lists and shapes files.

A Shape is one problem size with its dtype and layout. Every source module in this package
turns its input into a list of Shapes (with an optional weight) and reports bad input with
the file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import HarnessError

DTYPES = ("fp32", "fp16", "bf16")
LAYOUTS = ("NN", "NT", "TN", "TT")
MAX_DIM = 1 << 20  # a dimension past a million is a typo, not a GEMM


@dataclass(frozen=True)
class Shape:
    M: int
    N: int
    K: int
    dtype: str = "fp32"
    layout: str = "NN"  # transposes of A and B: N = row-major as given, T = transposed
    weight: float = field(default=1.0, compare=False)
    extra: tuple = field(default=(), compare=False)  # columns a source kept, as (key, value)

    @property
    def id(self) -> str:
        return "%dx%dx%d_%s_%s" % (self.M, self.N, self.K, self.dtype, self.layout)

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    def to_dict(self) -> dict:
        return {"id": self.id, "M": self.M, "N": self.N, "K": self.K, "dtype": self.dtype,
                "layout": self.layout, "weight": self.weight}


_SHAPE_RE = re.compile(r"^\s*([^x:\s]+)x([^x:\s]+)x([^x:\s]+)\s*(?::\s*(\w+))?\s*(?::\s*(\w+))?\s*$")


def parse_shape(text: str, default_dtype: str = "fp32", where: Optional[str] = None) -> Shape:
    """'MxNxK', 'MxNxK:dtype' or 'MxNxK:dtype:LAYOUT'."""
    match = _SHAPE_RE.match(text)
    if not match:
        raise HarnessError("bad shape %r: write MxNxK, MxNxK:dtype or MxNxK:dtype:LAYOUT "
                           "(e.g. 256x256x128:fp16:NN)" % text, where=where)
    dims = [_dim(v, name, text, where) for v, name in zip(match.group(1, 2, 3), "MNK")]
    dtype = (match.group(4) or default_dtype).lower()
    layout = (match.group(5) or "NN").upper()
    return make_shape(*dims, dtype=dtype, layout=layout, where=where, text=text)


def make_shape(M, N, K, dtype="fp32", layout="NN", weight=1.0, extra=(), where=None, text=None) -> Shape:
    text = text or "%sx%sx%s" % (M, N, K)
    dims = [_dim(v, name, text, where) for v, name in ((M, "M"), (N, "N"), (K, "K"))]
    if dtype not in DTYPES:
        raise HarnessError("unknown dtype %r in shape %r (known: %s)" % (dtype, text, ", ".join(DTYPES)),
                           where=where)
    if layout not in LAYOUTS:
        raise HarnessError("unknown layout %r in shape %r (known: %s)" % (layout, text, ", ".join(LAYOUTS)),
                           where=where)
    return Shape(*dims, dtype=dtype, layout=layout, weight=float(weight), extra=tuple(extra))


def _dim(value, name, text, where) -> int:
    try:
        dim = int(str(value).strip())
    except ValueError:
        raise HarnessError("%s=%r in shape %r is not a whole number" % (name, value, text), where=where)
    if dim <= 0:
        raise HarnessError("%s=%d in shape %r must be positive" % (name, dim, text), where=where)
    if dim > MAX_DIM:
        raise HarnessError("%s=%d in shape %r is absurdly large (limit %d)" % (name, dim, text, MAX_DIM),
                           where=where)
    return dim


def parse_shape_list(text: str, default_dtype: str = "fp32") -> list:
    shapes = [parse_shape(part, default_dtype) for part in text.split(",") if part.strip()]
    if not shapes:
        raise HarnessError("no shapes given in %r" % text)
    return dedupe(shapes)


def dedupe(shapes) -> list:
    seen, out = set(), []
    for shape in shapes:
        if shape not in seen:
            seen.add(shape)
            out.append(shape)
    return out


def read_shapes_file(path: str, fmt: str = "auto", default_dtype: str = "fp32") -> list:
    """A shapes file: one MxNxK[:dtype[:layout]] per line; '#' starts a comment."""
    from . import sources  # the file formats

    return sources.read(Path(path), fmt, default_dtype)
