"""hipBLASLt profile logs (``HIPBLASLT_LOG_MASK=64`` or ``128``) -> weighted shapes.

A workload run with ``HIPBLASLT_LOG_MASK=64 HIPBLASLT_LOG_FILE=gemms.yaml`` writes one line per
distinct GEMM it called::

    - {function: matmul, M: 16032, N: 109, K: 16384, lda: 16384, ..., transA: T, transB: N,
       batch_count: 1, ..., a_type: bf16_r, b_type: bf16_r, c_type: bf16_r, d_type: bf16_r,
       ..., compute_type: c_f32_r, ..., call_count: 1}

Every GEMM is weighed the way hipBLASLt's tuning workflow keeps GEMMs: by its measured time times
``call_count`` where every line of the log carries that time (``us: ..`` or ``time_us: ..``, the
microseconds per call, as hipblaslt-bench reports them); where the log has no time (what
``HIPBLASLT_LOG_MASK=64`` writes), by its FLOPs times ``call_count`` (times ``batch_count``).
``Workload.rule`` names the rule used and the build says it. A share is that weight as a
percentage of the whole log. GEMMs are grouped by data types and transposes
(the group names read ``a/b/c/d/compute/transAtransB``, e.g. ``bf16_r/bf16_r/bf16_r/bf16_r/c_f32_r/TN``).
Those whose share is at or above ``thr`` percent are kept (the hipBLASLt tuning workflow's
``--thr``, default there 0.1 %). A line that cannot be read is reported with its line number and
skipped; it takes nothing else with it.

Layout. hipBLASLt is column-major: with ``transA: T`` the stored A is a K x M column-major
matrix, which is the M x K row-major A as written, our ``N``; with ``transA: N`` it is our ``T``.
B the same way. So hipBLASLt ``TN`` (the usual ``x @ W^T`` of a linear layer) is our ``NT``: the
harness kernel then reads A and B in the very order hipBLASLt does (both K-contiguous). M, N and
K stay as logged; the original ``transA``/``transB`` are kept in ``Shape.extra``.

Shape.weight is the number of M x N x K products the workload ran (``call_count`` times
``batch_count``): the weight of the call_count-weighted uplift. ``Shape.extra`` holds ``group``,
``calls``, ``share`` (percent), ``transA``, ``transB``, ``batch_count``, ``c_type``,
``compute_type`` and ``line`` (the first line the GEMM was logged on).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..errors import HarnessError
from . import make_shape, read_text

# hipBLASLt / rocBLAS type names -> the harness dtypes. Anything else is counted in the
# workload's total but cannot be tuned here (reported, kept out of the shapes).
TYPES = {"bf16_r": "bf16", "f16_r": "fp16", "f32_r": "fp32"}
TRANSPOSES = ("N", "T")
# Keys this reader puts in Shape.extra (report writers leave them out of tuned files).
EXTRA_KEYS = ("group", "calls", "share", "transA", "transB", "batch_count", "c_type", "compute_type", "line")
SUMMARY_COLUMNS = ["shape", "group", "calls", "share", "weight", "kept", "shape_id", "M", "N", "K",
                   "batch_count", "transA", "transB", "a_type", "b_type", "c_type", "d_type",
                   "compute_type", "flops", "line", "us"]
MAX_REPORTED = 20  # skipped lines printed one by one; the rest are counted
RULE_TIME = "measured time x calls (hipBLASLt's rule)"
RULE_FLOPS = "FLOPs x calls (the log has no measured time)"
TIME_KEYS = ("us", "time_us")

_ENTRY = re.compile(r"^\s*-\s*\{(.*)\}\s*$")
_OPENED = re.compile(r"^\s*-\s*\{")
_PAIR = re.compile(r"^\s*([A-Za-z_][\w]*)\s*:\s*(.*?)\s*$")


@dataclass
class Gemm:
    """One distinct GEMM of the log, its calls summed over every line that named it."""

    M: int
    N: int
    K: int
    batch_count: int
    transA: str
    transB: str
    a_type: str
    b_type: str
    c_type: str
    d_type: str
    compute_type: str
    calls: int
    line: int  # first line it appeared on
    share: float = 0.0  # percent of the log's weight (time x calls, else FLOPs x calls)
    kept: bool = False
    us: Optional[float] = None  # measured microseconds per call, where the log has them

    @property
    def key(self) -> tuple:
        return (self.M, self.N, self.K, self.batch_count, self.transA, self.transB, self.a_type,
                self.b_type, self.c_type, self.d_type, self.compute_type)

    @property
    def group(self) -> str:
        return "%s/%s/%s/%s/%s/%s%s" % (self.a_type, self.b_type, self.c_type, self.d_type,
                                        self.compute_type or "-", self.transA, self.transB)

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K * self.batch_count

    @property
    def contribution(self) -> int:
        return self.flops * self.calls

    @property
    def time_contribution(self) -> float:
        return (self.us or 0.0) * self.calls

    @property
    def dtype(self) -> Optional[str]:
        """The harness dtype, or None where the harness cannot run these types."""
        if self.a_type != self.b_type:
            return None
        return TYPES.get(self.a_type)

    @property
    def layout(self) -> str:
        return ("N" if self.transA == "T" else "T") + ("N" if self.transB == "T" else "T")

    @property
    def shape_text(self) -> str:
        text = "%dx%dx%d" % (self.M, self.N, self.K)
        return text if self.batch_count == 1 else "%s (batch %d)" % (text, self.batch_count)


@dataclass
class Workload:
    """A parsed log: every GEMM, the lines skipped, and the kept shapes for a threshold."""

    path: Path
    gemms: list = field(default_factory=list)  # [Gemm], largest share first
    skipped: list = field(default_factory=list)  # [(line number, why)]
    thr: float = 0.0
    shapes: list = field(default_factory=list)  # [Shape] kept, largest share first
    rule: str = RULE_FLOPS  # what a share is a share of

    @property
    def total(self) -> int:
        return sum(g.contribution for g in self.gemms)

    def summary(self):
        """The summary table (pandas DataFrame): one row per distinct GEMM, largest share first."""
        import pandas as pd

        rows = []
        for g in self.gemms:
            dtype = g.dtype
            try:
                shape_id = make_shape(g.M, g.N, g.K, dtype=dtype, layout=g.layout).id if dtype else ""
            except HarnessError:  # a dimension the harness refuses; reported when the shapes were made
                shape_id = ""
            rows.append({
                "shape": g.shape_text, "group": g.group, "calls": g.calls, "share": round(g.share, 6),
                "weight": g.calls * g.batch_count, "kept": g.kept,
                "shape_id": shape_id,
                "M": g.M, "N": g.N, "K": g.K, "batch_count": g.batch_count, "transA": g.transA,
                "transB": g.transB, "a_type": g.a_type, "b_type": g.b_type, "c_type": g.c_type,
                "d_type": g.d_type, "compute_type": g.compute_type, "flops": g.flops, "line": g.line, "us": g.us,
            })
        return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)

    def write_summary(self, path) -> Path:
        """Write the summary CSV (columns SUMMARY_COLUMNS; ``share`` in percent)."""
        path = Path(path)
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        self.summary().to_csv(path, index=False)
        return path


def looks_like(text: str) -> bool:
    """True when the text holds hipBLASLt profile lines (``- {function: matmul, ...}`` or
    ``- {..., transA: .., a_type: ..}``)."""
    for line in text.splitlines()[:200]:
        if _OPENED.match(line) and ("function:" in line or ("transA:" in line and "a_type:" in line)):
            return True
    return False


def parse(path: Path, text: str, thr: float = 0.0) -> Workload:
    """Every GEMM of the log and the lines that could not be read (never raises for a bad line;
    raises HarnessError only when no GEMM at all could be read)."""
    if thr < 0 or thr > 100:
        raise HarnessError("--thr is a percentage of the workload (time x calls, else FLOPs x calls), 0 to 100 "
                           "(got %g)" % thr)
    work = Workload(Path(path), thr=thr)
    found = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or line == "---":
            continue
        try:
            gemm = _parse_line(line, number)
        except _Skip as why:
            work.skipped.append((number, str(why)))
            continue
        if gemm is None:
            continue
        seen = found.get(gemm.key)
        if seen is None:
            found[gemm.key] = gemm
        else:
            if gemm.us is not None and seen.us is not None:  # mean time per call over both lines
                seen.us = (seen.us * seen.calls + gemm.us * gemm.calls) / (seen.calls + gemm.calls)
            elif gemm.us is None:
                seen.us = None
            seen.calls += gemm.calls
    if not found:
        detail = ""
        if work.skipped:
            detail = "; first problem at line %d: %s" % work.skipped[0]
        raise HarnessError("no GEMM could be read from this hipBLASLt log (expected lines like "
                           "'- {function: matmul, M: .., N: .., K: .., transA: T, transB: N, a_type: "
                           "bf16_r, ..., call_count: 1}' from HIPBLASLT_LOG_MASK=64 or 128)%s" % detail,
                           where=str(path))
    timed = all(g.us is not None for g in found.values())
    work.rule = RULE_TIME if timed else RULE_FLOPS
    weight = (lambda g: g.time_contribution) if timed else (lambda g: g.contribution)
    total = sum(weight(g) for g in found.values())
    work.gemms = sorted(found.values(), key=lambda g: (-weight(g), g.line))
    for g in work.gemms:
        g.share = 100.0 * weight(g) / total if total else 0.0
        g.kept = g.dtype is not None and g.share >= thr
    work.shapes = _shapes(work)
    return work


def load(path, thr: float = 0.0, summary_path=None) -> Workload:
    """Read a hipBLASLt log file; keep GEMMs whose share is >= ``thr`` percent; write the summary
    CSV when ``summary_path`` is given. The CLI's ``--thr`` and ``--summary`` map here."""
    path = Path(path)
    work = parse(path, read_text(path), thr)
    if summary_path:
        work.write_summary(summary_path)
    return work


def read(path: Path, text: str, default_dtype: str, thr: Optional[float] = None, summary_path=None,
         warn: Optional[Callable[[str], None]] = None) -> list:
    """The sources.read entry: the kept shapes; skipped lines and untunable groups go to ``warn``."""
    work = parse(path, text, 0.0 if thr is None else thr)
    report(work, warn)
    if summary_path:
        work.write_summary(summary_path)
    if not work.shapes:
        raise HarnessError("no GEMM of the log is kept: none has bf16/fp16/fp32 inputs with a share of "
                           "at least %g %% (lower --thr?)" % work.thr, where=str(path))
    return work.shapes


def report(work: Workload, warn: Optional[Callable[[str], None]]) -> None:
    if warn is None:
        return
    warn("%s: --thr %g %% is a share of the workload's %s" % (work.path, work.thr, work.rule))
    for number, why in work.skipped[:MAX_REPORTED]:
        warn("%s:%d: skipped: %s" % (work.path, number, why))
    if len(work.skipped) > MAX_REPORTED:
        warn("%s: %d more lines skipped" % (work.path, len(work.skipped) - MAX_REPORTED))
    untunable = {}
    for g in work.gemms:
        if g.dtype is None:
            count, share = untunable.get(g.group, (0, 0.0))
            untunable[g.group] = (count + 1, share + g.share)
    for group, (count, share) in untunable.items():
        warn("%s: %d GEMM(s) of group %s (%.2f %% of the workload) have types the harness does not "
             "tune (it tunes %s with equal a_type and b_type); left out" %
             (work.path, count, group, share, ", ".join(TYPES)))


class _Skip(Exception):
    pass


def _parse_line(line: str, number: int) -> Optional[Gemm]:
    match = _ENTRY.match(line)
    if not match:
        if _OPENED.match(line):
            raise _Skip("the line is cut off (no closing '}')")
        raise _Skip("not a hipBLASLt profile line (expected '- {function: matmul, ...}' as written with "
                    "HIPBLASLT_LOG_MASK=64 or 128)")
    fields = {}
    for part in match.group(1).split(","):
        if not part.strip():
            continue
        pair = _PAIR.match(part)
        if not pair:
            raise _Skip("cannot read %r as 'key: value'" % part.strip())
        fields[pair.group(1)] = pair.group(2)
    function = fields.get("function", "matmul")
    if function != "matmul":
        raise _Skip("function %r is not a GEMM the harness tunes (matmul)" % function)
    missing = [k for k in ("M", "N", "K", "transA", "transB", "a_type") if k not in fields]
    if missing:
        raise _Skip("missing %s" % ", ".join(missing))
    dims = [_positive(fields, k) for k in ("M", "N", "K")]
    batch = _positive(fields, "batch_count", 1)
    calls = _positive(fields, "call_count", 1)
    trans = []
    for key in ("transA", "transB"):
        value = fields[key].upper()
        if value not in TRANSPOSES:
            raise _Skip("%s: %r is not N or T" % (key, fields[key]))
        trans.append(value)
    a_type = fields["a_type"]
    us = None
    for key in TIME_KEYS:
        if key in fields:
            try:
                us = float(fields[key])
            except ValueError:
                raise _Skip("%s: %r is not a time in microseconds" % (key, fields[key]))
            if not us > 0:
                raise _Skip("%s: %r must be a positive time" % (key, fields[key]))
            break
    return Gemm(*dims, batch_count=batch, transA=trans[0], transB=trans[1], a_type=a_type,
                b_type=fields.get("b_type", a_type), c_type=fields.get("c_type", a_type),
                d_type=fields.get("d_type", fields.get("c_type", a_type)),
                compute_type=fields.get("compute_type", ""), calls=calls, line=number, us=us)


def _positive(fields: dict, key: str, default: Optional[int] = None) -> int:
    if key not in fields:
        return default
    text = fields[key]
    try:
        value = int(text)
    except ValueError:
        raise _Skip("%s: %r is not a whole number" % (key, text))
    if value <= 0:
        raise _Skip("%s: %d must be positive" % (key, value))
    return value


def _shapes(work: Workload) -> list:
    merged = {}  # shape id -> [shape args, weight, extra]; two logged GEMMs may map to one shape
    for g in work.gemms:
        if not g.kept:
            continue
        try:
            shape = make_shape(g.M, g.N, g.K, dtype=g.dtype, layout=g.layout, where="%s:%d" % (work.path, g.line))
        except HarnessError as exc:
            g.kept = False
            work.skipped.append((g.line, str(exc).split(": ", 1)[-1]))
            continue
        weight = g.calls * g.batch_count
        if shape.id in merged:
            merged[shape.id][1] += weight
            extra = dict(merged[shape.id][2])
            extra["calls"] += g.calls
            extra["share"] = round(extra["share"] + g.share, 6)
            merged[shape.id][2] = tuple(extra.items())
            continue
        extra = (("group", g.group), ("calls", g.calls), ("share", round(g.share, 6)), ("transA", g.transA),
                 ("transB", g.transB), ("batch_count", g.batch_count), ("c_type", g.c_type),
                 ("compute_type", g.compute_type), ("line", g.line))
        merged[shape.id] = [shape, weight, extra]
    return [make_shape(s.M, s.N, s.K, dtype=s.dtype, layout=s.layout, weight=w, extra=extra)
            for s, w, extra in merged.values()]
