"""Effort levels, racing, and the measurements a second run reuses (harness/effort.py,
harness/reuse.py, remote_agent/measure.py's Stopper.out_of_race)."""

import json
from types import SimpleNamespace

import pytest

from harness import effort, reuse
from harness.errors import HarnessError
from harness.run import RunOptions
from harness.targets import Target
from remote_agent import measure


def test_levels_are_declared_once_and_ordered_by_cost():
    q, d, f, e = effort.get("quick"), effort.get(None), effort.get("full"), effort.get("exhaustive")
    assert d.name == "default" and e.strategy == "exhaustive" and f.race == 0 and e.race == 0
    assert q.budget_cpu < d.budget_cpu < f.budget_cpu and q.budget_gpu < d.budget_gpu < f.budget_gpu
    assert f.strategy is None and e.budget_cpu is None  # full: the search, more of it; exhaustive: every config
    assert q.repeats <= d.repeats and q.top <= d.top
    for level in effort.LEVELS.values():
        assert level.name in effort.help_text()


def test_an_unknown_level_is_one_line():
    with pytest.raises(HarnessError, match="--effort fast: choose quick, default, full, exhaustive"):
        effort.get("fast")


def _stopper(samples, **kw):
    clock = SimpleNamespace(t=0.0)
    s = measure.Stopper(estimator=measure.MIN, clock=lambda: clock.t, min_samples=10, **kw)
    for x in samples:
        s.add(x, 0.005)  # 5 ms samples: 10 of them pass RACE_MIN_TIME
    return s


def test_a_config_clearly_behind_the_leader_is_raced_out():
    s = _stopper([150.0] * 10)
    assert s.out_of_race(100.0, 0.25) and s.reason == "race"


def test_a_close_config_or_one_with_few_samples_stays_in():
    assert not _stopper([120.0] * 10).out_of_race(100.0, 0.25)  # within the margin
    assert not _stopper([150.0] * 5).out_of_race(100.0, 0.25)  # too few samples yet
    assert not _stopper([150.0] * 10).out_of_race(100.0, 0.0)  # racing off


def test_its_own_noise_keeps_a_config_in():
    # the minimum of its first half is 200, of its second 130: noise 54 %, so 130 could still fall to ~60
    s = _stopper([200.0] * 10 + [130.0] * 10)
    assert s.noise > 0.5 and not s.out_of_race(100.0, 0.25)


def test_the_median_is_never_raced():
    clock = SimpleNamespace(t=0.0)
    s = measure.Stopper(estimator=measure.MEDIAN, clock=lambda: clock.t, min_samples=2)
    s.add_many([500.0] * 20)
    clock.t = 1.0
    assert not s.out_of_race(100.0, 0.25)


def test_the_plan_line_and_eta():
    line = effort.plan_line("tune", 144, 144, 75, 130.0)
    assert line == "tune: 144 compiles, 144 measurements, 75 re-measurements of the finalists coming, about 2 min 10 s"
    assert effort.eta(10.0, 20, 100) == pytest.approx(40.0) and effort.eta(0.0, 0, 100) is None


def test_rates_seen_are_kept_for_the_next_estimate(tmp_path):
    tgt = Target(name="box")
    before = effort.estimate(tmp_path, tgt, evals=100)
    assert before == pytest.approx(100 * effort.DEFAULT_RATES["cpu"]["eval_s"])
    effort.record_rates(tmp_path, tgt, eval_s=0.2)
    assert effort.estimate(tmp_path, tgt, evals=100) == pytest.approx(20.0)


def test_a_compile_before_any_was_seen_counts_one_cores_seconds_over_this_machines_cores(tmp_path, monkeypatch):
    node = Target(name="node", backend="cuda", gpu_arch="90")
    monkeypatch.setattr(effort.os, "cpu_count", lambda: 16)
    # an H200 node's 16 cores built 179 Triton configs in 12.3 s
    assert effort.estimate(tmp_path, node, compiles=179) == pytest.approx(179 * 1.0 / 16)
    monkeypatch.setattr(effort.os, "cpu_count", lambda: 2)
    assert effort.estimate(tmp_path, Target(name="box"), compiles=48) == pytest.approx(48 * 0.75)
    effort.record_rates(tmp_path, node, compile_s=0.2)  # then the rate this project saw
    assert effort.estimate(tmp_path, node, compiles=10) == pytest.approx(2.0)


def test_a_gpu_search_before_any_was_seen_is_spread_over_the_targets_devices(tmp_path):
    """Four listed devices measure a search's configs four at a time (a four-GPU tune of 960
    configs took 28.6 s where one GPU took 79.8 s); the re-measure left after the search is not
    spread."""
    one = Target(name="one", backend="cuda", gpu_arch="90")
    four = Target(name="four", backend="cuda", gpu_arch="90", devices="0,1,2,3")
    gpu = effort.DEFAULT_RATES["gpu"]
    assert effort.estimate(tmp_path, one, evals=960, remeasures=150) == pytest.approx(960 * gpu["eval_s"] + 150 * gpu["remeasure_s"])
    assert effort.estimate(tmp_path, four, evals=960, remeasures=150) == pytest.approx(
        960 * gpu["eval_s"] / 4 + 150 * gpu["remeasure_s"])
    effort.record_rates(tmp_path, four, eval_s=0.03)  # then the rate this project saw, not divided again
    assert effort.estimate(tmp_path, four, evals=100) == pytest.approx(3.0)


def _results(tmp_path):
    path = tmp_path / "results" / "box" / "matmul" / "results.csv"
    path.parent.mkdir(parents=True)
    path.write_text("variant_id,shape_id,status\nv1,s,ok\n")
    return path


def test_the_same_key_keeps_the_measurements_and_another_sets_them_aside(tmp_path):
    tgt, path = Target(name="box"), _results(tmp_path)
    key = reuse.measure_key(tgt, RunOptions())
    assert reuse.prepare(path, key, fresh=False) is None and path.exists()
    assert reuse.prepare(path, key, fresh=False) is None and path.exists()  # a second run: kept
    other = reuse.measure_key(tgt, RunOptions(max_noise=0.02))
    assert other["key"] != key["key"]
    line = reuse.prepare(path, other, fresh=False)
    assert "other timing options" in line and not path.exists()
    aside = list((path.parent / reuse.SET_ASIDE).glob("*/results.csv"))
    assert len(aside) == 1 and "v1,s,ok" in aside[0].read_text()  # nothing measured is lost
    assert json.loads(reuse.key_path(path).read_text())["key"] == other["key"]


def test_fresh_sets_them_aside_whatever_the_key(tmp_path):
    tgt, path = Target(name="box"), _results(tmp_path)
    key = reuse.measure_key(tgt, RunOptions())
    reuse.prepare(path, key, fresh=False)
    assert reuse.prepare(path, key, fresh=True).startswith("--fresh") and not path.exists()


def test_a_winner_is_reused_only_for_the_same_finalists_and_key():
    a, b, c = {"BM": 8}, {"BM": 16}, {"BM": 32}
    winners = {"s": {"measure_key": "k1", "candidates": [{"config": {"BM": "8"}}, {"config": {"BM": "16"}}]}}
    assert list(reuse.reusable_winners(winners, {"s": [b, a]}, "k1")) == ["s"]
    assert reuse.reusable_winners(winners, {"s": [a, c]}, "k1") == {}
    assert reuse.reusable_winners(winners, {"s": [a, b]}, "k2") == {}


@pytest.mark.slow
def test_the_agent_races_configs_against_the_best_already_in_the_results(local_workspace):
    """The real runner and programs: a first run measures in full; with a row planted as a leader
    no config can match (1 ns, same variant and artifact), a raced run stops every config early
    and says so in its row, while the library's job is timed in full."""
    import csv
    import subprocess
    import sys

    ws = local_workspace
    ws.harness("build", "matmul", "--target", "native-qemu-free", "--shapes", "24x24x24", "--space", "space.yaml",
               "--library")
    ws.harness("run", "--target", "native-qemu-free", "--iters", "5")
    results = ws.path / "results" / "native-qemu-free" / "matmul" / "results.csv"
    rows = list(csv.DictReader(results.open()))
    full = {r["variant_id"]: int(r["samples"]) for r in rows if r["status"] == "ok"}
    assert not any("raced" in r["message"] for r in rows)
    planted = dict(next(r for r in rows if not r["variant_id"].startswith("lib:")), time_ns="1.0")
    with results.open("a", newline="") as f:
        csv.DictWriter(f, fieldnames=list(rows[0])).writerow(planted)
    subprocess.run([sys.executable, "-m", "remote_agent", "run", "--bundle", "build/native-qemu-free/matmul",
                    "--results", str(results), "--all", "--iters", "5", "--race", "0.25"],
                   cwd=ws.path, env=ws.env, check=True, capture_output=True, timeout=300)
    again = list(csv.DictReader(results.open()))[len(rows) + 1:]
    configs = [r for r in again if not r["variant_id"].startswith("lib:")]
    assert configs and all(r["status"] == "ok" and r["message"].startswith("raced:") for r in configs)
    assert sum(int(r["samples"]) for r in configs) < sum(n for v, n in full.items() if not v.startswith("lib:"))
    lib = [r for r in again if r["variant_id"].startswith("lib:")]
    assert lib and not any("raced" in r["message"] for r in lib)


def test_the_eta_follows_the_slower_pipeline_compiles_or_measurements(tmp_path):
    now = SimpleNamespace(t=0.0)
    eta = effort.Eta(tmp_path, Target(name="box"), todo=48, remeasures=10, clock=lambda: now.t)
    remeasure = 10 * effort.DEFAULT_RATES["cpu"]["remeasure_s"]
    # nothing compiled or measured yet: the rate seen last time
    assert eta.left(0) == pytest.approx(48 * effort.DEFAULT_RATES["cpu"]["eval_s"] + remeasure)
    # compile-bound (a loaded 2-core VM): 30 compiles in 120 s, 24 configs measured in 20 s of the
    # agent's time; 18 compiles left at 4 s, then the last round of 24 measured at 0.83 s each
    now.t = 120.0
    assert eta.left(24, compiled=30, measure_s=20.0, round_size=24) == pytest.approx(18 * 4.0 + 20.0 + remeasure)
    # measure-bound: every config compiled in 10 s, 12 of 48 measured in 60 s of the agent's time
    eta = effort.Eta(tmp_path, Target(name="box"), todo=48, remeasures=0, clock=lambda: now.t)
    now.t += 70.0
    assert eta.left(12, compiled=48, measure_s=60.0, round_size=12) == pytest.approx(36 * 5.0)
    assert effort.remeasure_jobs(3, 3, 5, True) == 60 and effort.remeasure_jobs(3, 0, 5, True) == 0


class _TimedSession:
    """What the winners' re-measure asks of a tune's Session; keeps the sampling time each round
    was submitted with and answers every job with a steady time (config BLOCK_M's value in ns)."""

    def __init__(self, tmp_path, is_gpu, remeasure_max_time):
        from harness.run import RunOptions

        self.shapes = [SimpleNamespace(id="s")]
        self.target = SimpleNamespace(is_gpu=is_gpu)
        self.library, self.results_path = False, tmp_path / "results.csv"
        self.run_options = RunOptions(max_time=0.75)
        self.remeasure_max_time = remeasure_max_time
        self.max_times, self._rows = [], []

    def rows(self):
        return self._rows

    def submit(self, pairs, fidelity, library, pin=False, timing=None):
        self.max_times.append(timing.max_time)
        return pairs

    def collect(self, pairs):
        rows = [{"shape_id": shape.id, "variant_id": "v%d" % cfg["BLOCK_M"], "status": "ok", "estimator": "min",
                 "time_ns": float(cfg["BLOCK_M"]), "noise": 0.001, "cfg_BLOCK_M": cfg["BLOCK_M"]}
                for cfg, shape in pairs]
        self._rows += rows
        return rows


def test_a_cpu_remeasure_samples_each_job_for_the_levels_time_and_the_search_keeps_its_own(tmp_path):
    from harness.remeasure import remeasure_winners
    from harness.strategies import Trial

    space = {"BLOCK_M": [16, 32]}
    history = [Trial({"BLOCK_M": 16}, "ok", 16.0), Trial({"BLOCK_M": 32}, "ok", 32.0)]
    cpu = _TimedSession(tmp_path, is_gpu=False, remeasure_max_time=effort.get("default").remeasure_time_cpu)
    assert remeasure_winners(cpu, space, {"s": history}, top=2, repeats=5)["s"]["config"] == {"BLOCK_M": 16}
    assert cpu.max_times == [0.3] * 5 and cpu.run_options.max_time == 0.75  # the search's own again after
    gpu = _TimedSession(tmp_path, is_gpu=True, remeasure_max_time=0.3)
    remeasure_winners(gpu, space, {"s": history}, top=2, repeats=5)
    assert gpu.max_times == [0.75] * 5  # GPU jobs: the median's own time rule
    assert effort.get("quick").remeasure_time_cpu < effort.get("default").remeasure_time_cpu
    assert effort.get("full").remeasure_time_cpu is None  # full: each job to the run's noise rule


def test_a_cpu_build_compiles_the_levels_budget_and_exhaustive_the_whole_space(local_workspace):
    """harness build on a CPU board follows --effort as tune does: the seeds and sampled configs up
    to the level's budget a shape (quick: 8), the whole space only with exhaustive."""
    ws = local_workspace
    (ws.path / "wide.yaml").write_text("MR: [1, 2, 4]\nNR: [16, 32]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1, 0]\n")
    out = ws.harness("build", "matmul", "--target", "native-qemu-free", "--shapes", "24x32x24", "--space", "wide.yaml",
                     "--effort", "quick").stdout
    assert "effort quick: 8 seeded and sampled configs a shape at most" in out, out
    manifest = json.loads((ws.path / "build" / "native-qemu-free" / "matmul" / "manifest.json").read_text())
    assert 0 < len(manifest["variants"]) <= 8
    out = ws.harness("build", "matmul", "--target", "native-qemu-free", "--shapes", "24x32x24", "--space", "wide.yaml",
                     "--effort", "exhaustive").stdout
    assert "build (every config the rules keep for these shapes): " in out, out
    manifest = json.loads((ws.path / "build" / "native-qemu-free" / "matmul" / "manifest.json").read_text())
    assert len(manifest["variants"]) > 8


def test_an_every_config_plan_counts_what_the_rules_keep():
    """The line before an exhaustive build or tune counts the configs the kernel's rules keep for the
    shapes (the packed matmul's space is 33,600 configs, 144 of them kept for 64x64x64), not the
    space before pruning; over COUNT_LIMIT pairs it does not count."""
    from harness import kernels
    from harness.api.build import COUNT_LIMIT, feasible_plan
    from harness.shapes import parse_shape

    kern, tgt = kernels.get("matmul"), Target(name="box", arch="x86_64", march="skylake-avx512")
    space = {"MR": [1, 6, 16], "NR": [16, 64, 256], "KC": [64, 128], "MC": [16], "NC": [64], "PACK_B": [1]}
    small, big = parse_shape("64x64x64"), parse_shape("128x128x128")
    configs, jobs = feasible_plan(kern, tgt, [small, big], space)
    # NR 256 is past N's power of two on both and MR 16 x NR 64 needs 69 registers: 5 register tiles
    # x 2 KC; KC 128 is past K = 64, so those 5 serve 128x128x128 only
    assert (configs, jobs) == (10, 15)
    assert feasible_plan(kern, tgt, [small] * (COUNT_LIMIT // 18 + 1), space) is None


class _FloorSession(_TimedSession):
    """Answers every job with its config's floor (``floors``: {BLOCK_M: ns}) and keeps each round's
    (configs, pin, max_time)."""

    def __init__(self, tmp_path, floors):
        super().__init__(tmp_path, is_gpu=False, remeasure_max_time=0.3)
        self.floors, self.rounds = floors, []

    def submit(self, pairs, fidelity, library, pin=False, timing=None):
        self.rounds.append(([cfg["BLOCK_M"] for cfg, _ in pairs], pin, timing.max_time))
        return pairs

    def collect(self, pairs):
        rows = [{"shape_id": shape.id, "variant_id": "v%d" % cfg["BLOCK_M"], "status": "ok", "estimator": "min",
                 "time_ns": self.floors[cfg["BLOCK_M"]], "noise": 0.001, "cfg_BLOCK_M": cfg["BLOCK_M"]}
                for cfg, shape in pairs]
        self._rows += rows
        return rows


def test_a_config_one_process_read_slow_gets_two_more_before_the_finalists_are_picked(tmp_path):
    from harness.remeasure import finalists, not_search_rows, reads_wanted, sift
    from harness.strategies import Trial

    floors = {16: 100.0, 32: 102.0, 48: 104.0, 64: 101.0, 128: 300.0}
    space = {"BLOCK_M": sorted(floors)}
    # the search's one process each: 64 read 1.75x its floor (a process that stayed slow, or raced early)
    searched = {**floors, 64: 175.0}
    history = [Trial({"BLOCK_M": m}, "ok", t, estimator="min") for m, t in searched.items()]
    assert [c["BLOCK_M"] for c in finalists(history, 3)] == [16, 32, 48]
    session = _FloorSession(tmp_path, floors)
    sifted = sift(session, space, {"s": history})
    # every config within 2x of the best, in two more processes, together, the second round in reverse
    # order, no racing, a third of a re-measure job's time; 128 (3x the best) is not worth another process
    assert session.rounds == [([16, 32, 48, 64], True, pytest.approx(0.1)), ([64, 48, 32, 16], True, pytest.approx(0.1))]
    # the lowest of its minima; 48 (4 % behind) joins as one the search cannot tell from the fastest
    assert [c["BLOCK_M"] for c in finalists(sifted["s"], 3)] == [16, 64, 32, 48]
    # its rows are no search's (a resumed search's budget does not count them) ...
    assert not_search_rows(session.results_path) == frozenset(range(8))
    # ... but a second run of the same command takes them in: nothing left to sift, the same finalists
    again = sift(session, space, {"s": history})
    assert reads_wanted(again["s"]) == [] and len(session.rounds) == 2
    assert finalists(again["s"], 3) == finalists(sifted["s"], 3)
    # a GPU search (median-decided times) is never sifted
    assert reads_wanted([Trial({"BLOCK_M": m}, "ok", t) for m, t in searched.items()]) == []


def test_a_configs_time_is_the_lowest_minimum_of_its_processes_or_the_latest_median():
    from harness.strategies import Trial
    from harness.strategies.base import Summary, key

    by_min = Summary([Trial({"A": 1}, "ok", 140.0, estimator="min"), Trial({"A": 1}, "ok", 101.0, estimator="min"),
                      Trial({"A": 1}, "ok", 103.0, estimator="min")])
    assert by_min.value(key({"A": 1})) == 101.0
    by_median = Summary([Trial({"A": 1}, "ok", 101.0), Trial({"A": 1}, "ok", 140.0)])
    assert by_median.value(key({"A": 1})) == 140.0
    failed_last = Summary([Trial({"A": 1}, "ok", 101.0, estimator="min"), Trial({"A": 1}, "crash")])
    assert failed_last.value(key({"A": 1})) is None
