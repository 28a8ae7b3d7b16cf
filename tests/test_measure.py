"""Measurements that decide: the stopping rule, a planted noisy neighbour, the previous results
schema, winners and counters in words, and OpenBLAS as the library on CPU targets."""

import csv
import os
import random
import subprocess
import sys
import time

import pandas as pd
import pytest

from remote_agent import contract, measure
from remote_agent.results import ResultsWriter
from tests.conftest import REPO, needs


# ---- the stopping rule ------------------------------------------------------------------


def test_noise_is_the_standard_error_of_the_median():
    rng = random.Random(1)
    samples = [rng.gauss(1000.0, 10.0) for _ in range(2000)]
    expected = 1.2533 * 10.0 / 2000 ** 0.5 / 1000.0
    assert abs(measure.median_noise(samples) - expected) < 0.25 * expected
    # a preempted sample moves it far less than it moves the standard deviation
    hit = samples[:-20] + [5000.0] * 20
    assert measure.median_noise(hit) < 1.1 * measure.median_noise(samples)


def test_stopper_waits_for_min_samples_and_settled_noise_or_the_time_cap():
    now = [0.0]
    quiet = measure.Stopper(max_noise=0.01, max_time=10, min_samples=10, clock=lambda: now[0])
    for i in range(9):
        quiet.add(1000.0 + i % 2)
        assert not quiet.done()
    quiet.add(1000.0)
    assert quiet.done() and quiet.reason == "noise"
    noisy = measure.Stopper(max_noise=0.01, max_time=10, min_samples=10, clock=lambda: now[0])
    rng = random.Random(2)
    while not noisy.done():
        noisy.add(rng.choice([1000.0, 2000.0]))
        now[0] += 0.5
    assert noisy.reason == "time" and len(noisy.samples) == 20 and noisy.noise > 0.01


def test_a_sample_lasts_well_above_the_timer_resolution():
    assert measure.batch_size(20e3, 1) == 50  # 20 us calls: 50 make 1 ms
    assert measure.batch_size(5e6, 1) == 1
    assert measure.batch_size(100.0, 1e5) == 100000  # a 0.1 ms timer: 100 ticks = 10 ms


# ---- a planted noisy neighbour ----------------------------------------------------------


def _agent_run(bundle, results, cpu, *extra):
    cmd = [sys.executable, "-m", "remote_agent", "run", "--bundle", str(bundle), "--results", str(results),
           "--pin-cpu", str(cpu), "--profiler", "wallclock", "--all"] + list(extra)
    subprocess.run(cmd, check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    return pd.read_csv(results).iloc[-1]


HOG = """import os, random, time
os.sched_setaffinity(0, {%d})
while True:  # bursts that wake up and preempt the variant at random moments
    end = time.perf_counter() + random.uniform(0, 0.001)
    while time.perf_counter() < end:
        pass
    time.sleep(random.uniform(0, 0.003))
"""


def test_a_cpu_hog_on_the_same_core_takes_more_samples_and_the_median_still_agrees(local_workspace):
    ws = local_workspace
    (ws.path / "one.yaml").write_text("BLOCK_M: [16]\nBLOCK_N: [32]\nBLOCK_K: [16]\nGROUP_M: [1]\n")
    ws.harness("build", "matmul", "--target", "local", "--shapes", "64x64x64", "--space", "one.yaml")
    bundle = ws.path / "build/local/matmul"
    cpu = sorted(os.sched_getaffinity(0))[-1]
    opts = ("--max-noise", "0.005", "--max-time", "3", "--iters", "10")
    quiet, noisy = [], []
    for rep in range(2):  # alternated: other load on a shared machine hits both alike
        quiet.append(_agent_run(bundle, ws.path / "quiet.csv", cpu, *opts))
        hog = subprocess.Popen([sys.executable, "-c", HOG % cpu])
        try:
            time.sleep(0.3)
            noisy.append(_agent_run(bundle, ws.path / "noisy.csv", cpu, *opts))
        finally:
            hog.kill()
            hog.wait()
    total = lambda rows, f: sum(f(r) for r in rows)  # noqa: E731
    assert all(r.status == "ok" and str(int(r.pinned_cpu)) == str(cpu) for r in quiet + noisy)
    # the hog's bursts hit samples, and the agent samples on past the minimum: until the noise
    # settles again (then it took more samples than the quiet runs, when those settled too), or
    # up to the time cap with the noise left above the target (the hog's share of the core
    # makes those fewer samples per second, so they are not compared by count)
    assert all(r.samples > 10 for r in noisy)
    if all(r.noise < 0.005 for r in quiet + noisy):
        assert total(noisy, lambda r: r.samples) > total(quiet, lambda r: r.samples)
    # and the median stays where the quiet runs put it (stated tolerance: within their range +- 10 %)
    lo, hi = min(r.time_ns_median for r in quiet), max(r.time_ns_median for r in quiet)
    assert all(0.9 * lo <= r.time_ns_median <= 1.1 * hi for r in noisy)


# ---- the previous results schema --------------------------------------------------------


def _schema1_header():
    fixed = [c for c in contract.FIXED_COLUMNS if c not in contract.ADDED_IN_SCHEMA_2]
    return fixed + ["cfg_BLOCK_M", "ctr_task_clock"]


def _write_schema1(path):
    header = _schema1_header()
    row = dict.fromkeys(header, "")
    row.update(schema_version=1, target="local", kernel="matmul", variant_id="v1", shape_id="32x32x32_fp32_NN",
               M=32, N=32, K=32, dtype="fp32", layout="NN", device="cpu", status="ok", time_ns_median=1000,
               time_ns_min=990, time_ns_p20=995, time_ns_p80=1010, iterations=10, tflops=0.06, rel_err=1e-7,
               timestamp="2026-11-01T00:00:00+0000", cfg_BLOCK_M=16, ctr_task_clock=0.5)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
        w.writeheader()
        w.writerow(row)


def test_a_results_file_of_the_previous_schema_still_loads_and_resumes(tmp_path):
    from harness.report.aggregate import best_per_shape, load_results

    path = tmp_path / "results.csv"
    _write_schema1(path)
    df = load_results([path])
    assert df.loc[0, "time_ns_median"] == 1000 and pd.isna(df.loc[0, "noise"]) and pd.isna(df.loc[0, "samples"])
    assert best_per_shape(df).iloc[0]["variant_id"] == "v1"
    # the agent resumes it: the old row is kept (the job is done), the file takes the new columns
    writer = ResultsWriter(str(path), contract.results_header(["BLOCK_M"], ["task-clock"]))
    assert contract.job_key("v1", "32x32x32_fp32_NN", "cpu") in writer.done
    writer.close()
    rows = list(csv.DictReader(open(path)))
    assert rows[0]["variant_id"] == "v1" and rows[0]["time_ns_median"] == "1000" and rows[0]["samples"] == ""
    assert list(rows[0]) == contract.results_header(["BLOCK_M"], ["task-clock"])


# ---- winners and counters in words ------------------------------------------------------


def test_winners_say_clear_with_a_margin_or_tie_with_whom():
    from harness.strategies.winner import entry_words, pick_winner

    clear = pick_winner({"a": [100.0, 101.0, 99.0, 100.0, 100.0], "b": [130.0, 131.0, 129.0, 130.0, 130.0]})
    assert clear.decided == "clear" and clear.words() == "clear by 30.0 %"
    tie = pick_winner({"b": [100.0, 110.0, 90.0, 100.0, 100.0], "a": [101.0, 111.0, 91.0, 101.0, 101.0]})
    assert tie.decided == "tie" and tie.id == "a" and tie.margin is None and tie.words() == "tie with b"
    # a saved tie whose winner is slower than the runner-up: no negative margin anywhere
    entry = {"variant_id": "v2", "decided": "tie", "median_ns": 100.0, "margin_ns": -27165.0, "tied": ["v2", "v1"],
             "candidates": [{"variant_id": "v1", "config": {"BLOCK_M": 16}}, {"variant_id": "v2", "config": {}}]}
    assert entry_words(entry) == "tie with BLOCK_M=16"


def test_counters_that_are_time_by_another_name_are_left_out():
    from harness.report.counters import counter_correlation

    times = [1000.0, 1500.0, 2100.0, 2600.0, 4000.0]
    instructions = [5e5, 8e5, 1.0e6, 1.4e6, 2.0e6]
    rows = [{"shape_id": "s", "variant_id": "v%d" % i, "status": "ok", "time_ns_median": t,
             "ctr_task_clock": t / 1e6, "ctr_cycles": 2.4 * t, "ctr_instructions": n, "ctr_cache_misses": 7.0 + i % 2,
             "ctr_context_switches": t / 500.0}
            for i, (t, n) in enumerate(zip(times, instructions))]
    table = counter_correlation(pd.DataFrame(rows), threshold=0.8)
    assert list(table[table.listed].counter) == ["instructions"]
    assert not {"task_clock", "cycles", "context_switches"} & set(table.counter)
    # cycles whose rate changes with the config (the frequency was not fixed) can explain
    for r, ghz in zip(rows, [1.0, 2.0, 1.5, 3.0, 2.5]):
        r["ctr_cycles"] = ghz * r["time_ns_median"]
    assert "cycles" in set(counter_correlation(pd.DataFrame(rows)).counter)


# ---- OpenBLAS as the library ------------------------------------------------------------


def _library_rows(ws, target):
    df = pd.read_csv(ws.path / "results" / target / "matmul" / "results.csv")
    return df[df.variant_id.str.startswith("lib:")].set_index("variant_id")


def test_openblas_is_the_library_here_and_checked_like_a_variant(local_workspace):
    ws = local_workspace
    out = ws.harness("build", "matmul", "--target", "local", "--shapes", "48x40x64,32x32x32:fp16:TN",
                     "--space", "space.yaml", "--library").stdout
    assert "OpenBLAS has no fp16 GEMM" in out
    ws.harness("run", "--iters", "5")
    lib = _library_rows(ws, "local")
    assert lib.loc["lib:openblas:fp32", "status"] == "ok" and lib.loc["lib:openblas:fp32", "rel_err"] <= 1e-5
    assert lib.loc["lib:reference:fp16", "status"] == "ok"
    report = ws.harness("report").stdout
    assert "lib:openblas:fp32" in report


@needs("qemu-aarch64", "aarch64-linux-gnu-g++")
def test_openblas_on_the_emulated_aarch64_board(workspace):
    ws = workspace
    ws.harness("build", "matmul", "--target", "arm", "--shapes", "40x24x32:fp32:NT", "--space", "space.yaml",
               "--library")
    ws.harness("push", "arm")
    ws.harness("run", "--remote", "arm", "--iters", "3", "--max-time", "0.2")
    ws.harness("report")  # fetches the rows from the board
    lib = _library_rows(ws, "arm")
    assert lib.loc["lib:openblas:fp32", "status"] == "ok" and lib.loc["lib:openblas:fp32", "rel_err"] <= 1e-5
