"""Measurements that decide: the stopping rule, a planted noisy neighbour, the previous results
schema, winners and counters in words, and OpenBLAS as the library on CPU targets."""

import csv
import os
import random
import statistics
import subprocess
import sys
import time

import pandas as pd
import pytest

from remote_agent import contract, measure
from remote_agent.results import ResultsWriter
from tests.conftest import ANSWERS_ONLY, REPO, needs


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


def test_a_chunk_of_gpu_samples_is_judged_once_and_settles_like_its_samples_one_by_one():
    now = [0.0]
    chunked = measure.Stopper(max_noise=0.01, max_time=10, min_samples=200, clock=lambda: now[0])
    chunked.add_many([1000.0 + i % 7 for i in range(199)])
    assert not chunked.done() and chunked.under == 199  # under the noise target, short of min_samples
    chunked.add_many([1000.0])
    assert chunked.done() and chunked.reason == "noise" and len(chunked.samples) == 200
    bimodal = measure.Stopper(max_noise=0.01, max_time=10, min_samples=10, clock=lambda: now[0])
    bimodal.add_many([1000.0, 1100.0] * 50)  # two clock states: the median is not known to 1 %
    assert bimodal.noise > 0.01 and bimodal.under == 0 and not bimodal.done()
    now[0] = 11.0
    bimodal.add_many([])
    assert bimodal.done() and bimodal.reason == "time"


def test_the_minimum_decides_on_cpus_and_its_noise_is_how_far_the_halves_minima_differ():
    assert measure.default_estimator("cpu") == "min" and measure.default_estimator("cuda") == "median"
    assert measure.min_noise([110.0, 100.0, 120.0, 101.0]) == pytest.approx(0.01)
    # the first half slowed by a neighbour throughout: its floor is 20 % off, and the noise says so
    assert measure.min_noise([120.0, 125.0, 121.0, 100.0, 130.0, 101.0]) == pytest.approx(0.20)
    row = measure.summarize([130.0, 100.0, 101.0, 150.0], 10, "min")
    assert row["estimator"] == "min" and row["time_ns"] == 100.0 and row["time_ns_median"] == 115.5
    assert row["noise"] == pytest.approx(0.01) and row["iterations"] == 40
    assert measure.summarize([1.0, 2.0, 3.0], 1)["time_ns"] == 2.0  # the median's, as before


def test_the_min_stopper_samples_at_least_its_settle_time_and_stops_at_the_cap():
    now = [0.0]
    clock = lambda: now[0]  # noqa: E731
    quiet = measure.Stopper(max_noise=0.01, max_time=2, min_samples=10, clock=clock, estimator="min")
    assert quiet.min_time == measure.MIN_SETTLE_TIME
    while not quiet.done():
        quiet.add(1000.0)
        now[0] += 0.01
    # settled after 10 samples, but a stretch that short may be slow throughout: it went on
    assert quiet.reason == "noise" and now[0] >= measure.MIN_SETTLE_TIME and len(quiet.samples) > 10
    now[0] = 0.0
    phases = measure.Stopper(max_noise=0.01, max_time=2, min_samples=10, clock=clock, estimator="min")
    for k in range(1000):  # the floor, a slow stretch: the halves disagree until the floor is back
        now[0] = k / 100.0
        phases.add(1200.0 if 10 <= k < 60 else 1000.0)
        if phases.done():
            break
    assert phases.reason == "noise" and now[0] > 0.6 and phases.summary()["time_ns"] == 1000.0
    now[0] = 0.0
    capped = measure.Stopper(max_noise=0.01, max_time=0.5, min_samples=10, clock=clock, estimator="min")
    for k in range(1000):
        now[0] = k / 100.0
        capped.add(1000.0 if k < 5 else 1200.0)  # the floor, then slow to the end
        if capped.done():
            break
    assert capped.reason == "time" and capped.noise > 0.01


def test_preempted_samples_are_set_aside_and_their_time_is_sampled_again():
    now = [0.0]
    clock = lambda: now[0]  # noqa: E731

    def run(preempt_every):
        stopper = measure.Stopper(max_noise=0.01, max_time=5, min_samples=10, clock=clock, estimator="median")
        stopper.min_time = 0.2
        now[0], k = 0.0, 0
        while not stopper.done():
            k += 1
            now[0] += 0.01
            if preempt_every and k % preempt_every == 0:
                stopper.add_preempted(3000.0)  # another process ran on the core meanwhile
            else:
                stopper.add(1000.0 + k % 3, 0.008)  # 8 ms of calls in the 10 ms step
        return stopper

    quiet, busy = run(0), run(2)
    assert quiet.reason == busy.reason == "noise" and quiet.preempted == 0 and busy.preempted > 0
    # as much undisturbed sampling as the quiet job had, so more samples taken in all
    assert len(busy.samples) >= len(quiet.samples) and len(busy.taken) > len(quiet.taken)
    assert busy.summary()["time_ns"] == quiet.summary()["time_ns"] == 1001.0  # the 3000s took no part
    # a core busy throughout: at the cap every sample taken counts, rather than none
    stuck = measure.Stopper(max_noise=0.01, max_time=0.5, min_samples=10, clock=clock)
    now[0] = 0.0
    while not stuck.done():
        now[0] += 0.01
        stuck.add_preempted(2000.0)
    assert stuck.reason == "time" and stuck.samples == [] and stuck.summary()["samples"] == len(stuck.taken) > 10


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
    time.sleep(random.uniform(0, 0.001))
"""


def _cpu_seconds(pid):
    """The CPU time a process has had so far, from /proc/PID/stat (utime + stime)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
@pytest.mark.alone  # compares times: no other test of the run alongside
def test_a_cpu_hog_on_the_same_core_makes_the_agent_sample_more_and_agree_with_the_quiet_runs(local_workspace):
    ws = local_workspace
    # one packed config on a product of some 60 us a call here (the tile kernel took as long at 64^3): a
    # call long enough for the hog's bursts to land inside samples
    (ws.path / "one.yaml").write_text("MR: [4]\nNR: [32]\nKC: [64]\nMC: [64]\nNC: [64]\nPACK_B: [1]\n")
    ws.harness("build", "matmul", "--target", "local", "--shapes", "128x128x256", "--space", "one.yaml")
    bundle = ws.path / "build/local/matmul"
    cpu = sorted(os.sched_getaffinity(0))[-1]
    opts = ("--max-noise", "0.01", "--max-time", "2", "--iters", "10")  # the minimum decides: the CPU default
    quiet, noisy, hog_share = [], [], []
    for rep in range(5):  # alternated: other load on a shared machine hits both alike
        quiet.append(_agent_run(bundle, ws.path / "quiet.csv", cpu, *opts))
        hog = subprocess.Popen([sys.executable, "-c", HOG % cpu])
        try:
            time.sleep(0.3)
            hog_cpu, start = _cpu_seconds(hog.pid), time.monotonic()
            noisy.append(_agent_run(bundle, ws.path / "noisy.csv", cpu, *opts))
            hog_share.append((_cpu_seconds(hog.pid) - hog_cpu) / (time.monotonic() - start))
        finally:
            hog.kill()
            hog.wait()
    assert all(r.status == "ok" and str(int(r.pinned_cpu)) == str(cpu) for r in quiet + noisy)
    assert all(r.estimator == "min" and r.time_ns == r.time_ns_min for r in quiet + noisy)
    # the hog ran on the variant's core through every noisy run (alone it takes about a quarter
    # of a core), so its bursts preempted the samples they hit ...
    assert min(hog_share) >= 0.1, hog_share
    # ... the program counted those preemptions, and the agent set those samples aside and sampled
    # on for as long again: more samples taken than in the quiet runs (the median run of five each:
    # a quiet run whose noise settles late takes up to 3.4 times the samples of another; with three
    # each, other work on the machine once made two of three quiet runs settle late) ...
    print("quiet samples/preempted", [(r.samples, r.preempted) for r in quiet],
          "noisy", [(r.samples, r.preempted) for r in noisy], "hog share", hog_share)
    assert all(r.preempted > 0 and r.samples > 10 and r.noise is not None for r in noisy)
    # (the total taken is no measure of it with the packed kernel: a quiet run that settles late
    # takes more samples than a noisy run, seen 1486 against 1349; the preemptions counted are)
    preempted = lambda runs: statistics.median(r.preempted for r in runs)  # noqa: E731
    assert preempted(noisy) > preempted(quiet)
    # ... and the samples that dodged the bursts keep the minimum where the quiet runs put it.
    # Stated tolerance: 10 % between the smallest of the five runs of each, as a tune's repeats
    # take it (a process of a small tile can sit 20 to 40 % slow from start to end, hog or not:
    # README, "Part of a CPU kernel's time can belong to the process it runs in")
    best_quiet, best_noisy = min(r.time_ns for r in quiet), min(r.time_ns for r in noisy)
    assert 0.9 * best_quiet <= best_noisy <= 1.1 * best_quiet, (best_quiet, best_noisy)


def _stretched_run(bundle, results, stretch_s, interleave):
    """One agent run of every job under tests/slow_stretch.py: twice as slow for ``stretch_s``
    seconds from the run's first sample. Returns {variant: deciding time}."""
    start_file = results.with_suffix(".start")
    if start_file.exists():
        start_file.unlink()
    cmd = [sys.executable, "-m", "remote_agent", "run", "--bundle", str(bundle), "--results", str(results),
           "--profiler", "wallclock", "--all", "--max-time", "0.3", "--interleave", str(interleave),
           "--run-under", "%s %s" % (sys.executable, REPO / "tests" / "slow_stretch.py")]
    env = dict(os.environ, PYTHONPATH=str(REPO), SLOW_STRETCH_FILE=str(start_file), SLOW_STRETCH_S=str(stretch_s))
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=300)
    rows = pd.read_csv(results)
    assert (rows.status == "ok").all() and (rows.estimator == "min").all()
    return dict(zip(rows.variant_id, rows.time_ns))


@pytest.mark.slow
@pytest.mark.alone  # compares times: no other test of the run alongside
def test_a_slow_stretch_longer_than_a_job_slows_one_job_alone_but_not_jobs_measured_interleaved(local_workspace):
    ws = local_workspace
    (ws.path / "four.yaml").write_text("MR: [2, 4]\nNR: [16, 32]\nKC: [128]\nMC: [128]\nNC: [128]\nPACK_B: [1]\n")
    ws.harness("build", "matmul", "--target", "local", "--shapes", "128x128x128", "--space", "four.yaml")
    bundle = ws.path / "build/local/matmul"

    def smallest_of_two(name, stretch_s, interleave):
        """Each job's smallest time of two runs, as a tune's repeats take it: a process of a small
        tile can sit 10 to 20 % slow throughout (README)."""
        runs = [_stretched_run(bundle, ws.path / ("%s%d.csv" % (name, k)), stretch_s, interleave)
                for k in range(2)]
        return {v: min(run[v] for run in runs) for v in runs[0]}

    quiet = smallest_of_two("quiet", 0, 4)

    def spread_against_quiet(times):  # slowest over fastest of each job's time over the quiet run's
        ratios = [times[v] / quiet[v] for v in quiet]  # (a slow stretch of the VM over a whole run cancels)
        return max(ratios) / min(ratios)

    # the machine twice as slow for 0.8 s from the first sample: one job after another, the
    # first job (0.1 s warm-up, at most 0.3 s of samples) lies in it from start to end, the
    # last after it (2.0 to 2.3 in 12 runs) ...
    assert spread_against_quiet(_stretched_run(bundle, ws.path / "alone.csv", 0.8, 1)) > 1.5
    # ... measured interleaved, every job has samples before and after it, and the jobs keep
    # the proportions of the quiet runs: nearer 1 than 2, under sqrt(2) (1.00 to 1.22 in 12 runs)
    assert spread_against_quiet(smallest_of_two("together", 0.8, 4)) < 2 ** 0.5


def test_jobs_are_interleaved_by_shape_and_device_in_groups_whose_operands_fit():
    from remote_agent.agent import interleave_groups
    from remote_agent.runners.elf import GROUP_BYTES, ElfRunner

    todo = [({"variant": "v%d" % i, "shape": "s%d" % (i % 2)}, "cpu") for i in range(7)]
    groups = list(interleave_groups(todo, {"s0": {}, "s1": {}}, lambda shape: 3))
    assert [[j["variant"] for j, _ in g] for g in groups] == [["v0", "v2", "v4"], ["v6"], ["v1", "v3", "v5"]]
    runner = ElfRunner.__new__(ElfRunner)
    runner.interleave, runner.threads = 8, 1
    assert runner.group_size({"bytes": 1 << 20}) == 8
    assert runner.group_size({"bytes": GROUP_BYTES // 3}) == 3
    assert runner.group_size({"bytes": 2 * GROUP_BYTES}) == 1
    runner.threads = 4  # OpenMP builds: idle workers spin after a call and would slow the next job
    assert runner.group_size({"bytes": 1 << 20}) == 1


# ---- the previous results schemas -------------------------------------------------------


def _old_header(schema):
    added = {1: contract.ADDED_SINCE_SCHEMA_1, 2: contract.ADDED_SINCE_SCHEMA_2, 3: contract.ADDED_SINCE_SCHEMA_3,
             4: contract.ADDED_IN_SCHEMA_5}[schema]
    return [c for c in contract.FIXED_COLUMNS if c not in added] + ["cfg_BLOCK_M", "ctr_task_clock"]


def _write_old(path, schema):
    header = _old_header(schema)
    rows = []
    for vid, median, low in (("v1", 1000, 900), ("v2", 1050, 800)):  # v2: the lower minimum, the higher median
        row = dict.fromkeys(header, "")
        row.update(schema_version=schema, target="local", kernel="matmul", variant_id=vid,
                   shape_id="32x32x32_fp32_NN", M=32, N=32, K=32, dtype="fp32", layout="NN", device="cpu",
                   status="ok", time_ns_median=median, time_ns_min=low, time_ns_p20=median - 5,
                   time_ns_p80=median + 10, iterations=10, tflops=0.06, rel_err=1e-7,
                   timestamp="2026-11-01T00:00:00+0000", cfg_BLOCK_M=16, ctr_task_clock=0.5)
        if schema >= 2:
            row.update(samples=10, noise=0.001)
        if schema >= 3:
            row.update(estimator="min", time_ns=low)
        if schema >= 4:
            row.update(preempted=0)
        rows.append(row)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


@pytest.mark.parametrize("schema", [1, 2])
def test_results_files_of_older_schemas_still_load_with_the_median_deciding_and_resume(tmp_path, schema):
    from harness.report.aggregate import best_per_shape, load_results
    from harness.report.common import deciding_times

    path = tmp_path / "results.csv"
    _write_old(path, schema)
    df = load_results([path])
    assert list(deciding_times(df)) == [1000, 1050] and df["estimator"].isna().all()
    assert pd.isna(df.loc[0, "samples"]) == (schema == 1)
    assert best_per_shape(df).iloc[0]["variant_id"] == "v1"  # by the median, not v2's lower minimum
    # the agent resumes it: the old rows are kept (the jobs are done), the file takes the new columns
    writer = ResultsWriter(str(path), contract.results_header(["BLOCK_M"], ["task-clock"]))
    assert contract.job_key("v1", "32x32x32_fp32_NN", "cpu") in writer.done
    writer.close()
    rows = list(csv.DictReader(open(path)))
    assert rows[0]["variant_id"] == "v1" and rows[0]["time_ns_median"] == "1000" and rows[0]["time_ns"] == ""
    assert list(rows[0]) == contract.results_header(["BLOCK_M"], ["task-clock"])
    assert [contract.deciding_time(r) for r in rows] == [1000.0, 1050.0]


@pytest.mark.parametrize("schema", [3, 4])
def test_results_files_of_schemas_3_and_4_load_with_their_estimator_deciding_and_resume(tmp_path, schema):
    from harness.report.aggregate import best_per_shape, load_results

    path = tmp_path / "results.csv"
    _write_old(path, schema)
    df = load_results([path])
    assert df["library"].isna().all() and list(df["time_ns"]) == [900, 800]
    assert df["preempted"].isna().all() == (schema == 3)
    assert best_per_shape(df).iloc[0]["variant_id"] == "v2"  # the minimum decides, as the file says
    writer = ResultsWriter(str(path), contract.results_header(["BLOCK_M"], ["task-clock"]))
    assert contract.job_key("v2", "32x32x32_fp32_NN", "cpu") in writer.done
    writer.close()
    rows = list(csv.DictReader(open(path)))
    assert list(rows[0]) == contract.results_header(["BLOCK_M"], ["task-clock"])
    assert rows[1]["library"] == "" and rows[1]["time_ns"] == "800" and rows[1]["schema_version"] == str(schema)


# ---- winners and counters in words ------------------------------------------------------


def test_winners_say_clear_with_a_margin_or_tie_with_whom():
    from harness.strategies.winner import entry_words, pick_winner

    clear = pick_winner({"a": [100.0, 101.0, 99.0, 100.0, 100.0], "b": [130.0, 131.0, 129.0, 130.0, 130.0]})
    assert clear.decided == "clear" and clear.words() == "clear by 30.0 %"
    tie = pick_winner({"b": [100.0, 110.0, 90.0, 100.0, 100.0], "a": [101.0, 91.0, 111.0, 101.0, 99.0]})
    assert tie.decided == "tie" and tie.id == "a" and tie.margin is None and tie.words() == "tie with b"
    # a saved tie whose winner is slower than the runner-up: no negative margin anywhere
    entry = {"variant_id": "v2", "decided": "tie", "median_ns": 100.0, "margin_ns": -27165.0, "tied": ["v2", "v1"],
             "candidates": [{"variant_id": "v1", "config": {"BLOCK_M": 16}}, {"variant_id": "v2", "config": {}}]}
    assert entry_words(entry) == "tie with BLOCK_M=16"


def test_winners_judged_by_the_minimum_take_the_lowest_floor_and_its_reproduction_as_spread():
    from harness.strategies.base import Trial
    from harness.strategies.winner import pick_winner

    def trials(*times):
        return [Trial({}, "ok", t, None, 1, 0.005, "min") for t in times]

    # repeats of a min-decided job: most found the floor, one ran in a slow stretch (+20 %)
    clear = pick_winner({"a": trials(1000, 1004, 1200, 1003, 1003), "b": trials(1060, 1240, 1061, 1062, 1230)})
    assert clear.estimator == "min" and clear.median == 1000 and clear.noise == pytest.approx(0.003)
    assert clear.spread == 50 and clear.words() == "clear by 6.0 %"  # MIN_RESOLUTION: 5 % of 1000
    # b found its floor once: it is not known to better than its next repeat, so they tie
    tie = pick_winner({"a": trials(1000, 1002, 1001), "b": trials(990, 1200, 1190)})
    assert tie.decided == "tie" and set(tie.tied) == {"a", "b"} and tie.words() == "tie with b"
    # floors 4.5 % apart are within what two re-measures of one config differ by: a tie
    assert pick_winner({"a": trials(1000, 1001, 1002), "b": trials(1045, 1046, 1047)}).decided == "tie"
    assert pick_winner({"a": trials(1000, 1001, 1002), "b": trials(1055, 1056, 1057)}).decided == "clear"


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


@pytest.mark.slow
def test_openblas_is_the_library_here_and_checked_like_a_variant(local_workspace):
    ws = local_workspace
    out = ws.harness("build", "matmul", "--target", "local", "--shapes", "48x40x64,32x32x32:fp16:TN",
                     "--space", "space.yaml", "--library").stdout
    assert "OpenBLAS has no fp16 GEMM" in out
    ws.harness("run", "--iters", "5", *ANSWERS_ONLY)
    lib = _library_rows(ws, "local")
    assert lib.loc["lib:openblas:fp32", "status"] == "ok" and lib.loc["lib:openblas:fp32", "rel_err"] <= 1e-5
    assert lib.loc["lib:reference:fp16", "status"] == "ok"
    report = ws.harness("report").stdout
    assert "lib:openblas:fp32" in report


# the emulated aarch64 board's library row: tests/test_library_row.py
