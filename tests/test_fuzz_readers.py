"""Fuzz the readers of what crosses between host and remote (issue 44): thousands of seeded
mutations of real results CSVs and a real manifest go into the readers, and every outcome is a
clean result or a one-line error (HarnessError on the host, AgentError in the agent).

Results (harness.report.results_reader): rows kept + rows set aside == the CSV records in the
file (counted here independently with the csv module), every kept row is one the checks allow,
and the kept rows go through the report's frame and best-per-shape without an exception.
Manifests: the agent's load_manifest (with its size checks) and the host's Manifest.load; a
manifest the agent accepts has every dimension, scalar and thread count within its limits.

Mutations: dropped and added columns, garbage cells (huge numbers, nan/inf, formulas, unicode,
quotes, newlines, NUL), rows with more or fewer fields, duplicated header names, truncation at
a random byte, bytes that are not UTF-8; for manifests, any value anywhere replaced by another
kind, keys removed, the text cut short. Seeded, so a failure names the input that caused it.
"""

import csv
import io
import json
import math
import random
import time
from pathlib import Path

import pytest

from harness.bundle import Manifest
from harness.errors import HarnessError
from harness.report.aggregate import best_per_shape
from harness.report.common import kernel_rows
from harness.report.results_reader import Known, RowChecker, read_results
from remote_agent import limits
from remote_agent.agent import load_manifest
from remote_agent.contract import STATUSES
from remote_agent.errors import AgentError

DATA = Path(__file__).resolve().parent / "data"
RESULTS_INPUTS = 2000
MANIFEST_INPUTS = 2000
SEED = 44
GARBAGE = ["", "abc", "1e400", "-1e400", "nan", "inf", "-inf", "9" * 40, "1.5", "-5", "0", "-1", "+7",
           "=cmd|' /C calc'!A0", "+1+1", "@SUM(A1)", "-2+3", "\t=1", "\r=1", "é漢字🙂", "a\x00b", '"', 'x"y',
           "a,b", "line\nbreak", " 12 ", "True", "None", "v0000000bad", "99x99x99_fp32_NN", "lib:evil",
           "2026-13-45T99:99:99", "ok", "crash", "1" * 400, "x" * 5000, "y" * 200000]


def _base_results():
    """Small real results files: the head of a recorded CPU full space (schema 4) and of a
    recorded GPU one (schema 1)."""
    texts = []
    for path in (DATA / "cpu_fullspace" / "matmul_local_x86_64.csv", DATA / "gpu_fullspace" / "16x4096x4096_fp16_NN.csv"):
        lines = path.read_text().splitlines(keepends=True)
        texts.append("".join(lines[:25]))
    return texts


def _known_of(text):
    """The variants and shapes a file's own rows name: a stand-in for its bundle's ledger."""
    rows = list(csv.DictReader(io.StringIO(text)))
    known = Known(source="ledger")
    dims = ("M", "N", "K")
    for r in rows:
        known.variants[r["variant_id"]] = {k[4:]: int(v) for k, v in r.items() if k.startswith("cfg_") and v}
        known.shapes[r["shape_id"]] = {"dims": {d: int(r[d]) for d in dims}, "dtype": r["dtype"], "layout": r["layout"]}
    return known


def _mutate_results(rng, text):
    rows = list(csv.reader(io.StringIO(text)))
    for _ in range(rng.randint(1, 3)):
        if not rows or not rows[0]:
            break
        op = rng.randrange(10)
        body = rows[1:]
        if op == 0 and len(rows[0]) > 1:  # drop a column
            i = rng.randrange(len(rows[0]))
            rows = [r[:i] + r[i + 1:] for r in rows]
        elif op == 1:  # add a column
            name = rng.choice(["extra", "ctr_new", "cfg_NEW", "=evil", "host", "", "é"])
            rows = [rows[0] + [name]] + [r + [rng.choice(GARBAGE)] for r in body]
        elif op in (2, 3, 4) and body:  # garbage cells
            for _ in range(rng.randint(1, 4)):
                r = rng.choice(body)
                if r:
                    r[rng.randrange(len(r))] = rng.choice(GARBAGE)
        elif op == 5 and body:  # a row with more or fewer fields
            r = rng.choice(body)
            if rng.random() < 0.5:
                r.extend(rng.choice(GARBAGE) for _ in range(rng.randint(1, 3)))
            elif r:
                del r[rng.randrange(len(r)):]
        elif op == 6:  # a header name twice, or one renamed
            i = rng.randrange(len(rows[0]))
            rows[0][i] = rng.choice(rows[0]) if rng.random() < 0.5 else rng.choice(GARBAGE)
        elif op == 7 and body:  # rows repeated or reordered
            rows = [rows[0]] + rng.sample(body, len(body)) + body[:rng.randint(0, 3)]
        elif op == 8 and body:  # the same key, a faster time
            r = list(rng.choice(body))
            rows.append(r)
        elif op == 9:
            rows = rows[:rng.randint(0, len(rows))]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    data = buf.getvalue().encode("utf-8")
    roll = rng.random()
    if roll < 0.15 and data:  # cut at a random byte
        data = data[:rng.randrange(len(data))]
    elif roll < 0.25 and data:  # bytes that are not UTF-8
        at = rng.randrange(len(data))
        data = data[:at] + bytes([0xff, 0xfe, 0x80]) + data[at:]
    return data


def _records(data):
    """CSV records after the header, counted independently (blank lines are no records)."""
    rows = list(csv.reader(io.StringIO(data.decode("utf-8", "surrogateescape"), newline="")))
    return sum(1 for r in rows[1:] if r)


def _check_results_outcome(path, data, known):
    try:
        read = read_results(path, known)
    except HarnessError as exc:
        assert "\n" not in str(exc) and str(exc).strip(), repr(str(exc))
        return "error"
    assert len(read.rows) + len(read.set_aside) == read.read == (_records(data) if read.header else 0)
    assert "\n" not in read.summary()
    checker = RowChecker(read.header, known)
    for row in read.rows:
        assert len(row) == len(read.header) and not checker.problem(row)
        values = dict(zip(read.header, row))
        assert values["status"] in STATUSES
        if known is not None:
            assert values["variant_id"] in known.variants and values["shape_id"] in known.shapes
    for aside in read.set_aside:
        assert aside.reason and "\n" not in aside.reason
    if read.rows:
        frame = read.frame()
        best = best_per_shape(kernel_rows(frame))
        for t in best.get("time_ns", []):
            assert math.isfinite(float(t)) and float(t) > 0
    return "kept %d" % len(read.rows) if read.rows else "nothing kept"


@pytest.mark.slow
def test_fuzz_results_reader(tmp_path):
    rng = random.Random(SEED)
    bases = [(t, _known_of(t)) for t in _base_results()]
    path = tmp_path / "results.csv"
    outcomes, start = {}, time.monotonic()
    for n in range(RESULTS_INPUTS):
        text, known = rng.choice(bases)
        data = _mutate_results(rng, text)
        path.write_bytes(data)
        try:
            outcome = _check_results_outcome(path, data, known if rng.random() < 0.7 else None)
        except Exception as exc:  # noqa: BLE001 - name the input that broke it
            raise AssertionError("input %d (seed %d): %r\n%r" % (n, SEED, exc, data[:3000])) from exc
        kind = outcome.split()[0]
        outcomes[kind] = outcomes.get(kind, 0) + 1
    assert time.monotonic() - start < 300
    # the mutations reach every outcome: refused files, files with rows kept, files with none
    assert outcomes.get("error", 0) > 50 and outcomes.get("kept", 0) > 500 and outcomes.get("nothing", 0) > 20, outcomes


@pytest.fixture(scope="module")
def real_manifest(tmp_path_factory):
    from tests.conftest import Workspace

    ws = Workspace(tmp_path_factory.mktemp("fuzz-manifest"))
    ws.harness("build", "matmul", "--target", "local", "--shapes", "32x32x32,16x8x24:fp32:TN", "--space", "space.yaml")
    return json.loads((ws.path / "build/local/matmul/manifest.json").read_text())


MANIFEST_GARBAGE = [0, -5, 10 ** 12, 2 ** 31, -2 ** 31 - 1, 2 ** 31 - 1, "abc", None, 1.5, True, False, [], {}, "",
                    "../../../x", "x" * 3000, "é漢字\n🙂", float("nan"), 1e308, [1, 2], {"a": 1}]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _mutate_manifest(rng, manifest):
    data = json.loads(json.dumps(manifest))
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(data))
        path = rng.choice(paths)
        if not path:
            if rng.random() < 0.1:
                data = rng.choice(MANIFEST_GARBAGE)
            continue
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        if rng.random() < 0.2:
            del parent[key]
        else:
            parent[key] = rng.choice(MANIFEST_GARBAGE)
        if not isinstance(data, (dict, list)):
            break
    text = json.dumps(data).encode("utf-8")
    roll = rng.random()
    if roll < 0.05:
        text = text[:rng.randrange(len(text) + 1)]
    elif roll < 0.08:
        text = text[:10] + b"\xff\xfe" + text[10:]
    return text


def _dims_within_limits(manifest):
    assert 1 <= (manifest["target"].get("threads") or 1) <= limits.MAX_THREADS
    for shape in manifest["shapes"]:
        for value in shape["dims"].values():
            assert type(value) is int and 1 <= value <= limits.INT32_MAX
        for value in (shape.get("scalars") or {}).values():
            assert type(value) is int and limits.INT32_MIN <= value <= limits.INT32_MAX


@pytest.mark.slow
def test_fuzz_manifest_readers(tmp_path, real_manifest):
    rng = random.Random(SEED)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    outcomes, start = {"agent ok": 0, "agent error": 0, "host ok": 0, "host error": 0}, time.monotonic()
    for n in range(MANIFEST_INPUTS):
        text = _mutate_manifest(rng, real_manifest)
        (bundle / "manifest.json").write_bytes(text)
        try:
            try:
                _dims_within_limits(load_manifest(str(bundle)))
                outcomes["agent ok"] += 1
            except AgentError as exc:
                assert "\n" not in str(exc) and str(exc).strip(), repr(str(exc))
                outcomes["agent error"] += 1
            try:
                Manifest.load(bundle / "manifest.json")
                outcomes["host ok"] += 1
            except HarnessError as exc:
                assert "\n" not in str(exc), repr(str(exc))
                outcomes["host error"] += 1
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - name the input that broke it
            raise AssertionError("input %d (seed %d): %r\n%r" % (n, SEED, exc, text[:3000])) from exc
    assert time.monotonic() - start < 300
    assert outcomes["agent ok"] > 100 and outcomes["agent error"] > 300, outcomes
