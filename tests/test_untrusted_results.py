"""Results are untrusted input (issue 44, defect 5): a remote that writes rows for variants or
shapes the host never built, configs that are not the variant's, garbage numbers, extra columns,
a torn last line or spreadsheet formulas gets none of them into the winners or the tuned files,
and every row read is either kept or set aside with a reason (kept + set aside == read, printed).

Each test plants a hostile results file for real (on the remote of a loopback sshd, or in the
local results folder) and runs the real CLI."""

import csv
import io
import json
import re

import pandas as pd
import pytest

from tests.conftest import ANSWERS_ONLY

FORMULA = "=cmd|' /C calc'!A0"
NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _read(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


def _line(header, row):
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([row.get(c, "") for c in header])
    return buf.getvalue()


def _hostile_lines(header, good):
    """Seven rows a hostile remote writes, each faster than anything measured; every one must be
    set aside. The first six are whole lines, the seventh is cut short (no newline)."""
    fast = dict(good, time_ns="1", time_ns_median="1", time_ns_min="1", tflops="9999")
    lines = [
        _line(header, dict(fast, variant_id="v0000000bad", message=FORMULA)),  # never built
        _line(header, dict(fast, shape_id="4096x4096x4096_fp32_NN", M="4096", N="4096", K="4096")),  # no such shape
        _line(header, dict(fast, cfg_MR="1.5")),  # not a whole number
        _line(header, dict(fast, cfg_MR="64")),  # a whole number, but not this variant's config
        _line(header, dict(good, time_ns="abc")),  # not a number
        _line(header, fast).rstrip("\n") + ",extra,columns\n",  # more fields than the header
        _line(header, fast)[:-30],  # the last line, cut short
    ]
    return "".join(lines)


def _winners(ws, target):
    best = json.loads((ws.path / "tuned" / target / "matmul.json").read_text())["best"]
    return {b["shape"]: b for b in best}


def _no_formula_cells(folder, pattern="*.csv"):
    """No cell of any CSV under ``folder`` starts like a spreadsheet formula, numbers aside."""
    for path in folder.rglob(pattern):
        with open(path, newline="") as f:
            for row in csv.reader(f):
                for cell in row:
                    assert not (cell[:1] in ("=", "+", "-", "@", "\t", "\r") and not NUMBER.match(cell)), (path, cell)


def _add_box(ws):
    """A native-arch target "box" reached over the loopback sshd, with its own workdir."""
    (ws.path / "targets.yaml").write_text(ws.targets_yaml() + "box:\n  arch: native\n  profiler: wallclock\n"
                                          "  workdir: %s\n  ssh:\n%s" % (ws.path / "box", ws.sshd.target_ssh_yaml()))


@pytest.mark.slow
def test_hostile_remote_rows_are_set_aside_on_fetch_not_merged(workspace):
    ws = workspace
    _add_box(ws)
    ws.harness("build", "matmul", "--target", "box", "--shapes", "32x32x32:fp32:NT", "--space", "space.yaml")
    ws.harness("push", "box")
    ws.harness("run", "--remote", "box", "--iters", "2", *ANSWERS_ONLY)
    remote = ws.path / "box/results/box/matmul/results.csv"
    header, rows = _read(remote)
    built = {r["variant_id"] for r in rows}
    # a real row of the remote's, its message now a formula: kept, and escaped in every CSV written
    tampered = _line(header, dict(rows[0], message=FORMULA, timestamp="2099-01-01T00:00:00+0000"))
    remote.write_text(remote.read_text() + tampered + _hostile_lines(header, rows[0]))

    out = ws.harness("report", "--target", "box", "--format", "aiter", "--all-candidates")
    said = out.stdout + out.stderr
    read = len(rows) + 8
    assert re.search(r"%d rows read, %d kept, 7 set aside" % (read, len(rows) + 1), said), said
    for reason in ("unknown variant", "unknown shape", "bad config value", "config not the variant's",
                   "not a number", "wrong field count", "cut short"):
        assert reason in said or reason in (ws.path / "results/box/matmul/set_aside.csv").read_text(), reason
    local_header, local = _read(ws.path / "results/box/matmul/results.csv")
    assert {r["variant_id"] for r in local} == built and len(local) == len(rows) + 1
    assert all(r["cfg_MR"] in ("1", "2") and r["time_ns"] != "1" for r in local)
    # nothing is lost: the six whole rows wait in set_aside.csv with their reasons (the torn one comes whole later)
    _, aside = _read(ws.path / "results/box/matmul/set_aside.csv")
    assert len(aside) == 6 and all(a["reason"] for a in aside)
    assert "v0000000bad" in " ".join(a["row"] for a in aside)
    # the winner is one of the built variants, at a measured time
    best = _winners(ws, "box")["32x32x32_fp32_NT"]
    assert best["variant_id"] in built and best["time_ns"] > 1
    assert "'" + FORMULA in (ws.path / "tuned/box/matmul.csv").read_text()
    _no_formula_cells(ws.path / "tuned")
    _no_formula_cells(ws.path / "results/box/matmul", "set_aside.csv")  # results.csv stays the agent's data as written


@pytest.mark.slow
def test_hostile_local_results_are_counted_and_kept_on_disk(local_workspace):
    ws = local_workspace
    ws.harness("build", "matmul", "--target", "local", "--shapes", "32x32x32:fp16:NT", "--space", "space.yaml")
    ws.harness("run", "--iters", "2", *ANSWERS_ONLY)
    path = ws.path / "results/local/matmul/results.csv"
    header, rows = _read(path)
    path.write_text(path.read_text() + _hostile_lines(header, rows[0]))
    before = path.read_bytes()
    out = ws.harness("report", "--format", "aiter", "--all-candidates")
    assert "Traceback" not in out.stderr
    summary = [l for l in out.stdout.splitlines() if "rows read" in l]
    assert len(summary) == 1 and "%d rows read, %d kept, 7 set aside" % (len(rows) + 7, len(rows)) in summary[0]
    assert "first at line %d" % (len(rows) + 2) in summary[0]  # the unknown variant, by its line
    assert path.read_bytes() == before  # the file is left as it is
    best = _winners(ws, "local")["32x32x32_fp16_NT"]
    assert best["variant_id"] in {r["variant_id"] for r in rows} and best["config"]["MR"] in (1, 2)
    _no_formula_cells(ws.path / "tuned")
    # the packed CPU kernel's configs are no Triton tiles: aiter's Triton JSON refuses them in one line
    refused = ws.harness("report", "--format", "triton", check=False)
    assert refused.returncode == 2 and "not a Triton tile config" in refused.stdout + refused.stderr


@pytest.mark.slow
def test_results_of_an_older_schema_without_host_read_with_it_empty(local_workspace):
    ws = local_workspace
    ws.harness("build", "matmul", "--target", "local", "--shapes", "32x32x32", "--space", "space.yaml")
    ws.harness("run", "--iters", "2", *ANSWERS_ONLY)
    path = ws.path / "results/local/matmul/results.csv"
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.drop(columns=["host", "agent_version", "artifact_sha256", "preempted"]).to_csv(path, index=False)
    out = ws.harness("report")
    assert "%d rows read, %d kept, 0 set aside" % (len(df), len(df)) in out.stdout
    assert json.loads((ws.path / "tuned/local/matmul.json").read_text())["hosts"] == []  # none recorded
    assert _winners(ws, "local")["32x32x32_fp32_NN"]["variant_id"] in set(df["variant_id"])


@pytest.mark.slow
def test_a_file_that_is_not_results_is_one_line_with_file_and_line(local_workspace):
    ws = local_workspace
    ws.harness("build", "matmul", "--target", "local", "--shapes", "32x32x32", "--space", "space.yaml")
    ws.harness("run", "--iters", "2", *ANSWERS_ONLY)
    path = ws.path / "results/local/matmul/results.csv"
    before = path.read_text()
    path.write_text(before.replace(",status,", ",state,", 1))
    proc = ws.harness("report", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "results.csv:1:" in lines[0] and "status" in lines[0], lines
