"""Bring remote results home and merge them into the local results file, losing nothing."""

from __future__ import annotations

import csv
import io
import os
import tempfile
import time
from pathlib import Path
from typing import Optional

from rich.markup import escape

from .. import ui
from ..push import remote_results_dir
from ..report.common import safe_cell
from ..report.results_reader import Known, bundle_of_results, read_results


def fetch_and_merge(transport, target: str, kernel: str, local: Path) -> int:
    """One tar stream from the remote; rows not yet in ``local`` are appended. Returns new rows."""
    rel = remote_results_dir(target, kernel)
    with tempfile.TemporaryDirectory(prefix="harness-fetch-") as tmp:
        if transport.fetch_tree(rel, Path(tmp)) == 0:
            return 0
        fetched = Path(tmp) / rel / "results.csv"
        if not fetched.exists():
            return 0
        label = "%s:%s/results.csv" % (getattr(transport, "label", target), rel)
        return merge_results(fetched, local, label=label)


def merge_results(fetched: Path, local: Path, label: Optional[str] = None) -> int:
    """Append the rows of ``fetched`` (results a remote wrote) that ``local`` does not hold yet.
    Every fetched row is checked first (results_reader; against the bundle's variants and shapes
    where ``local`` is the project's results file): a row that fails is not merged but kept in
    ``set_aside.csv`` beside ``local`` with its reason, and one line says how many rows were read,
    kept and set aside. Returns the number of rows appended."""
    local.parent.mkdir(parents=True, exist_ok=True)
    bundle = bundle_of_results(local)
    checked = read_results(fetched, Known.from_bundle(bundle) if bundle else None, label=label)
    if checked.set_aside:
        keep_set_aside(checked, local.parent / SET_ASIDE_FILE)
        ui.console.print("[yellow]%s[/]" % escape(checked.summary()), soft_wrap=True)
    if not checked.header:
        return 0
    header, body = checked.header, checked.rows
    if not local.exists() or local.stat().st_size == 0:
        _write(local, header, body)
        return len(body)
    with open(local, newline="") as f:
        existing = list(csv.reader(f))
    if existing[:1] != [header]:
        # Different columns: keep both files whole rather than mixing or dropping rows.
        aside = local.with_name("results.%s.csv" % time.strftime("%Y%m%d-%H%M%S"))
        os.replace(local, aside)
        _write(local, header, body)
        return len(body)
    seen = {tuple(r) for r in existing[1:]}
    new = [r for r in body if tuple(r) not in seen]
    if new:
        _write(local, header, existing[1:] + new)
    return len(new)


SET_ASIDE_FILE = "set_aside.csv"  # beside results.csv: fetched rows that were not merged, and why


def keep_set_aside(checked, path: Path) -> None:
    """Append the rows ``checked`` set aside to ``path`` (source, line, reason, the row as read),
    each once; cells are escaped against spreadsheet formulas. A last line cut short is left out:
    the next fetch brings it whole."""
    rows = [[checked.path, str(s.line), s.reason, _csv_line(s.fields)] for s in checked.set_aside
            if not s.reason.startswith("cut short")]
    if not rows:
        return
    existing = []
    if path.exists():
        with open(path, newline="", errors="replace") as f:
            existing = list(csv.reader(f))[1:]
    seen = {tuple(r[2:]) for r in existing}
    fresh = [r for r in ([safe_cell(c) for c in row] for row in rows) if tuple(r[2:]) not in seen]
    if fresh:
        _write(path, ["source", "line", "reason", "row"], existing + fresh)


def _csv_line(fields: list) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([f.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                                                 for f in fields])
    return buf.getvalue()


def _write(path: Path, header: list, body: list) -> None:
    tmp = path.with_name(path.name + ".tmp%d" % os.getpid())
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(body)
    os.replace(tmp, path)


def fetch_target(target, kernel: str, local: Path) -> int:
    """Fetch from every host of the target (one tar stream each); an unreachable host is
    skipped with a warning while another answers, so what is reachable still comes home."""
    from ..errors import HarnessError
    from . import for_hosts

    new, failures = 0, []
    transports = for_hosts(target)
    for transport in transports:
        try:
            transport.open()
            new += fetch_and_merge(transport, target.name, kernel, local)
        except HarnessError as exc:
            failures.append(str(exc))
            if len(transports) > 1:  # one host of a fleet; a single host's error is the command's one line
                ui.console.print("[yellow]%s[/]" % exc, markup=True)
        finally:
            transport.close()
    if failures and len(failures) == len(transports):
        raise HarnessError(failures[0])
    return new
