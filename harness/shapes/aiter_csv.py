"""Shapes from the untuned CSVs aiter's GEMM tuners read (``M,N,K`` plus any columns), every row
kept or listed with its reason::

    M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle        (bf16_untuned_gemm.csv)
    64,256,5120,False,torch.bfloat16,torch.float32,False,False
    M,N,K,q_dtype_w                                       (a8w8_untuned_gemm.csv)
    1, 1280, 8192,torch.int8
    B,M,N,K                                               (a8w8_untuned_batched_gemm.csv)
    16, 1, 1280, 8192
    M,N,K                                                 (a8w8_blockscale_untuned_gemm.csv)

What each column means for the kernel being built (``problem``: its dtypes and layouts):

- The element type is ``q_dtype_w`` (or ``q_dtype_a``) where the file has one (aiter's quantized
  GEMMs: ``torch.int8``, ``torch.float8_e4m3fn``, ``torch.float8_e4m3fnuz``), else ``dtype``
  (``torch.bfloat16`` ...), else what aiter's file name says (``file_dtype``), else the build's
  default dtype (the fp8 kernel's e4m3 format for a blockscale list, which has only M, N, K). A
  row whose type the kernel does not run (int8 anywhere; fp8 for the matmul; bf16 for
  fp8_blockscale) is listed, never folded into another row: the int8 and fp8 rows of
  ``a8w8_untuned_gemm.csv`` are different GEMMs.
- ``outdtype`` must be what the kernel writes: the matmul writes C in its input dtype,
  fp8_blockscale writes bf16. A bf16 row with ``outdtype torch.float32`` is listed (no harness
  kernel writes fp32 from bf16 inputs), not tuned as bf16 out.
- ``bias``, ``scaleAB``, ``bpreshuffle`` true: listed (no bias epilogue, no scaled bf16 GEMM, B
  read as stored, not preshuffled).
- ``B`` (batched GEMMs) multiplies the shape's weight: neither harness kernel has a batched mode,
  so each row is tuned as one M x N x K GEMM weighted by B, and one line per file says so.
- ``layout`` (NN/NT/TN/TT) where given; otherwise ``NT``: aiter's GEMMs compute ``Y = X @ W^T``
  with X stored M x K and W stored N x K. fp8_blockscale has that layout built in (no layout).
- A row with the same shape as an earlier one adds its weight to it, with a line.
- aiter's a8w8 (non-blockscale) GEMMs scale per row and per column; tuned with fp8_blockscale
  they are block-scaled GEMMs of the same shapes, and one line per file says so.

Columns other than M, N and K are kept in ``Shape.extra`` (as written, stripped), so a tuned CSV
can carry them back. A malformed row is an error naming the file and line; a row no kernel here
can take is one line through ``warn`` naming the file and line and the reason.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Callable, Optional

from ..errors import HarnessError
from . import LAYOUTS, MATMUL, Problem, make_problem_shape

DEFAULT_LAYOUT = "NT"
TORCH_DTYPES = {
    "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.half": "fp16", "torch.float32": "fp32",
    "torch.float": "fp32", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "bfloat16": "bf16",
    "float16": "fp16", "float32": "fp32",
}
QUANT_DTYPES = {
    "torch.float8_e4m3fn": "fp8e4m3fn", "torch.float8_e4m3fnuz": "fp8e4m3fnuz", "fp8e4m3fn": "fp8e4m3fn",
    "fp8e4m3fnuz": "fp8e4m3fnuz", "torch.int8": "int8", "int8": "int8",
}
FLAG_COLUMNS = {
    "bias": "bias: the kernel has no bias epilogue",
    "scaleAB": "scaleAB: a scaled GEMM; the kernel takes no per-tensor scales",
    "bpreshuffle": "bpreshuffle: B preshuffled for aiter's own kernels; the harness reads B as stored",
}
TRUE = ("true", "1", "yes")


def _header(text: str):
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return number, [c.strip() for c in next(csv.reader([stripped]))]
    return None, []


def looks_like(text: str) -> bool:
    _, header = _header(text)
    return all(k in header for k in ("M", "N", "K"))


def output_dtype(problem: Problem, dtype: str) -> str:
    """What the kernel writes C as: bf16 for the fp8 and MXFP4 kernels, else the input dtype."""
    return "bf16" if all(d.startswith("fp8") or d == "mxfp4" for d in problem.dtypes) else dtype


def file_dtype(path: Path, default_dtype: str) -> str:
    """The element type of rows that name none, by aiter's file names: ``a8w8_blockscale*`` fp8
    (the build's fp8 format where it has one), other ``a8w8*`` int8 (aiter's a8w8 CK GEMMs take
    int8 unless ``q_dtype_w`` says fp8), ``a4w4*`` mxfp4 (a4w4_blockscale's dtype), ``bf16*`` bf16;
    any other name: the build's default dtype."""
    name = path.name.lower()
    if "a8w8_blockscale" in name:
        return default_dtype if default_dtype.startswith("fp8") else "fp8e4m3fn"
    if name.startswith("a8w8") or "_a8w8_" in name:
        return "int8"
    if name.startswith("a4w4") or "_a4w4_" in name:
        return "mxfp4"
    if name.startswith("bf16") or "_bf16_" in name:
        return "bf16"
    return default_dtype


def row_dtype(row: dict, default_dtype: str) -> tuple:
    """(harness dtype, None) of a row, or (None, why it has none the harness knows)."""
    quant = [(k, row[k]) for k in ("q_dtype_w", "q_dtype_a") if row.get(k)]
    names = {QUANT_DTYPES.get(v.lower()) for _, v in quant}
    if quant:
        if None in names:
            k, v = next((k, v) for k, v in quant if QUANT_DTYPES.get(v.lower()) is None)
            return None, "%s %s: no harness kernel runs that type" % (k, v)
        if len(names) > 1:
            return None, "q_dtype_a %s and q_dtype_w %s differ: no harness kernel mixes them" % (
                row["q_dtype_a"], row["q_dtype_w"])
        return names.pop(), None
    if row.get("dtype"):
        dtype = TORCH_DTYPES.get(row["dtype"].lower())
        if dtype is None:
            return None, "dtype %s: no harness kernel runs that type" % row["dtype"]
        return dtype, None
    return default_dtype, None


def row_reason(row: dict, dtype: str, problem: Problem) -> Optional[str]:
    """Why the kernel of ``problem`` cannot run this row as aiter means it, or None."""
    if dtype == "int8":
        return "%s (%s): no harness kernel runs %s GEMMs" % (
            dtype, row.get("q_dtype_w") or row.get("q_dtype_a") or "aiter's file name", dtype)
    if dtype not in problem.dtypes:
        hint = "; fp8 GEMMs: harness build fp8_blockscale" if dtype.startswith("fp8") else ""
        hint = "; MXFP4 GEMMs: harness build a4w4_blockscale" if dtype == "mxfp4" else hint
        return "%s: this kernel runs %s%s" % (dtype, ", ".join(problem.dtypes), hint)
    out = row.get("outdtype")
    if out:
        want = output_dtype(problem, dtype)
        got = TORCH_DTYPES.get(out.lower())
        if got != want:
            return "outdtype %s: this kernel writes C as %s from %s inputs" % (out, want, dtype)
    for column, why in FLAG_COLUMNS.items():
        if row.get(column, "").lower() in TRUE:
            return why
    return None


def read(path: Path, text: str, default_dtype: str, problem: Problem = MATMUL,
         warn: Optional[Callable[[str], None]] = None) -> list:
    """The shapes of an aiter untuned CSV for the kernel of ``problem``; every row not taken is
    one line through ``warn``. Raises HarnessError on a malformed row or when no row is left."""
    warn = warn or (lambda line: None)
    header_line, header = _header(text)
    if header_line is None:
        raise HarnessError("no shapes in the file", where=str(path))
    missing = [k for k in ("M", "N", "K") if k not in header]
    if missing:
        raise HarnessError("the header names no %s column (an aiter untuned CSV starts 'M,N,K')" %
                           ", ".join(missing), where="%s:%d" % (path, header_line))
    dupes = sorted({c for c in header if header.count(c) > 1})
    if dupes:
        raise HarnessError("column %s appears twice in the header" % ", ".join(dupes),
                           where="%s:%d" % (path, header_line))
    lines = text.splitlines()
    default_dtype = file_dtype(Path(path), default_dtype)
    kept, first_line, listed, batched, fp8_rowwise = {}, {}, 0, 0, False
    for number in range(header_line + 1, len(lines) + 1):
        line = lines[number - 1].strip()
        if not line or line.startswith("#"):
            continue
        where = "%s:%d" % (path, number)
        values = [v.strip() for v in next(csv.reader(io.StringIO(line)))]
        if len(values) != len(header):
            raise HarnessError("%d values for %d columns (%s)" % (len(values), len(header), ",".join(header)),
                               where=where)
        row = dict(zip(header, values))
        text_shape = "%sx%sx%s" % (row["M"], row["N"], row["K"])
        weight = _batch(row, where)
        dtype, why = row_dtype(row, default_dtype)
        why = why or row_reason(row, dtype, problem)
        layout = _layout(row, problem, where)
        if why is None and layout is None:
            why = "layout %s: this kernel has its layout built in (A M x K, B N x K)" % row["layout"]
        if why is not None:
            warn("%s: %s not tuned: %s" % (where, text_shape, why))
            listed += 1
            continue
        extra = tuple((k, v) for k, v in row.items() if k not in ("M", "N", "K"))
        shape = make_problem_shape(problem, {"M": row["M"], "N": row["N"], "K": row["K"]}, dtype, layout,
                                   weight=weight, extra=extra, where=where)
        batched += "B" in row
        fp8_rowwise = fp8_rowwise or (dtype.startswith("fp8") and "q_dtype_w" in row
                                      and "blockscale" not in path.name.lower())
        if shape in kept:
            warn("%s: %s is the shape of line %d (%s); its weight %g is added there" % (
                where, text_shape, first_line[shape], shape.id, weight))
            old = kept[shape]
            kept[shape] = make_problem_shape(problem, old.dim_values, old.dtype, old.layout,
                                             weight=old.weight + weight, extra=old.extra, where=where)
            continue
        kept[shape], first_line[shape] = shape, number
    if batched:
        warn("%s: %d rows carry a batch count B: no harness kernel has a batched mode, so each is tuned as "
             "one M x N x K GEMM weighted by B" % (path, batched))
    if fp8_rowwise:
        warn("%s: aiter's a8w8 GEMM scales per row and column; fp8_blockscale tunes these shapes with 1 x 128 "
             "and 128 x 128 block scales" % path)
    if not kept:
        if listed:
            raise HarnessError("no row of the CSV is one this kernel runs (%d rows listed above)" % listed,
                               where=str(path))
        raise HarnessError("the CSV has a header but no rows", where=str(path))
    return list(kept.values())


def _batch(row: dict, where: str) -> float:
    if "B" not in row:
        return 1.0
    try:
        b = int(row["B"])
    except ValueError:
        raise HarnessError("B=%r is not a whole number (the batch count)" % row["B"], where=where)
    if b <= 0:
        raise HarnessError("B=%d must be positive (the batch count)" % b, where=where)
    return float(b)


def _layout(row: dict, problem: Problem, where: str) -> Optional[str]:
    """The row's layout for the kernel; None where the kernel has its own and the row asks for another."""
    given = row.get("layout", "").upper()
    if not problem.layouts:
        return "" if given in ("", DEFAULT_LAYOUT) else None
    layout = given or DEFAULT_LAYOUT
    if layout not in LAYOUTS:
        raise HarnessError("layout %r is not one of %s" % (row["layout"], ", ".join(LAYOUTS)), where=where)
    return layout
