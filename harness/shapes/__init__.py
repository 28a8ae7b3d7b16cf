"""Where shapes come from: command-line lists and shapes files.

A Shape is one problem size with its dtype and layout. Every source module in this package
turns its input into a list of Shapes (with an optional weight) and reports bad input with
the file and line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import HarnessError

DTYPES = ("fp32", "fp16", "bf16")
LAYOUTS = ("NN", "NT", "TN", "TT")
MAX_DIM = 1 << 20  # a dimension past a million is a typo, not a GEMM


@dataclass(frozen=True)
class Problem:
    """How a kernel's problems are written: its dimension names in order (matmul: M, N, K), the
    dtypes and layouts it takes (no layouts: the shape text has no layout part). A shape is
    written ``D1xD2x..:dtype[:layout]`` with one number per dimension (``64x64x64:fp16:NT``,
    ``4096:fp32``)."""

    dims: tuple = ("M", "N", "K")
    dtypes: tuple = DTYPES
    layouts: tuple = LAYOUTS
    max_dim: int = MAX_DIM  # the largest dimension the kernel computes correctly

    @property
    def default_layout(self) -> str:
        return self.layouts[0] if self.layouts else ""

    def syntax(self) -> str:
        return "x".join(self.dims) + "[:dtype" + ("[:layout]]" if self.layouts else "]")


MATMUL = Problem()


@dataclass(frozen=True)
class Shape:
    """One problem: its dimensions as ``((name, value), ...)`` in the kernel's order, its dtype and
    layout. A dimension reads as an attribute: ``shape.M``."""

    dims: tuple
    dtype: str = "fp32"
    layout: str = "NN"  # matmul: transposes of A and B, N = row-major as given, T = transposed
    weight: float = field(default=1.0, compare=False)
    extra: tuple = field(default=(), compare=False)  # columns a source kept, as (key, value)

    def __post_init__(self):
        for key, value in self.dims:  # plain attributes: pruning reads shape.M millions of times
            if not hasattr(type(self), key) and key not in self.__dataclass_fields__:
                object.__setattr__(self, key, value)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        for key, value in object.__getattribute__(self, "dims"):
            if key == name:
                return value
        raise AttributeError("shape %s has no dimension %s" % (self.id, name))

    @property
    def dim_values(self) -> dict:
        return dict(self.dims)

    @property
    def id(self) -> str:
        parts = ["x".join(str(v) for _, v in self.dims), self.dtype] + ([self.layout] if self.layout else [])
        return "_".join(parts)

    def to_dict(self) -> dict:
        return dict({"id": self.id}, **self.dim_values, dtype=self.dtype, layout=self.layout, weight=self.weight)


def parse_shape(text: str, default_dtype: str = "fp32", where: Optional[str] = None,
                problem: Problem = MATMUL) -> Shape:
    """'MxNxK', 'MxNxK:dtype' or 'MxNxK:dtype:LAYOUT' (a kernel's own dims: ``problem``)."""
    parts = [p.strip() for p in text.strip().split(":")]
    numbers = parts[0].split("x") if parts[0] else []
    if len(numbers) != len(problem.dims) or len(parts) > 2 + bool(problem.layouts) or not all(numbers):
        example = "x".join(str(v) for v in (256, 256, 128, 64)[:len(problem.dims)]) if len(problem.dims) > 1 else "4096"
        raise HarnessError("bad shape %r: write %s (e.g. %s:%s%s)" % (
            text, problem.syntax(), example, problem.dtypes[-1], ":" + problem.layouts[0] if problem.layouts else ""),
            where=where)
    dtype = (parts[1] if len(parts) > 1 and parts[1] else default_dtype).lower()
    layout = (parts[2] if len(parts) > 2 and parts[2] else problem.default_layout).upper()
    return make_problem_shape(problem, dict(zip(problem.dims, numbers)), dtype, layout, where=where, text=text)


def make_problem_shape(problem: Problem, dims: dict, dtype: str, layout: str = None, weight=1.0, extra=(),
                       where=None, text=None) -> Shape:
    """A checked Shape of ``problem`` from ``{dim name: value}``."""
    text = text or "x".join(str(dims.get(d)) for d in problem.dims)
    values = tuple((d, _dim(dims.get(d), d, text, where, problem.max_dim)) for d in problem.dims)
    layout = problem.default_layout if layout is None else layout
    if dtype not in problem.dtypes:
        raise HarnessError("unknown dtype %r in shape %r (known: %s)" % (dtype, text, ", ".join(problem.dtypes)),
                           where=where)
    if layout not in (problem.layouts or ("",)):
        known = ", ".join(problem.layouts) if problem.layouts else "none: this kernel takes no layout"
        raise HarnessError("unknown layout %r in shape %r (known: %s)" % (layout, text, known), where=where)
    return Shape(values, dtype=dtype, layout=layout, weight=float(weight), extra=tuple(extra))


def make_shape(M, N, K, dtype="fp32", layout="NN", weight=1.0, extra=(), where=None, text=None) -> Shape:
    """A matmul Shape (the GEMM shape sources: tune_gemm YAML, aiter CSV, hipBLASLt logs)."""
    return make_problem_shape(MATMUL, {"M": M, "N": N, "K": K}, dtype, layout, weight, extra, where,
                              text or "%sx%sx%s" % (M, N, K))


def _dim(value, name, text, where, limit: int = MAX_DIM) -> int:
    try:
        dim = int(str(value).strip())
    except ValueError:
        raise HarnessError("%s=%r in shape %r is not a whole number" % (name, value, text), where=where)
    if dim <= 0:
        raise HarnessError("%s=%d in shape %r must be positive" % (name, dim, text), where=where)
    if dim > MAX_DIM:
        raise HarnessError("%s=%d in shape %r is absurdly large (limit %d)" % (name, dim, text, MAX_DIM),
                           where=where)
    if dim > limit:
        raise HarnessError("%s=%d in shape %r is past the kernel's range (1 to %d)" % (name, dim, text, limit),
                           where=where)
    return dim


def parse_shape_list(text: str, default_dtype: str = "fp32", problem: Problem = MATMUL) -> list:
    shapes = [parse_shape(part, default_dtype, problem=problem) for part in text.split(",") if part.strip()]
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


def read_shapes_file(path: str, fmt: str = "auto", default_dtype: str = "fp32", problem: Problem = MATMUL) -> list:
    """A shapes file: one MxNxK[:dtype[:layout]] per line; '#' starts a comment."""
    from . import sources  # the file formats

    return sources.read(Path(path), fmt, default_dtype, problem=problem)


def read_text(path: Path) -> str:
    """A shapes file's text; one clear error when it is missing, binary or not UTF-8."""
    if not path.is_file():
        raise HarnessError("shapes file %s does not exist" % path)
    data = path.read_bytes()
    if b"\0" in data[:4096]:
        raise HarnessError("shapes file is binary, not text", where=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise HarnessError("shapes file is not UTF-8 text", where=str(path))
