"""The one reader of results CSVs on the host: every row is untrusted input.

A results file comes from an agent, and an agent runs on a machine the host does not control: a
board, a GPU node, a cluster. So every row is checked before anything ranks it, picks a winner
from it or writes it into a tuned file:

* the file: a header naming ``schema_version``, ``variant_id``, ``shape_id`` and ``status``, no
  column twice, parseable CSV; otherwise the whole file is refused with one line (file:line);
* each row: as many fields as the header, a line that ends (a last line cut short is not a row),
  UTF-8, a known ``schema_version`` and ``status``, ids and device names in a plain alphabet,
  numbers in numeric columns (dimensions whole and >= 1), a timestamp, and for ``ok`` rows a
  finite positive time, TFLOP/s and error;
* against the bundle (``Known``: every variant and shape the host built for this target and
  kernel, kept in ``build/<target>/<kernel>/known.json`` across rebuilds and tune rounds): the
  variant and shape exist, and the row's config, dimensions, dtype and layout are theirs.

A row that fails a check is set aside with a one-line reason; ``rows kept + rows set aside ==
rows read`` always holds, and ``ResultsFile.summary()`` says so. Nothing is dropped silently: the
local file keeps what it holds, and rows fetched from a remote that are set aside go to
``set_aside.csv`` next to the results (transport/fetch.py: merge_results).

Older schemas read with the columns they lack empty (``host``, ``estimator``, ``time_ns``...).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from remote_agent.contract import (CONFIG_PREFIX, COUNTER_PREFIX, FIXED_COLUMNS, MATMUL_DIMS, OK,
                                   READABLE_RESULTS_SCHEMAS, STATUSES)

from ..bundle import KNOWN_FILE, read_known
from ..errors import HarnessError

REQUIRED = ("schema_version", "variant_id", "shape_id", "status")
# ids, devices: what agents write (v0123456789, lib:openblas:fp32, 64x64x64_fp16_NT, cuda:0)
PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:+-]{0,199}$")
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
INTEGER = re.compile(r"^[+-]?\d{1,30}$")
WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")  # config values that are names (True, none, crash)
# the lone surrogates that "surrogateescape" decoding leaves for bytes that are not UTF-8
NOT_UTF8 = re.compile("[\udc80-\udcff]")
# numeric columns; the error figures may be nan/inf on a wrong answer, the others are finite
NUMBERS = ("time_ns", "time_ns_median", "time_ns_min", "time_ns_p20", "time_ns_p80", "iterations",
           "samples", "noise", "preempted", "pinned_cpu", "clock_mhz_before", "clock_mhz_after", "remeasured",
           "tflops", "gbps", "rel_err", "max_abs_err", "err_ratio")
ERRORS = ("rel_err", "max_abs_err", "err_ratio")
OK_NEEDS = ("time_ns_median", "tflops", "rel_err")  # besides a deciding time


@dataclass
class SetAside:
    """A row that was not kept: its line in the file, why, and its fields as read."""

    line: int
    reason: str
    fields: list


@dataclass
class Known:
    """What the host built for one target and kernel: variant id -> config, shape id -> its
    dims, dtype and layout. ``source`` names where it was read (for messages)."""

    variants: dict = field(default_factory=dict)
    shapes: dict = field(default_factory=dict)
    source: str = ""

    @staticmethod
    def from_manifest_data(data: dict) -> "Known":
        """The variants (built, failed and pruned), library rows and shapes of one manifest."""
        known = Known()
        for v in data.get("variants") or []:
            known.variants[str(v["id"])] = dict(v.get("config") or {})
        for p in data.get("pruned") or []:
            known.variants.setdefault(str(p["variant"]), dict(p.get("config") or {}))
        library = data.get("library") or {}
        for name in (library if isinstance(library, (dict, list, tuple)) else []):
            known.variants.setdefault("lib:%s" % name, {})
        for s in data.get("shapes") or []:
            known.shapes[str(s["id"])] = {"dims": dict(s.get("dims") or {}), "dtype": s.get("dtype", ""),
                                          "layout": s.get("layout") or ""}
        return known

    def update(self, other: "Known") -> None:
        self.variants.update(other.variants)
        self.shapes.update(other.shapes)

    @staticmethod
    def from_bundle(bundle: Path) -> Optional["Known"]:
        """The bundle folder's ledger (bundle.KNOWN_FILE) and its current ``manifest.json``,
        merged; None where neither exists (then rows are checked for form only)."""
        bundle = Path(bundle)
        known, found = Known(source=str(bundle / "manifest.json")), False
        if (bundle / KNOWN_FILE).is_file():
            ledger = read_known(bundle)
            known.variants.update(ledger["variants"])
            known.shapes.update(ledger["shapes"])
            found = True
        if (bundle / "manifest.json").is_file():
            try:
                known.update(Known.from_manifest_data(json.loads((bundle / "manifest.json").read_text())))
                found = True
            except (ValueError, KeyError, TypeError, AttributeError):
                pass  # a broken manifest is reported by whoever runs it
        return known if found else None


def bundle_of_results(results: Path) -> Optional[Path]:
    """``<root>/build/<target>/<kernel>`` for ``<root>/results/<target>/<kernel>/results.csv``
    (run.local_results_path's layout); None for a results file kept elsewhere."""
    results = Path(results)
    parts = results.parent.parts
    if len(parts) < 3 or parts[-3] != "results":
        return None
    root = results.parent.parent.parent.parent
    return root / "build" / parts[-2] / parts[-1]


@dataclass
class ResultsFile:
    """A results file as read: its header, the rows kept (lists of strings, in file order, with
    their line numbers) and the rows set aside."""

    path: str
    header: list
    rows: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    set_aside: list = field(default_factory=list)
    checked_against: str = ""  # the manifest rows were checked against ("" when none was found)

    @property
    def read(self) -> int:
        return len(self.rows) + len(self.set_aside)

    def summary(self) -> str:
        """One line: rows read, kept, set aside, and why (each reason's count and first line)."""
        text = "%s: %d rows read, %d kept, %d set aside" % (self.path, self.read, len(self.rows), len(self.set_aside))
        if self.set_aside:
            by_kind = {}
            for s in self.set_aside:
                kind = s.reason.split(": ", 1)[0]
                by_kind.setdefault(kind, []).append(s)
            text += " (%s)" % "; ".join("%d %s, first at line %d: %s" % (
                len(v), k, v[0].line, v[0].reason.split(": ", 1)[-1]) for k, v in by_kind.items())
        if not self.checked_against and self.read:
            text += "; no bundle manifest here, so variants and shapes were not checked"
        return text

    def dicts(self) -> list:
        return [dict(zip(self.header, r)) for r in self.rows]

    def frame(self):
        """The kept rows as a pandas frame, every fixed column there (those the file lacks empty),
        in the contract's order: fixed columns (the file's dimensions in place of M, N, K), then
        config, counter and any other columns."""
        import pandas as pd

        header = canonical_header(self.header)
        index = {name: i for i, name in enumerate(self.header)}
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        for row in self.rows:
            writer.writerow([row[index[c]] if c in index else "" for c in header])
        buf.seek(0)
        # low_memory=False: one pass (a big file read in chunks gets mixed column types)
        frame = pd.read_csv(buf, dtype={"variant_id": str, "shape_id": str, "device": str}, low_memory=False)
        for col in header:
            if col not in index:
                frame[col] = None
        return frame


def dims_of(header: list) -> list:
    """The problem dimension columns of a header: those between ``shape_id`` and ``dtype`` (where
    results_header puts them), else M, N, K where present."""
    if "shape_id" in header and "dtype" in header and header.index("shape_id") < header.index("dtype"):
        return header[header.index("shape_id") + 1:header.index("dtype")]
    return [c for c in MATMUL_DIMS if c in header]


def canonical_header(header: list) -> list:
    fixed = list(FIXED_COLUMNS)
    at = fixed.index("M")
    fixed[at:at + len(MATMUL_DIMS)] = dims_of(header)
    rest = [c for c in header if c not in fixed]
    return (fixed + [c for c in rest if c.startswith(CONFIG_PREFIX)] + [c for c in rest if c.startswith(COUNTER_PREFIX)]
            + [c for c in rest if not c.startswith((CONFIG_PREFIX, COUNTER_PREFIX))])


def read_results(path, known: Optional[Known] = None, label: Optional[str] = None) -> ResultsFile:
    """Read and check a results file (see the module's docstring). A file that cannot be read as a
    results CSV at all is a HarnessError naming file:line; bad rows are set aside, not raised.
    ``label``: how messages name the file (e.g. HOST:PATH for a fetched copy); default its path."""
    path = Path(path)
    name = label or str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise HarnessError("cannot read results: %s" % (exc.strerror or exc), where=name)
    text = data.decode("utf-8", errors="surrogateescape")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise HarnessError("malformed results CSV: %s" % exc, where="%s:1" % name)
    if header is None:
        return ResultsFile(name, [])
    check_header(header, name)
    out = ResultsFile(name, header, checked_against=known.source if known else "")
    checker = RowChecker(header, known)
    torn = bool(text) and not text.endswith("\n")
    last_line = text.count("\n") + (1 if torn else 0)
    while True:
        line = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise HarnessError("malformed results CSV: %s" % exc, where="%s:%d" % (name, reader.line_num))
        if not fields:
            continue  # a blank line is no row
        reason = "cut short: the last line has no end (written while it was fetched?)" \
            if torn and reader.line_num == last_line else checker.problem(fields)
        if reason:
            out.set_aside.append(SetAside(line, reason, fields))
        else:
            out.rows.append(fields)
            out.lines.append(line)
    return out


def check_header(header: list, path) -> None:
    """A header this harness can read, or one line naming the file."""
    where = "%s:1" % path
    missing = [c for c in REQUIRED if c not in header]
    if header[:1] != ["schema_version"] or missing:
        raise HarnessError("results written by another schema version (this harness reads %s; %s)" % (
            ", ".join(map(str, READABLE_RESULTS_SCHEMAS)),
            "the header lacks %s" % ", ".join(missing) if missing else "schema_version is not the first column"),
            where=where)
    seen = set()
    for name in header:
        if name in seen:
            raise HarnessError("column %r twice in the header" % _short(name), where=where)
        if not name or not PLAIN.match(name):
            raise HarnessError("column name %r is not letters, digits and _.:+- (starting with a letter, digit or _)" % _short(name), where=where)
        seen.add(name)


class RowChecker:
    """Checks one row of a given header at a time; ``problem(fields)`` is the reason to set it
    aside, or "" to keep it."""

    def __init__(self, header: list, known: Optional[Known]):
        self.header = header
        self.index = {name: i for i, name in enumerate(header)}
        self.dims = dims_of(header)
        self.numbers = [c for c in NUMBERS if c in self.index] + [c for c in header if c.startswith(COUNTER_PREFIX)]
        self.configs = [c for c in header if c.startswith(CONFIG_PREFIX)]
        self.known = known

    def problem(self, fields: list) -> str:
        if len(fields) != len(self.header):
            return "wrong field count: %d fields, the header has %d" % (len(fields), len(self.header))
        row = dict(zip(self.header, fields))
        for check in (self._text, self._ids, self._numbers, self._ok_row, self._configs, self._against_bundle):
            reason = check(row)
            if reason:
                return reason
        return ""

    def _text(self, row: dict) -> str:
        for name, value in row.items():
            if NOT_UTF8.search(value):
                return "not UTF-8: column %s holds bytes that are not UTF-8" % name
        return ""

    def _ids(self, row: dict) -> str:
        schema = row["schema_version"].strip()
        if not INTEGER.match(schema) or int(schema) not in READABLE_RESULTS_SCHEMAS:
            return "unknown schema_version: %r (this harness reads %s)" % (
                _short(schema), ", ".join(map(str, READABLE_RESULTS_SCHEMAS)))
        for name in ("variant_id", "shape_id") + (("device",) if "device" in row else ()):
            if not PLAIN.match(row[name]):
                return "bad %s: %r is not 1 to 200 letters, digits and _.:+- (starting with a letter, digit or _)" % (name, _short(row[name]))
        if row["status"] not in STATUSES:
            return "unknown status: %r (one of %s)" % (_short(row["status"]), ", ".join(STATUSES))
        if "timestamp" in row and row["timestamp"] and not TIMESTAMP.match(row["timestamp"]):
            return "bad timestamp: %r is not YYYY-MM-DDTHH:MM:SS" % _short(row["timestamp"])
        return ""

    def _numbers(self, row: dict) -> str:
        for name in self.dims:
            text = row[name].strip()
            if not INTEGER.match(text) or not 1 <= int(text) <= 2 ** 31 - 1:
                return "bad dimension: %s=%r is not a whole number from 1 to 2^31-1" % (name, _short(row[name]))
        for name in self.numbers:
            text = row[name].strip()
            if not text:
                continue
            try:
                value = float(text)
            except ValueError:
                return "not a number: %s=%r" % (name, _short(row[name]))
            if not math.isfinite(value) and name not in ERRORS:
                return "not a finite number: %s=%r" % (name, _short(row[name]))
        return ""

    def _ok_row(self, row: dict) -> str:
        if row["status"] != OK:
            return ""
        deciding = row.get("time_ns", "").strip() or row.get("time_ns_median", "").strip()
        if not deciding or not float(deciding) > 0:
            return "ok row without a time: time_ns %r" % _short(deciding)
        for name in OK_NEEDS:
            text = row.get(name, "").strip()
            if not text or not math.isfinite(float(text)):
                return "ok row without %s: %r" % (name, _short(text))
        return ""

    def _configs(self, row: dict) -> str:
        for name in self.configs:
            text = row[name].strip()
            if text and not (INTEGER.match(text) or WORD.match(text)):
                return "bad config value: %s=%r is not a whole number or a word" % (name, _short(row[name]))
        if row["variant_id"].startswith("lib:") and any(row[c].strip() for c in self.configs):
            return "library row with a config: %s" % row["variant_id"]
        return ""

    def _against_bundle(self, row: dict) -> str:
        if self.known is None:
            return ""
        vid, sid = row["variant_id"], row["shape_id"]
        if vid not in self.known.variants:
            return "unknown variant: %r was not built for this target and kernel" % _short(vid)
        if sid not in self.known.shapes:
            return "unknown shape: %r is not a shape of the bundle" % _short(sid)
        config = self.known.variants[vid]
        for name in self.configs:
            want = config.get(name[len(CONFIG_PREFIX):])
            if row[name].strip() != ("" if want is None else str(want)):
                return "config not the variant's: %s=%r, variant %s has %r" % (
                    name, _short(row[name]), vid, "" if want is None else want)
        shape = self.known.shapes[sid]
        for name in self.dims:
            if str(shape["dims"].get(name)) != row[name].strip():
                return "dimensions not the shape's: %s=%r, shape %s has %s" % (
                    name, _short(row[name]), sid, shape["dims"].get(name))
        for name in ("dtype", "layout"):
            if name in row and row[name] != (shape[name] or ""):
                return "%s not the shape's: %r, shape %s has %r" % (name, _short(row[name]), sid, shape[name])
        return ""


def _short(text, limit: int = 40) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."
