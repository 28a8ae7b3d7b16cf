"""Bring remote results home and merge them into the local results file, losing nothing."""

from __future__ import annotations

import csv
import os
import tempfile
import time
from pathlib import Path

from ..push import remote_results_dir


def fetch_and_merge(transport, target: str, kernel: str, local: Path) -> int:
    """One tar stream from the remote; rows not yet in ``local`` are appended. Returns new rows."""
    rel = remote_results_dir(target, kernel)
    with tempfile.TemporaryDirectory(prefix="harness-fetch-") as tmp:
        if transport.fetch_tree(rel, Path(tmp)) == 0:
            return 0
        fetched = Path(tmp) / rel / "results.csv"
        if not fetched.exists():
            return 0
        return merge_results(fetched, local)


def merge_results(fetched: Path, local: Path) -> int:
    local.parent.mkdir(parents=True, exist_ok=True)
    with open(fetched, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return 0
    header, body = rows[0], rows[1:]
    if not local.exists() or local.stat().st_size == 0:
        _write(local, header, body)
        return len(body)
    with open(local, newline="") as f:
        existing = list(csv.reader(f))
    if existing[0] != header:
        # Different columns: keep both files whole rather than mixing or dropping rows.
        aside = local.with_name("results.%s.csv" % time.strftime("%Y%m%d-%H%M%S"))
        os.replace(local, aside)
        _write(local, header, body)
        return len(body)
    seen = {tuple(r) for r in existing[1:]}
    new = [r for r in body if tuple(r) not in seen and len(r) == len(header)]
    if new:
        _write(local, header, existing[1:] + new)
    return len(new)


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
    from .. import ui
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
