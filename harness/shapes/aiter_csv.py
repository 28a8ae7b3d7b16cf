"""Shapes from the untuned CSV that aiter / CK GEMM tuners read (``M,N,K`` plus any columns)::

    M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle
    1, 1280, 8192, False, torch.bfloat16, torch.bfloat16, False, False

Columns other than M, N and K are kept in ``Shape.extra`` (as written, stripped), so a tuned
CSV can carry them back. A ``dtype`` column (``torch.bfloat16``, ``torch.float16``,
``torch.float32`` or a harness name) sets the dtype; otherwise the default dtype is used. A
``layout`` column (NN/NT/TN/TT) sets the layout; otherwise it is ``NT``: aiter's GEMMs compute
``Y = X @ W^T`` with X stored M x K and W stored N x K, which is our ``NT``.

A malformed row is an error naming the file and line.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..errors import HarnessError
from . import DTYPES, LAYOUTS, dedupe, make_shape

DEFAULT_LAYOUT = "NT"
TORCH_DTYPES = {
    "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.half": "fp16", "torch.float32": "fp32",
    "torch.float": "fp32", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "bfloat16": "bf16",
    "float16": "fp16", "float32": "fp32",
}


def _header(text: str):
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return number, [c.strip() for c in next(csv.reader([stripped]))]
    return None, []


def looks_like(text: str) -> bool:
    _, header = _header(text)
    return all(k in header for k in ("M", "N", "K"))


def read(path: Path, text: str, default_dtype: str) -> list:
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
    shapes = []
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
        dtype = default_dtype
        if "dtype" in row:
            dtype = TORCH_DTYPES.get(row["dtype"].lower())
            if dtype is None:
                raise HarnessError("dtype %r is not one the harness runs (%s)" % (row["dtype"], ", ".join(DTYPES)),
                                   where=where)
        layout = row.get("layout", DEFAULT_LAYOUT).upper() or DEFAULT_LAYOUT
        if layout not in LAYOUTS:
            raise HarnessError("layout %r is not one of %s" % (row["layout"], ", ".join(LAYOUTS)), where=where)
        extra = tuple((k, v) for k, v in row.items() if k not in ("M", "N", "K"))
        shapes.append(make_shape(row["M"], row["N"], row["K"], dtype=dtype, layout=layout, extra=extra,
                                 where=where))
    if not shapes:
        raise HarnessError("the CSV has a header but no rows", where=str(path))
    return dedupe(shapes)
