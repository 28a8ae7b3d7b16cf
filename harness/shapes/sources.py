"""Shapes file formats, detected from the content or named with --shapes-format.

Formats (one module each):
  list       one MxNxK[:dtype[:layout]] per line or comma-separated; '#' starts a comment
  tune_gemm  ROCm tune_gemm.py YAML list: - {M: .., N: .., K: .., rowMajorA: T, rowMajorB: N}
             (harness/shapes/tune_gemm_yaml.py)
  aiter_csv  aiter untuned CSV: M,N,K header plus any columns, kept in Shape.extra; dtype and
             quant columns pick the dtype, B weighs the shape, rows the kernel cannot run are
             listed one line each (harness/shapes/aiter_csv.py)
  hipblaslt  hipBLASLt log of HIPBLASLT_LOG_MASK=64/128 lines, weighted by FLOPs x call_count,
             cut at --thr percent; optional summary CSV (harness/shapes/hipblaslt_log.py)
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..errors import HarnessError
from . import MATMUL, Problem, dedupe, parse_shape, read_text

FORMATS = ("auto", "list", "tune_gemm", "aiter_csv", "hipblaslt")


def detect(text: str) -> str:
    """The format of a shapes file from its content (never 'auto')."""
    from . import aiter_csv, hipblaslt_log, tune_gemm_yaml

    if hipblaslt_log.looks_like(text):
        return "hipblaslt"
    if tune_gemm_yaml.looks_like(text):
        return "tune_gemm"
    if aiter_csv.looks_like(text):
        return "aiter_csv"
    return "list"


def read(path: Path, fmt: str, default_dtype: str, thr: Optional[float] = None, summary_path=None,
         warn: Optional[Callable[[str], None]] = None, problem: Problem = MATMUL) -> list:
    """The shapes of a file. ``thr`` (percent) and ``summary_path`` apply to hipBLASLt logs only;
    ``warn`` receives one line per skipped log line or CSV row (default: printed on stderr). A kernel whose
    problem is not M, N, K (``problem``) reads lists only: the other formats hold GEMMs."""
    path = Path(path)
    if fmt not in FORMATS:
        raise HarnessError("unknown shapes format %r (known: %s)" % (fmt, ", ".join(FORMATS)))
    text = read_text(path)
    if problem.dims != MATMUL.dims:
        if fmt not in ("auto", "list"):
            raise HarnessError("shapes format %s holds M, N, K GEMMs; this kernel's shapes are %s: write a list"
                               % (fmt, problem.syntax()), where=str(path))
        fmt = "list"
    if fmt == "auto":
        fmt = detect(text)
    if fmt == "list":
        return read_list(path, text, default_dtype, problem)
    if fmt == "tune_gemm":
        from . import tune_gemm_yaml

        return tune_gemm_yaml.read(path, text, default_dtype)
    if fmt == "aiter_csv":
        from . import aiter_csv

        return aiter_csv.read(path, text, default_dtype, problem=problem,
                              warn=_default_warn if warn is None else warn)
    from . import hipblaslt_log

    return hipblaslt_log.read(path, text, default_dtype, thr=thr, summary_path=summary_path,
                              warn=_default_warn if warn is None else warn)


def _default_warn(message: str) -> None:
    from ..ui import console

    console.print("warning: %s" % message, markup=False, highlight=False, soft_wrap=True, style="yellow")


def read_list(path: Path, text: str, default_dtype: str, problem: Problem = MATMUL) -> list:
    shapes = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        for part in line.replace(",", " ").split():
            shapes.append(parse_shape(part, default_dtype, where="%s:%d" % (path, number), problem=problem))
    if not shapes:
        raise HarnessError("no shapes in the file", where=str(path))
    return dedupe(shapes)
