"""Search strategies, the round driver, the simulator and the noise-aware winner.

Everything replays tests/data/cpu_fullspace/matmul_local_x86_64.csv: the full space (250 configs)
of the CPU matmul as it was when recorded (the tile loop nest, BLOCK_M / BLOCK_N / BLOCK_K /
GROUP_M; since replaced by the packed kernel, whose space and rules are its own), built and run
natively on the development machine for three shapes, one of which (64x192x96) has 115 configs
pruned by that kernel's rules. The recorded space and rules are kept here (RECORDED_SPACE,
RECORDED_RULES): the strategies are tested on a real landscape, whatever the kernel is today.
"""

import importlib.util
import math
import random
import statistics
from pathlib import Path

import pytest

from harness.kernels.gemm_tiles import GROUP_M_USELESS, tile_rules
from harness.shapes import parse_shape
from harness.space import expand, first_pruning_rule
from harness.strategies import (Trial, get_strategy, key, load_history, names, pruning_predicate,
                                trials_from_rows, tune_rounds)
from harness.strategies.base import StrategyError, config_id
from harness.strategies.driver import STOP_BUDGET, STOP_FINISHED, STOP_NO_RESULTS, STOP_TIME
from harness.strategies.simulate import Replay, evaluations_to_target, load_recorded, simulate
from harness.strategies.winner import (interleaved_rounds, pick_winner, plan_interleaved, remeasure,
                                       winner_from_trials)
from harness.targets import Target
from remote_agent import contract
from remote_agent.results import ResultsWriter

DATA = Path(__file__).resolve().parent / "data" / "cpu_fullspace" / "matmul_local_x86_64.csv"
PRUNED_SHAPE = "64x192x96_fp32_NN"
# the CPU matmul's space and rules when the recording was made
RECORDED_SPACE = {"BLOCK_M": [4, 8, 16, 32, 64], "BLOCK_N": [8, 16, 32, 64, 128], "BLOCK_K": [8, 16, 32, 64, 128],
                  "GROUP_M": [1, 8]}
CPU_SPACE = RECORDED_SPACE
RECORDED_RULES = [*tile_rules(m_floor=4, n_floor=8, k_floor=8), GROUP_M_USELESS]
CPU_RULES = RECORDED_RULES
NO_OPTUNA = importlib.util.find_spec("optuna") is None
ALL = [pytest.param(n, marks=pytest.mark.skipif(NO_OPTUNA, reason="bayes needs optuna"))
       if n == "bayes" else n for n in names()]
MODEL_BASED = [p for p in ALL if p in ("random", "genetic") or getattr(p, "values", ("",))[0] == "bayes"]


@pytest.fixture(scope="module")
def recordings():
    return {r.shape_id: r for r in load_recorded(DATA)}


@pytest.fixture(scope="module")
def rec(recordings):
    return recordings[PRUNED_SHAPE]


def real_rules_pruned(shape_text):
    """The kernel's own pruning predicate for one shape on the local target, as it stood when the
    recording was made: its rules, and K a multiple of BLOCK_K (the C++ kernel masked its K tail
    later, so that rule went; the recording has no rows for those configs)."""
    shape, target = parse_shape(shape_text), Target(name="local")
    return lambda cfg: (first_pruning_rule(CPU_RULES, cfg, shape, target) is not None
                        or shape.K % cfg["BLOCK_K"] != 0)


def configs_of(history):
    return [key(t.config) for t in history]


class Recorder:
    """evaluate_batch over a recording that remembers every batch it was given."""

    def __init__(self, rec, is_pruned=None, seed=0):
        self.replay = Replay(rec, seed=seed)
        self.is_pruned = is_pruned
        self.batches = []

    def __call__(self, configs, fidelity=1):
        if self.is_pruned is not None:
            bad = [c for c in configs if self.is_pruned(c)]
            assert not bad, "pruned configs proposed: %r" % bad
        self.batches.append((list(configs), fidelity))
        return self.replay(configs, fidelity)


def run(name, rec, seed=0, budget=None, history=None, batch_size=8, evaluate=None, **kw):
    strategy = get_strategy(name, seed=seed, batch_size=batch_size)
    evaluate = evaluate or Recorder(rec)
    return tune_rounds(strategy, rec.space, rec.is_pruned, evaluate, budget=budget, history=history, **kw)


# --- the recording itself -------------------------------------------------------------------

def test_recording_is_a_full_space_run(recordings):
    assert set(recordings) == {"256x256x256_fp32_NN", "512x512x512_fp32_NN", PRUNED_SHAPE}
    full = len(expand(CPU_SPACE))
    for r in recordings.values():
        assert r.space == CPU_SPACE
        assert len(r.table) + len(r.pruned) == full
        assert r.best_ns is not None and r.best_ns > 0
    rec = recordings[PRUNED_SHAPE]
    # the recorded pruned rows are exactly what the kernel's rules prune for this shape
    rules = real_rules_pruned("64x192x96:fp32")
    assert {key(c) for c in expand(CPU_SPACE) if rules(c)} == rec.pruned
    assert len(rec.pruned) == 115


# --- each strategy ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_deterministic_under_a_seed(name, rec):
    first = run(name, rec, seed=3, budget=30)
    again = run(name, rec, seed=3, budget=30)
    assert configs_of(first.history) == configs_of(again.history)
    assert [t.time_ns for t in first.history] == [t.time_ns for t in again.history]
    if name != "exhaustive":
        other = run(name, rec, seed=4, budget=30)
        assert configs_of(other.history) != configs_of(first.history)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("budget", [1, 13, 29])
def test_stays_within_budget(name, budget, rec):
    evaluate = Recorder(rec)
    result = run(name, rec, seed=1, budget=budget, evaluate=evaluate)
    assert evaluate.replay.evaluations == len(result.history) <= budget
    if name == "halving":  # plans whole rungs: the largest rung 0 whose rungs all fit
        assert len(result.history) == sum(get_strategy("halving").rung_sizes(
            get_strategy("halving").plan_n0(len(rec.table), budget)))
        assert len(result.history) > budget - 4
    else:
        assert result.stopped == STOP_BUDGET and len(result.history) == budget
    assert all(len(configs) <= 8 for configs, _ in evaluate.batches)


@pytest.mark.parametrize("name", ALL)
def test_budget_counts_the_history_already_on_disk(name, rec):
    done = run(name, rec, seed=2, budget=10).history
    evaluate = Recorder(rec)
    result = run(name, rec, seed=2, budget=25, history=done, evaluate=evaluate)
    assert result.history[:len(done)] == done
    assert evaluate.replay.evaluations == len(result.history) - len(done)
    if name == "halving":  # whole rungs only
        assert 25 - 3 <= len(result.history) <= 25
    else:
        assert len(done) == 10 and len(result.history) == 25


@pytest.mark.parametrize("name", ALL)
def test_never_proposes_a_pruned_config(name, rec):
    # the kernel's own rules for this shape prune 115 of the 250 configs
    is_pruned = real_rules_pruned("64x192x96:fp32")
    evaluate = Recorder(rec, is_pruned=is_pruned)
    strategy = get_strategy(name, seed=5, batch_size=8)
    result = tune_rounds(strategy, CPU_SPACE, is_pruned, evaluate, budget=60)
    assert 57 <= len(result.history) <= 60  # halving plans whole rungs
    assert not any(is_pruned(t.config) for t in result.history)


@pytest.mark.parametrize("name", MODEL_BASED)
def test_never_proposes_a_pruned_config_when_most_of_the_space_is_pruned(name, rec):
    # only 12 configs survive: model-based proposals land in pruned territory and are repaired
    allowed = {key(c) for c in expand(CPU_SPACE) if c["BLOCK_N"] == 32 and c["GROUP_M"] == 1
               and c["BLOCK_K"] in (8, 16) and c["BLOCK_M"] != 4 and key(c) in rec.table}
    is_pruned = lambda c: key(c) not in allowed  # noqa: E731
    evaluate = Recorder(rec, is_pruned=is_pruned)
    result = tune_rounds(get_strategy(name, seed=0), CPU_SPACE, is_pruned, evaluate, budget=100)
    assert result.stopped == STOP_FINISHED
    assert sorted(configs_of(result.history)) == sorted(allowed)


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_finishes_the_space_without_repeats(name, recordings):
    rec = recordings[PRUNED_SHAPE]
    result = run(name, rec, seed=0)
    assert result.stopped == STOP_FINISHED
    distinct = set(configs_of(result.history))
    if name == "halving":  # rung 0 is every config; rungs 1.. re-measure the best third
        assert distinct == set(rec.table)
        assert len(result.history) == sum(get_strategy("halving").rung_sizes(len(rec.table)))
    else:
        assert len(result.history) == len(distinct) == len(rec.table)
    assert result.best.config == rec.best_config


def write_rows(path, rec, trials, config_names):
    """Append Trials as results rows, as the agent would."""
    writer = ResultsWriter(str(path), contract.results_header(config_names, []))
    for t in trials:
        row = {"schema_version": contract.RESULTS_SCHEMA, "variant_id": key_id(t.config),
               "shape_id": rec.shape_id, "device": "cpu", "status": t.status,
               "time_ns_median": t.time_ns, "iterations": 10 * t.fidelity}
        row.update({contract.CONFIG_PREFIX + n: v for n, v in t.config.items()})
        writer.write(row)
    writer.close()


def key_id(config):
    from harness.strategies import config_id

    return config_id(config)


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("name", ALL)
def test_resumes_after_interruption(name, rec, tmp_path):
    """A run killed mid-round resumes from the results CSV alone: nothing measured is measured
    again, the budget holds, and a run stopped between rounds continues exactly as if it had
    never stopped."""
    budget, names = 40, list(rec.space)
    whole = run(name, rec, seed=7, budget=budget)

    # killed in the middle of the third round, after 3 of its configs were written
    csv_path = tmp_path / "results.csv"
    calls = {"n": 0}

    def dies_in_round_3(configs, fidelity=1):
        calls["n"] += 1
        trials = Replay(rec)(configs, fidelity)
        if calls["n"] == 3:
            write_rows(csv_path, rec, trials[:3], names)
            raise Interrupt()
        write_rows(csv_path, rec, trials, names)
        return trials

    with pytest.raises(Interrupt):
        run(name, rec, seed=7, budget=budget, evaluate=dies_in_round_3)
    on_disk = load_history(csv_path, rec.space, rec.shape_id)
    assert len(on_disk) == 19
    evaluate = Recorder(rec)
    resumed = run(name, rec, seed=7, budget=budget, history=on_disk, evaluate=evaluate)
    assert len(resumed.history) == budget
    assert evaluate.replay.evaluations == budget - 19
    assert configs_of(resumed.history)[:19] == configs_of(on_disk)
    if name == "halving":  # re-measures are by design; each at its own rung, once
        counts = {}
        for k in configs_of(resumed.history):
            counts[k] = counts.get(k, 0) + 1
        assert max(counts.values()) <= len(get_strategy("halving").rung_sizes(27))
    else:
        assert len(set(configs_of(resumed.history))) == budget

    # stopped between rounds (after 16 evaluations): the same configs as the whole run
    csv2 = tmp_path / "between.csv"
    first = run(name, rec, seed=7, budget=budget, stop=lambda h: len(h) >= 16)
    assert len(first.history) == 16
    write_rows(csv2, rec, first.history, names)
    continued = run(name, rec, seed=7, budget=budget, history=load_history(csv2, rec.space, rec.shape_id))
    assert configs_of(continued.history) == configs_of(whole.history)


# --- the driver -------------------------------------------------------------------------------

def test_time_limit_shrinks_the_last_round(rec):
    now = {"t": 0.0}

    def slow(configs):  # one second per config, on a fake clock
        now["t"] += len(configs)
        return Replay(rec)(configs)

    result = tune_rounds(get_strategy("random", seed=0), rec.space, rec.is_pruned, slow, budget=100,
                         time_limit=10.0, clock=lambda: now["t"])
    assert result.stopped == STOP_TIME
    assert len(result.history) == 10
    assert result.round_sizes == [8, 2]


def test_time_limit_starts_no_round_that_cannot_finish_an_evaluation(rec):
    now = {"t": 0.0}

    def slow(configs):  # three seconds per config: after 9 s, 1 s left holds none
        now["t"] += 3 * len(configs)
        return Replay(rec)(configs)

    result = tune_rounds(get_strategy("random", seed=0, batch_size=3), rec.space, rec.is_pruned, slow,
                         budget=100, time_limit=10.0, clock=lambda: now["t"])
    assert result.stopped == STOP_TIME and result.round_sizes == [3] and now["t"] == 9


def test_time_limit_always_runs_the_first_round(rec):
    now = {"t": 0.0}

    def ticking():  # every look at the clock is already past the limit
        now["t"] += 1.0
        return now["t"]

    result = tune_rounds(get_strategy("random", seed=0), rec.space, rec.is_pruned, Replay(rec), budget=100,
                         time_limit=0.5, clock=ticking)
    assert result.stopped == STOP_TIME and result.round_sizes == [8]


def test_search_rounds_stop_at_the_time_limit_as_the_driver_does(tmp_path):
    from harness import kernels
    from harness.build import BuildOptions
    from harness.rounds import Session, search
    from harness.run import RunOptions

    now = {"t": 0.0}

    class FakeSession(Session):  # a round costs three seconds per pair, on a fake clock
        def execute(self, pairs, fidelity=1, library_shapes=()):
            now["t"] += 3 * len(pairs)
            self.rounds += 1
            return [dict({contract.CONFIG_PREFIX + n: str(v) for n, v in cfg.items()}, shape_id=shape.id,
                         variant_id="v%d" % i, status="ok", time_ns_median=str(1000.0 + i))
                    for i, (cfg, shape) in enumerate(pairs)]

    space = {"MR": [1, 2, 4], "NR": [16, 32, 48], "KC": [64], "MC": [16], "NC": [64], "PACK_B": [1, 0]}
    session = FakeSession(tmp_path, Target(name="local"), kernels.get("matmul"), [parse_shape("32x32x32")],
                          BuildOptions(), RunOptions())
    (s,) = search(session, space, "random", batch_size=3, time_limit=10.0, clock=lambda: now["t"])
    assert s.stopped == STOP_TIME and len(s.new) == 3 and session.rounds == 1 and now["t"] == 9
    now["t"] = 0.0
    (s,) = search(session, space, "random", batch_size=3, time_limit=0.5,
                  clock=lambda: now.__setitem__("t", now["t"] + 1.0) or now["t"])
    assert s.stopped == STOP_TIME and len(s.new) == 3 and session.rounds == 2  # the first round ran


def test_drive_runs_shapes_in_lockstep_and_shares_the_time_left(recordings):
    from harness.strategies.driver import ShapeSearch, drive

    now = {"t": 0.0}
    recs = [recordings["256x256x256_fp32_NN"], recordings[PRUNED_SHAPE]]
    searches = [ShapeSearch(get_strategy("random", seed=0, batch_size=4), r.is_pruned, shape=r) for r in recs]
    rounds = []

    def evaluate(asks, fidelity):  # one second per config, all shapes of a round evaluated at once
        rounds.append([len(b.configs) for _, b in asks])
        now["t"] += sum(len(b.configs) for _, b in asks)
        return [Replay(s.shape)(b.configs) for s, b in asks]

    number = drive(searches, CPU_SPACE, evaluate, budget=20, time_limit=10.5, clock=lambda: now["t"])
    # round 1: 4 + 4 in 8 s; the 2.5 s left hold 2 evaluations: 1 per shape; then 0.5 s hold none
    assert number == 2 and rounds == [[4, 4], [1, 1]]
    assert [s.stopped for s in searches] == [STOP_TIME, STOP_TIME]
    assert [len(s.history) for s in searches] == [5, 5] and all(s.best is not None for s in searches)


def test_accepts_results_rows_and_stops_when_a_round_comes_back_empty(rec, tmp_path):
    names = list(rec.space)

    def rows_back(configs):
        path = tmp_path / ("r%d.csv" % len(list(tmp_path.iterdir())))
        write_rows(path, rec, Replay(rec)(configs), names)
        from harness.strategies import read_rows

        return read_rows(path)

    result = tune_rounds(get_strategy("genetic", seed=0), rec.space, rec.is_pruned, rows_back, budget=12)
    assert len(result.history) == 12 and all(t.ok for t in result.history)
    nothing = tune_rounds(get_strategy("random"), rec.space, rec.is_pruned, lambda c: [], budget=12)
    assert nothing.stopped == STOP_NO_RESULTS and nothing.history == []


def test_a_config_the_build_prunes_comes_back_as_a_failed_trial_and_the_search_goes_on(rec):
    """A config over a resource only the compile can count (shared memory on a GPU) comes back
    as a ``pruned`` row: a failed trial of that config, not a round that brought nothing."""
    names = list(rec.space)

    def over_the_device(configs):
        return [dict({"cfg_" + n: str(c[n]) for n in names}, status=contract.PRUNED, shape_id="s",
                     message="shared_exceeds_device: compiled shared memory 245760 bytes over 232448")
                for c in configs]

    result = tune_rounds(get_strategy("random", seed=0, batch_size=4), rec.space, rec.is_pruned, over_the_device,
                         budget=12)
    assert result.stopped == STOP_BUDGET and len(result.history) == 12
    assert {t.status for t in result.history} == {contract.PRUNED} and result.best is None
    assert len({key(t.config) for t in result.history}) == 12  # none asked twice


def test_a_strategy_that_proposes_a_pruned_config_is_stopped(rec):
    class Broken(type(get_strategy("random"))):
        def _propose(self, summary, problem, limit, budget):
            from harness.strategies.base import Batch

            return Batch([dict(next(iter(rec.pruned)))])

    with pytest.raises(StrategyError):
        tune_rounds(Broken(), rec.space, rec.is_pruned, Replay(rec), budget=5)


def test_failures_count_and_are_not_picked(rec):
    crashing = {key(rec.best_config)}

    def evaluate(configs):
        out = Replay(rec)(configs)
        return [Trial(t.config, "crash") if key(t.config) in crashing else t for t in out]

    result = tune_rounds(get_strategy("exhaustive"), rec.space, rec.is_pruned, evaluate)
    assert len(result.history) == len(rec.table)
    assert key(result.best.config) not in crashing


def test_history_from_rows_combines_shapes():
    rows = []
    for shape, t in (("a", 100.0), ("b", 400.0)):
        rows.append({"shape_id": shape, "status": "ok", "time_ns_median": str(t), "cfg_X": "1"})
    rows.append({"shape_id": "a", "status": "ok", "time_ns_median": "50", "cfg_X": "2"})
    rows.append({"shape_id": "b", "status": "pruned", "time_ns_median": "", "cfg_X": "2"})
    rows.append({"shape_id": "a", "status": "crash", "time_ns_median": "", "cfg_X": "3"})
    rows.append({"shape_id": "b", "status": "ok", "time_ns_median": "10", "cfg_X": "3"})
    trials = trials_from_rows(rows, {"X": [1, 2, 3]})
    assert [(t.config["X"], t.status, t.time_ns) for t in trials] == [
        (1, "ok", pytest.approx(200.0)), (2, "ok", pytest.approx(50.0)), (3, "crash", None)]
    assert [t.time_ns for t in trials_from_rows(rows, {"X": [1, 2, 3]}, shape_id="b")] == [400.0, 10.0]


def test_pruning_predicate_over_several_shapes():
    target = Target(name="local")
    shapes = [parse_shape("64x192x96:fp32"), parse_shape("256x256x256:fp32")]
    either = pruning_predicate(CPU_RULES, shapes, target)
    only_small = pruning_predicate(CPU_RULES, shapes[:1], target)
    cfg = {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 8}  # one row of tiles at M = 64
    assert only_small(cfg) and not either(cfg)
    assert pruning_predicate(CPU_RULES, shapes, target, lambda c, s: "too big")(cfg)


def test_unknown_strategy_names_the_choices():
    with pytest.raises(ValueError, match="did you mean 'bayes'"):
        get_strategy("bayse")


# --- the simulator ----------------------------------------------------------------------------

def test_simulator_counts_evaluations_to_the_target(recordings):
    rec = recordings["256x256x256_fp32_NN"]
    target = rec.best_ns * 1.03
    order = [c for c in expand(rec.space) if not rec.is_pruned(c)]
    first_hit = next(i for i, c in enumerate(order, 1) if rec.true_time(c) <= target)
    res = simulate(get_strategy("exhaustive"), rec, within=0.03)
    assert res.to_target == first_hit
    assert res.evaluations == math.ceil(first_hit / 8) * 8  # it stops at the end of that round
    assert res.found_ratio <= 1.03


@pytest.mark.skipif(NO_OPTUNA, reason="bayes needs optuna")
def test_model_based_search_beats_random_on_the_recording(recordings):
    rec = recordings["256x256x256_fp32_NN"]
    med = {}
    for name in ("random", "bayes", "genetic"):
        runs = [simulate(get_strategy(name, seed=s), rec).to_target for s in range(8)]
        med[name] = sorted(runs)[len(runs) // 2]
    assert med["bayes"] < med["random"] and med["genetic"] < med["random"]
    assert med["bayes"] <= 0.15 * rec.feasible


def test_incumbent_uses_the_latest_measurement(recordings):
    rec = recordings["256x256x256_fp32_NN"]
    best, slow = rec.best_config, next(c for c in expand(rec.space) if rec.true_time(c) > 2 * rec.best_ns)
    # a slow config measured fast by noise at fidelity 1, then honestly at fidelity 3
    hist = [Trial(slow, "ok", 1.0, None, 1), Trial(best, "ok", rec.best_ns, None, 1)]
    assert evaluations_to_target(hist, rec, 0.03) is None
    hist.append(Trial(slow, "ok", rec.true_time(slow), None, 3))
    assert evaluations_to_target(hist, rec, 0.03) == 3


@pytest.mark.parametrize("name", ["genetic", "random", "halving"])
def test_a_strategy_asks_the_preferred_configs_first_and_the_rest_once_they_are_spent(name):
    """Problem.prefer (the configs an earlier tune built for the shape): the seeded order starts
    with them and the genetic search repairs its children to them, so a budget that fits in them
    asks nothing else; once they are all asked, the search goes on over the whole space."""
    space = {"A": list(range(8)), "B": list(range(8))}
    is_pruned = lambda c: False  # noqa: E731
    strategy = get_strategy(name, seed=3, batch_size=4)
    problem = strategy.problem(space, is_pruned)
    preferred = [{"A": a, "B": b} for a in (0, 1, 6) for b in (2, 5, 7)] + [{"A": 9, "B": 0}]  # (the last: outside)
    problem.prefer(preferred)
    assert int(problem.preferred.sum()) == 9
    wanted = {key(c) for c in preferred[:9]}
    history, asked = [], []
    while len(asked) < 16:
        batch = strategy.next_batch(history, space, is_pruned)
        if not batch.configs:
            break
        for cfg in batch.configs:
            asked.append(key(cfg))
            history.append(Trial(cfg, "ok", 1.0 + abs(cfg["A"] - 3) + abs(cfg["B"] - 4), None, 1))
    assert set(asked[:9]) == wanted and not set(asked[9:]) & wanted and len(set(asked)) == len(asked)
    # a config read back from JSON (a tuple value is a list there) is found all the same
    pairs = get_strategy(name, seed=3, batch_size=4).problem({"P": [(1, 2), (3, 4)], "B": [0, 1]}, is_pruned)
    pairs.prefer([{"P": [3, 4], "B": 1}])
    assert [pairs.candidates[i] for i in pairs.preferred.nonzero()[0]] == [{"P": (3, 4), "B": 1}]
    # nothing preferred: the order of before
    plain = get_strategy(name, seed=3, batch_size=4)
    plain.problem(space, is_pruned).prefer([{"A": 9, "B": 9}])
    assert plain.problem(space, is_pruned).preferred is None


# --- the noise-aware winner -------------------------------------------------------------------

def test_interleaved_plan():
    assert plan_interleaved("ABC", 3) == list("ABCBCACAB")
    assert plan_interleaved("ABC", 2, rotate=False) == list("ABCABC")
    for rnd in interleaved_rounds("ABCD", 6):
        assert sorted(rnd) == list("ABCD")


def planted(truth, sd, repeats, seed):
    """Interleaved measurements with planted noise: every sample is truth * (1 + N(0, sd)), plus a
    slow drift over the session (the machine warming up) that interleaving cancels."""
    rng = random.Random(seed)
    samples = {c: [] for c in truth}
    for i, c in enumerate(plan_interleaved(sorted(truth), repeats)):
        drift = 1.0 + 0.0005 * i
        samples[c].append(truth[c] * drift * (1.0 + rng.gauss(0.0, sd)))
    return samples


def test_winner_is_stable_under_planted_noise():
    # A and B are the same speed within 0.2%, with 1% noise; C is 6% slower
    truth = {"v_b": 100.2, "v_a": 100.0, "v_c": 106.0}
    winners, naive = [], []
    for seed in range(200):
        samples = planted(truth, 0.01, repeats=9, seed=seed)
        w = pick_winner(samples)
        winners.append(w.id)
        naive.append(min(samples, key=lambda c: sorted(samples[c])[len(samples[c]) // 2]))
        assert "v_c" not in w.tied and w.spread > 0
    # the stated tie rule (smallest config id) picks A run after run...
    assert winners.count("v_a") >= 0.98 * len(winners)
    # (a tie nearly always: the rounds' sign test, at 5 %, orders the two in 14 of 200 of these
    # runs, 12 of them behind A, which is 0.2 % faster; then the leader wins)
    assert sum(w.decided == "tie" for w in [pick_winner(planted(truth, 0.01, 9, s)) for s in range(50)]) >= 45
    # ...where the plain fastest median is a coin toss between A and B
    assert 0.3 < naive.count("v_a") / len(naive) < 0.7


def test_a_candidate_slower_in_every_round_is_behind_however_wide_the_drift_makes_the_spreads():
    # the GPU's clock moves from round to round by up to 8 %, both candidates alike; the leader is
    # 3 % faster in every round, so the spreads (p80 - p20, about 6 %) tie them, but the rounds do not
    drift = [1.00, 0.94, 1.05, 0.97, 1.08, 0.95, 1.02, 0.99, 1.06, 0.93]
    fast = [85.0 * d for d in drift]
    slow = [87.6 * d for d in drift[:-1]] + [85.0 * drift[-1] * 0.99]  # one round of ten the other way
    w = pick_winner({"v_a_slow": slow, "v_b_fast": fast})
    assert (w.id, w.decided) == ("v_b_fast", "clear") and "sign test" in w.rule
    assert w.margin_pct == pytest.approx(100 * (statistics.median(slow) / statistics.median(fast) - 1))
    # slower in only half the rounds: a tie
    mixed = slow[:5] + [85.0 * d * 0.99 for d in drift[5:]]
    assert pick_winner({"v_a_slow": mixed, "v_b_fast": fast}).decided == "tie"
    # five rounds must all agree: slower in 4 of 5 is a tie again
    four = [87.6 * d for d in drift[:4]] + [85.0 * drift[4] * 0.99]
    w = pick_winner({"v_a_slow": four, "v_b_fast": fast[:5]})
    assert (w.id, w.decided) == ("v_a_slow", "tie")
    assert pick_winner({"v_a_slow": slow[:5], "v_b_fast": fast[:5]}).decided == "clear"
    # judged by their minimum (CPU targets), repeats are not paired: the lowest floors decide
    trials = lambda ts: [Trial({}, "ok", t, None, 1, 0.005, "min") for t in ts]  # noqa: E731
    assert pick_winner({"v_a_slow": trials(slow), "v_b_fast": trials(fast)}).decided == "tie"


def test_an_unsure_winners_more_rounds_measure_only_the_candidates_still_in_contention():
    from harness.remeasure import contenders, more_rounds, unsure_winner

    cfgs = [{"BLOCK_M": m} for m in (16, 32, 64, 128)]
    a, b, c, d = (config_id(cfg) for cfg in cfgs)
    # a and b tied within 3 % noise (the winner is unsure); c and d 20 and 30 % behind in every round
    groups = {a: [100.0, 103.0, 97.0, 101.0, 99.0], b: [101.0, 100.0, 102.0, 98.0, 103.0],
              c: [120.0, 121.0, 119.0, 120.0, 122.0], d: [130.0, 131.0, 129.0, 132.0, 130.0]}
    assert unsure_winner(groups)
    win = pick_winner(groups)
    assert contenders(groups) == {a, b} == set(win.tied) | {win.id}
    # the planned rounds go on rotating (A B C D, B C D A, ...), with the contenders only
    rounds = more_rounds(interleaved_rounds(cfgs, 4), groups)
    assert [[config_id(cfg) for cfg in rnd] for rnd in rounds] == [[a, b], [b, a], [a, b], [a, b]]
    # a clear winner whose samples were noisy (5 % each): more rounds of it and its runner-up
    noisy = lambda ts: [Trial({}, "ok", t, None, 1, 0.05, "median") for t in ts]  # noqa: E731
    clear = {a: noisy([100.0, 101.0, 99.0, 100.0, 101.0]), c: noisy([120.0, 121.0, 119.0, 120.0, 122.0]),
             d: noisy([130.0, 131.0, 129.0, 132.0, 130.0])}
    w = pick_winner(clear)
    assert w.decided == "clear" and w.unsure and contenders(clear) == {a, c}


class _NoisySession:
    """What the winners' re-measure asks of a tune's Session: answers each job with config
    BLOCK_M's time in ns, BLOCK_M 16 and 32 tied within 3 %, every sample 5 % noisy (so the
    winner is unsure), and keeps which configs each round measured."""

    TIMES = {16: [100.0, 103.0, 97.0, 101.0, 99.0], 32: [101.0, 100.0, 102.0, 98.0, 103.0], 64: [150.0], 128: [200.0]}

    def __init__(self, tmp_path):
        from types import SimpleNamespace

        from harness.run import RunOptions

        self.shapes = [SimpleNamespace(id="s")]
        self.target = SimpleNamespace(is_gpu=True)
        self.library, self.results_path = False, tmp_path / "results.csv"
        self.run_options = RunOptions()
        self.rounds, self._rows = [], []

    def pinned_devices(self):
        return 1

    def rows(self):
        return self._rows

    def submit(self, pairs, fidelity, library, pin=False, timing=None):
        self.rounds.append(sorted(cfg["BLOCK_M"] for cfg, _ in pairs))
        return pairs

    def collect(self, pairs):
        def ns(m):
            times = self.TIMES[m]
            return times[sum(m in r for r in self.rounds[:-1]) % len(times)]
        rows = [{"shape_id": shape.id, "variant_id": "v%d" % cfg["BLOCK_M"], "status": "ok", "estimator": "median",
                 "time_ns": ns(cfg["BLOCK_M"]), "noise": 0.05, "cfg_BLOCK_M": cfg["BLOCK_M"]} for cfg, shape in pairs]
        self._rows += rows
        return rows


@pytest.mark.parametrize("streams", [False, True])
def test_an_unsure_shape_s_more_rounds_leave_out_the_candidates_beaten_beyond_the_spread(tmp_path, streams):
    """Both re-measures (after the search, and a stream's as its search ends): five rounds of the
    four finalists, then five more of the two still tied."""
    from harness.remeasure import ShapeRemeasures, remeasure_winners

    space = {"BLOCK_M": [16, 32, 64, 128]}
    history = [Trial({"BLOCK_M": m}, "ok", float(m)) for m in (16, 32, 64, 128)]
    session = _NoisySession(tmp_path)
    if streams:
        remeasures = ShapeRemeasures(session, space, top=4, repeats=5)
        assert remeasures.start("s", history)
        entries = remeasures.finish()
    else:
        entries = remeasure_winners(session, space, {"s": history}, top=4, repeats=5)
    assert session.rounds == [[16, 32, 64, 128]] * 5 + [[16, 32]] * 5
    assert entries["s"]["config"] == {"BLOCK_M": 16} and entries["s"]["repeats"] == 10


def test_clear_winner_when_the_gap_exceeds_the_spread():
    truth = {"v_z": 100.0, "v_a": 104.0, "v_m": 110.0}
    for seed in range(20):
        w = pick_winner(planted(truth, 0.005, repeats=7, seed=seed))
        assert (w.id, w.decided, w.tied) == ("v_z", "clear", ["v_z"])
        assert w.runner_up == "v_a" and w.margin > w.spread


def test_tie_goes_to_the_clearly_steadier_candidate():
    steady = [100.0, 100.1, 99.9, 100.0, 100.05]
    jumpy = [99.0, 101.5, 98.6, 99.5, 102.0]
    assert pick_winner({"v_0jumpy": jumpy, "v_1steady": steady}).id == "v_0jumpy"  # default: id
    w = pick_winner({"v_0jumpy": jumpy, "v_1steady": steady}, tie_rule="spread")
    assert w.decided == "tie" and w.id == "v_1steady" and "spread" in w.rule


def test_a_candidate_that_failed_once_cannot_win(rec):
    w = pick_winner({"v_fast": [90.0, None, 90.0], "v_ok": [100.0, 100.0, 100.0]})
    assert w.id == "v_ok"
    assert w.leader == "v_ok" and w.behind_leader == 0.0  # a faster failed candidate leads nothing
    with pytest.raises(ValueError):
        pick_winner({"v_x": [None]})


def test_remeasure_runs_rounds_in_the_planned_order(recordings):
    rec = recordings["512x512x512_fp32_NN"]
    top = sorted(rec.table.values(), key=lambda t: t.time_ns)[:3]
    configs = [t.config for t in top]
    seen = []
    replay = Replay(rec, noise=1.0, seed=0)

    def evaluate(batch):
        seen.append([key(c) for c in batch])
        return replay(batch)

    w = remeasure(configs, evaluate, repeats=7)
    assert seen == [[key(c) for c in rnd] for rnd in interleaved_rounds(configs, 7)]
    assert len(w.table) == 3 and all(c.repeats == 7 for c in w.table)
    assert w.spread > 0 and w.id in w.tied
    # the three are within their recorded spread of each other: re-measuring with other noise
    # seeds gives the same winner every time
    ids = {remeasure(configs, Replay(rec, noise=1.0, seed=s), repeats=7).id for s in range(10)}
    assert ids == {w.id}
    assert winner_from_trials(replay(configs) + replay(configs) + replay(configs), configs).id == w.id


def test_big_spaces_of_several_shapes_are_pruned_at_once_in_other_processes_with_the_same_candidates():
    from harness.strategies.base import PARALLEL_PRUNING, Problem, prepare_problems

    space = {"A": list(range(16)), "B": list(range(16)), "C": list(range(16)), "D": [1, 2, 4]}  # 12288 configs
    calls = []

    def pruning(m):
        def is_pruned(c):
            calls.append(1)  # in this process only
            return (c["A"] * c["D"] + c["B"]) % m == 0 or c["C"] > 12 + m
        return is_pruned

    predicates = [pruning(m) for m in (2, 3, 5, 7, 11)]
    assert len(expand(space)) * len(predicates) >= PARALLEL_PRUNING
    strategies = [get_strategy("random", seed=i) for i in range(len(predicates))]
    prepare_problems(strategies, space, predicates, jobs=2)
    assert not calls  # every space was pruned in the forked processes
    for strategy, is_pruned in zip(strategies, predicates):
        assert strategy.has_problem(space, is_pruned)
        built, direct = strategy.problem(space, is_pruned), Problem(space, is_pruned)
        assert built.candidates == direct.candidates and built.index == direct.index
        assert (built.codes == direct.codes).all() and built.codes.shape == direct.codes.shape
        assert all(type(v) is int for v in built.candidates[-1].values())  # Python's, as the space's
    calls.clear()
    one = get_strategy("random", seed=9)
    prepare_problems([one], space, predicates[:1], jobs=2)  # one small space: its Problem is built when first asked
    assert not calls and not one.has_problem(space, predicates[0])


def test_one_big_space_is_pruned_in_chunks_over_the_cores_with_the_same_candidates():
    from harness.strategies.base import PARALLEL_PRUNING, Problem, prepare_problems, pruning_chunks

    space = {"A": list(range(32)), "B": list(range(32)), "C": list(range(32)), "D": [1, 2, 4, 8]}  # 131072 configs
    size = len(expand(space))
    assert size >= 2 * PARALLEL_PRUNING
    chunks = pruning_chunks(size, 4)
    assert len(chunks) > 1 and chunks[0][0] == 0 and chunks[-1][1] == size  # one shape over several cores
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))  # in order, nothing left out
    assert len(pruning_chunks(size, 64, searches=10)) >= 64  # ten shapes on 64 cores: every core has work
    calls = []

    def is_pruned(c):
        calls.append(1)  # in this process only
        return (c["A"] * c["D"] + c["B"]) % 3 == 0 or c["C"] > 20

    one = get_strategy("random", seed=1)
    prepare_problems([one], space, [is_pruned], jobs=4)
    assert not calls and one.has_problem(space, is_pruned)
    assert one.problem(space, is_pruned).candidates == Problem(space, is_pruned).candidates


def test_cpu_finalists_take_in_up_to_two_more_configs_the_search_cannot_tell_from_the_fastest():
    from harness.strategies.winner import top_candidates

    # a README tune's 128x128x128 on the 2-core VM, after the sift: the first four within 3.3 %
    times = {1: 25764.0, 2: 25936.0, 3: 26286.0, 4: 26613.0, 5: 26790.0, 6: 26794.0, 7: 27100.0}
    by_min = [Trial({"A": a}, "ok", t, estimator="min") for a, t in times.items()]
    assert [c["A"] for c in top_candidates(by_min, 3)] == [1, 2, 3, 4, 5]  # 5 % of 25764: up to 27052, two more
    assert [c["A"] for c in top_candidates(by_min[:3] + by_min[6:], 3)] == [1, 2, 3]  # 27100: out
    # GPU times (medians) keep the top three
    assert [c["A"] for c in top_candidates([Trial({"A": a}, "ok", t) for a, t in times.items()], 3)] == [1, 2, 3]


def test_tie_goes_to_the_core_whatever_marginal_candidate_the_search_brought():
    # Two README tunes of 256x256x128 on the 2-core VM (min-decided, spread 2 %): the same two
    # configs (64x64x128, GROUP_M 1 and 8) led both re-measures; the third candidate, 1.1 and
    # 1.3 % behind, was 64x64x64 with GROUP_M 1 in one run and 8 in the other. The smallest id of
    # all tied candidates picked that third config, so the runs disagreed.
    def cfg(block_k, group_m):
        return config_id({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": block_k, "GROUP_M": group_m})

    first = {cfg(128, 1): 504536.0, cfg(128, 8): 505167.0, cfg(64, 1): 509896.0}
    second = {cfg(128, 1): 502352.0, cfg(128, 8): 504085.0, cfg(64, 8): 508768.5}

    def decide(times, rule="core"):
        repeats = (1.0, 1.002, 1.01, 1.2, 1.003)  # one in a slow stretch; the floor reproduced to 0.2 %
        return pick_winner({cid: [Trial({}, "ok", t * r, None, 1, 0.002, "min") for r in repeats]
                            for cid, t in times.items()}, tie_rule=rule)

    by_core = [decide(first), decide(second)]
    assert [w.decided for w in by_core] == ["tie", "tie"] and all(len(w.tied) == 3 for w in by_core)
    assert [w.id for w in by_core] == [cfg(128, 1), cfg(128, 1)]
    # candidates this run cannot order (0.1 % apart, repeats 0.2 %): the smallest id, not the faster
    close = {cfg(128, 1): 504536.0, cfg(64, 1): 505000.0}
    assert decide(close).id == cfg(64, 1) and decide(close).decided == "tie"
    assert [decide(t, "id").id for t in (first, second)] == [cfg(64, 1), cfg(64, 8)]  # the old rule


class PlantedSession:
    """What remeasure_winners asks of a tune's Session, answering every job with a planted time:
    ``times[shape][BLOCK_M]``: its factors of 1000 ns, one per round the config is measured in."""

    def __init__(self, tmp_path, times):
        from types import SimpleNamespace

        from harness.run import RunOptions

        self.shapes = [SimpleNamespace(id=sid) for sid in times]
        self.times, self.library, self.results_path = times, [], tmp_path / "results.csv"
        self.run_options = RunOptions()
        self.submitted, self._rows = [], []

    def rows(self):
        return self._rows

    def submit(self, pairs, fidelity, library, pin=False, timing=None):
        self.submitted.append(sorted({shape.id for _, shape in pairs}))
        return pairs

    def collect(self, pairs):
        rows = []
        for cfg, shape in pairs:
            seen = sum(r["shape_id"] == shape.id and r["cfg_BLOCK_M"] == cfg["BLOCK_M"] for r in self._rows)
            rows.append({"shape_id": shape.id, "variant_id": "v%d" % cfg["BLOCK_M"], "status": "ok",
                         "estimator": "min", "time_ns": 1000.0 * self.times[shape.id][cfg["BLOCK_M"]][seen],
                         "noise": 0.001, "cfg_BLOCK_M": cfg["BLOCK_M"]})
            self._rows.append(rows[-1])
        return rows


def test_a_winner_noisier_than_two_percent_gets_as_many_rounds_again(tmp_path):
    from harness.remeasure import remeasure_winners

    space = {"BLOCK_M": [16, 32]}
    history = [Trial({"BLOCK_M": 16}, "ok", 1000.0), Trial({"BLOCK_M": 32}, "ok", 1100.0)]
    steady = {16: [1.0, 1.001, 1.002, 1.003, 1.004], 32: [1.10] * 5}
    # its floor reproduced only to 5 % in the first 5 rounds (second smallest 1.05), then to 0.1 %
    jumpy = {16: [1.0, 1.05, 1.06, 1.07, 1.08, 1.001, 1.002, 1.003, 1.004, 1.005], 32: [1.10] * 10}
    session = PlantedSession(tmp_path, {"steady": steady, "jumpy": jumpy})
    entries = remeasure_winners(session, space, {"steady": history, "jumpy": history}, top=2, repeats=5)
    assert session.submitted[:5] == [["jumpy", "steady"]] * 5 and session.submitted[5:] == [["jumpy"]] * 5
    assert (entries["steady"]["repeats"], entries["jumpy"]["repeats"]) == (5, 10)
    assert entries["jumpy"]["noise"] <= 0.02 and entries["steady"]["noise"] <= 0.02
    assert all(e["config"] == {"BLOCK_M": 16} and e["decided"] == "clear" for e in entries.values())


def test_a_tie_won_a_percent_or_more_behind_the_fastest_gets_as_many_rounds_again(tmp_path):
    # BLOCK_M 32 has the smaller config id, so a tie it is part of goes to it. In "tied_in" it
    # measured 1.5 % behind BLOCK_M 16 and the leader's own repeats spread 3 %: tied, and in the
    # core. Five more rounds reproduce the leader's floor to 0.1 %, and the core is the leader
    # alone. In "equal" it is 0.5 % behind: a tie between equals, decided by the id at once.
    from harness.remeasure import remeasure_winners
    from harness.strategies import config_id

    assert config_id({"BLOCK_M": 32}) < config_id({"BLOCK_M": 16})
    space = {"BLOCK_M": [16, 32]}
    history = [Trial({"BLOCK_M": 16}, "ok", 1000.0), Trial({"BLOCK_M": 32}, "ok", 1010.0)]
    tied_in = {16: [1.0, 1.03, 1.04, 1.05, 1.06, 1.001, 1.002, 1.003, 1.001, 1.002],
               32: [1.015, 1.02, 1.025, 1.03, 1.035] + [1.04] * 5}
    equal = {16: [1.0, 1.03, 1.04, 1.05, 1.06], 32: [1.005, 1.01, 1.02, 1.03, 1.04]}
    session = PlantedSession(tmp_path, {"tied_in": tied_in, "equal": equal})
    entries = remeasure_winners(session, space, {"tied_in": history, "equal": history}, top=2, repeats=5)
    assert session.submitted[5:] == [["tied_in"]] * 5
    assert (entries["tied_in"]["repeats"], entries["equal"]["repeats"]) == (10, 5)
    assert entries["tied_in"]["config"] == {"BLOCK_M": 16} and entries["equal"]["config"] == {"BLOCK_M": 32}
    assert entries["tied_in"]["decided"] == entries["equal"]["decided"] == "tie"


def test_the_remeasure_also_takes_the_fastest_seed_that_the_search_ranked_below_its_top(tmp_path):
    # the search's first round timed the seed (BLOCK_M 64) slow, at a lower clock than the later
    # rounds; interleaved with the top 2 it is the fastest, and wins
    from harness.remeasure import remeasure_winners
    from harness.strategies.winner import top_candidates

    space = {"BLOCK_M": [16, 32, 64, 128]}
    history = [Trial({"BLOCK_M": 64}, "ok", 1100.0), Trial({"BLOCK_M": 128}, "ok", 1200.0),
               Trial({"BLOCK_M": 16}, "ok", 950.0), Trial({"BLOCK_M": 32}, "ok", 1000.0)]
    seeds = [{"BLOCK_M": 128}, {"BLOCK_M": 64}]
    assert top_candidates(history, 2) == [{"BLOCK_M": 16}, {"BLOCK_M": 32}]
    assert top_candidates(history, 2, seeds=seeds) == [{"BLOCK_M": 16}, {"BLOCK_M": 32}, {"BLOCK_M": 64}]
    assert top_candidates(history, 3, seeds=seeds) == [{"BLOCK_M": 16}, {"BLOCK_M": 32}, {"BLOCK_M": 64}]
    assert top_candidates(history, 0, seeds=seeds) == []
    times = {"s": {16: [1.10] * 5, 32: [1.12] * 5, 64: [1.0, 1.001, 1.002, 1.001, 1.0]}}
    session = PlantedSession(tmp_path, times)
    entry = remeasure_winners(session, space, {"s": history}, top=2, repeats=5, seeds={"s": seeds})["s"]
    assert entry["config"] == {"BLOCK_M": 64} and entry["decided"] == "clear"
    assert sorted(c["config"]["BLOCK_M"] for c in entry["candidates"]) == [16, 32, 64]
    alone = remeasure_winners(PlantedSession(tmp_path, times), space, {"s": history}, top=2, repeats=5)["s"]
    assert alone["config"] == {"BLOCK_M": 16}


def test_the_remeasure_also_takes_the_config_of_the_fewest_sm_cycles_from_rows_with_clocks():
    # H200 run h32, 768x6144x16384: a round at the power cap read the 320-wide tile at 244 us and
    # 1635 MHz, the fastest two at 226 and 231 us near 1950 MHz; in cycles the 320-wide tile led
    from harness.strategies.driver import normalize_results
    from harness.strategies.base import Batch
    from harness.strategies.winner import top_candidates

    def row(bn, us, before, after):
        return {"shape_id": "s", "status": "ok", "time_ns": str(us * 1e3), "clock_mhz_before": before,
                "clock_mhz_after": after, "cfg_BLOCK_N": str(bn)}

    rows = [row(256, 226.2, "1965", "1965"), row(128, 231.2, "1950", "1950"), row(320, 244.4, "1635", "1635"),
            row(64, 400.0, "1500", "")]  # a row without both clocks counts by time alone
    space = {"BLOCK_N": [64, 128, 256, 320]}
    history = normalize_results(rows, Batch([{"BLOCK_N": n} for n in (64, 128, 256, 320)]), space)
    assert [t.clock_mhz for t in history] == [1965.0, 1950.0, 1635.0, None]
    assert top_candidates(history, 2) == [{"BLOCK_N": 256}, {"BLOCK_N": 128}, {"BLOCK_N": 320}]
    assert top_candidates(history, 3) == [{"BLOCK_N": 256}, {"BLOCK_N": 128}, {"BLOCK_N": 320}]
    # with the seed too, each once; without clocks, the top by time alone
    assert top_candidates(history, 2, seeds=[{"BLOCK_N": 320}, {"BLOCK_N": 64}]) == [
        {"BLOCK_N": 256}, {"BLOCK_N": 128}, {"BLOCK_N": 320}]
    assert top_candidates(history, 2, seeds=[{"BLOCK_N": 64}]) == [
        {"BLOCK_N": 256}, {"BLOCK_N": 128}, {"BLOCK_N": 320}, {"BLOCK_N": 64}]
    no_clocks = [Trial(t.config, t.status, t.time_ns) for t in history]
    assert top_candidates(no_clocks, 2) == [{"BLOCK_N": 256}, {"BLOCK_N": 128}]


def test_a_remeasure_round_moves_the_library_one_place_a_round_among_the_rotated_candidates():
    # on a GPU the first job of a round meets it cool from the pause before the round and the last
    # at its power cap (H200 run 13: 1755 MHz at the first job, 1260 at the fourth); the library
    # had been every round's first job, the candidates in variant id order
    from harness.remeasure import remeasure_pairs

    shapes = {"s": parse_shape("32x32x32"), "t": parse_shape("64x64x64")}
    a, b, c = ({"BLOCK_M": m} for m in (8, 16, 32))
    plans = {"s": interleaved_rounds([a, b, c], 8), "t": interleaved_rounds([a, b], 8)}
    rounds = [remeasure_pairs(plans, shapes, r, library=True) for r in range(8)]
    for sid, n in (("s", 3), ("t", 2)):
        places = [[cfg for cfg, s in pairs if s is shapes[sid]] for pairs in rounds]
        assert [p.index(None) for p in places] == [r % (n + 1) for r in range(8)]
        assert [[cfg for cfg in p if cfg is not None] for p in places] == plans[sid]
        for cfg in plans[sid][0]:  # every candidate and the library take every place
            assert {p.index(cfg) for p in places} == set(range(n + 1))
    assert remeasure_pairs(plans, shapes, 0, library=False) == [(cfg, shapes[sid]) for sid in plans
                                                                for cfg in plans[sid][0]]


@pytest.mark.slow
def test_a_listed_round_writes_the_order_the_agent_measures_in_with_the_library_in_its_place(tmp_path):
    from harness import kernels
    from harness.build import BuildOptions
    from harness.rounds import Session
    from harness.run import RunOptions

    shape = parse_shape("32x32x32")
    session = Session(tmp_path, Target(name="local"), kernels.get("matmul"), [shape], BuildOptions(progress=False),
                      RunOptions(), library=True, quiet=True)
    a, b = ({"MR": m, "NR": 16, "KC": 64, "MC": 16, "NC": 64, "PACK_B": 1} for m in (1, 2))
    _, manifest = session._prepare([(b, shape), (None, shape), (a, shape)], (), listed=True)
    variant = {key(v.config): v.id for v in manifest.variants if v.config}
    order = manifest.order[shape.id]
    assert order[0] == variant[key(b)] and order[2] == variant[key(a)] and order[1].startswith("lib:")
    assert len(order) == 3 and [j.variant for j in manifest.jobs if j.variant in variant.values()] == [order[0], order[2]]
    # a search round: no order (the agent goes by variant id), the library where it is asked
    _, manifest = session._prepare([(b, shape), (a, shape)], [shape])
    assert manifest.order == {} and any(j.variant.startswith("lib:") for j in manifest.jobs)
