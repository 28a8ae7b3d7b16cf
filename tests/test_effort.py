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
    q, d, f = effort.get("quick"), effort.get(None), effort.get("full")
    assert d.name == "default" and f.strategy == "exhaustive" and f.race == 0
    assert q.budget_cpu < d.budget_cpu and q.budget_gpu < d.budget_gpu
    assert q.repeats <= d.repeats and q.top <= d.top
    for level in effort.LEVELS.values():
        assert level.name in effort.help_text()


def test_an_unknown_level_is_one_line():
    with pytest.raises(HarnessError, match="--effort fast: choose quick, default, full"):
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


def test_the_eta_takes_the_steady_rate_after_the_first_round(tmp_path):
    now = SimpleNamespace(t=30.0)
    eta = effort.Eta(tmp_path, Target(name="box"), todo=100, remeasures=10, clock=lambda: now.t)
    remeasure = 10 * effort.DEFAULT_RATES["cpu"]["remeasure_s"]
    # the first round (slow: the agent started, the first compiles): the rate seen last time
    assert eta.left(20) == pytest.approx(80 * effort.DEFAULT_RATES["cpu"]["eval_s"] + remeasure)
    now.t = 40.0  # 20 more configs in 10 s: 0.5 s each from here on
    assert eta.left(40) == pytest.approx(60 * 0.5 + remeasure)
    assert effort.remeasure_jobs(3, 3, 5, True) == 60 and effort.remeasure_jobs(3, 0, 5, True) == 0
