"""harness.streams: every shape's search a stream of its own (real strategies, an evaluator whose
rounds come back from threads, in whatever order their waits end)."""

import random
import threading
import time

import pytest

from harness.strategies import get_strategy, key
from harness.strategies.driver import ShapeSearch
from harness.streams import StreamStats, ahead_for, drive_streams

SPACE = {"A": list(range(12)), "B": list(range(12))}


def kernel_time(shape: str, cfg: dict) -> float:
    """A made-up, noise-free time per (shape, config)."""
    return 1000.0 + 37.0 * abs(cfg["A"] - 7) + 11.0 * abs(cfg["B"] - (3 if shape == "a" else 9)) + len(shape)


class Evaluator:
    """Rounds come back when their ``wait`` ends: after ``delay(shape, number)`` seconds, or when
    ``gate[shape]`` (an Event) is set; ``log`` records (event, shape, batch keys) in order."""

    def __init__(self, delay=lambda shape, n: 0.0, gate=None):
        self.delay, self.gate = delay, gate or {}
        self.log, self.lock, self.number = [], threading.Lock(), {}
        self.flying, self.most = {}, {}

    def submit(self, asks, fidelity):
        ((s, batch),) = asks
        with self.lock:
            n = self.number[s.shape] = self.number.get(s.shape, 0) + 1
            self.flying[s.shape] = self.flying.get(s.shape, 0) + 1
            self.most[s.shape] = max(self.most.get(s.shape, 0), self.flying[s.shape])
            self.log.append(("submit", s.shape, [key(c) for c in batch.configs]))
        return s.shape, n, [dict(c) for c in batch.configs]

    def wait(self, handle):
        shape, n, configs = handle
        if shape in self.gate:
            self.gate[shape].wait(10)
        time.sleep(self.delay(shape, n))
        if configs and configs[0].get("A") == -1:
            raise RuntimeError("the agent died")
        return [{"config": c, "status": "ok", "time_ns": kernel_time(shape, c)} for c in configs]

    def finish(self, handle, waited):
        with self.lock:
            self.flying[handle[0]] -= 1
            self.log.append(("told", handle[0], [key(r["config"]) for r in waited]))
        return [waited]


def searches(shapes=("a", "b", "c"), name="genetic", batch=3):
    return [ShapeSearch(get_strategy(name, seed=5, batch_size=batch), lambda c: False, shape=shape) for shape in shapes]


def test_a_slow_shape_holds_no_other_shape_back():
    gate = {"a": threading.Event()}
    ev = Evaluator(gate=gate)
    told = []

    def on_round(number, fidelity, group):
        ((s, _),) = group
        told.append(s.shape)
        if all(x.stopped for x in mine if x.shape != "a"):
            gate["a"].set()  # the slow shape's first batch comes back only now

    mine = searches()
    drive_streams(mine, SPACE, ev, budget=12, ahead=2, on_round=on_round)
    # b and c asked, measured and were told all their batches while a's first two were out
    first_a = told.index("a")
    assert told[:first_a].count("b") == 4 and told[:first_a].count("c") == 4
    assert all(len(s.history) == 12 and len({key(t.config) for t in s.history}) == 12 for s in mine)
    assert all(s.stopped == "budget" and not s.pending for s in mine)
    assert ev.most == {"a": 2, "b": 2, "c": 2}  # ahead batches in flight per shape, never more


def test_what_a_shape_asks_does_not_depend_on_the_order_its_results_come_back():
    def run(delay):
        mine = searches(name="genetic")
        drive_streams(mine, SPACE, Evaluator(delay=delay), budget=15, ahead=3)
        return {s.shape: [key(t.config) for t in s.history] for s in mine}

    in_order = run(lambda shape, n: 0.0)
    rng = random.Random(3)
    shuffled = run(lambda shape, n: rng.random() * 0.02)  # later batches often back first
    late_first = run(lambda shape, n: 0.03 if n % 3 == 1 else 0.0)
    assert in_order == shuffled == late_first
    assert all(len(v) == 15 for v in in_order.values())


def test_a_strategy_that_cannot_ask_ahead_has_one_batch_in_flight():
    ev = Evaluator(delay=lambda shape, n: 0.002)
    mine = searches(shapes=("a", "b"), name="halving", batch=4)
    drive_streams(mine, SPACE, ev, budget=12, ahead=4)
    assert ev.most == {"a": 1, "b": 1}
    assert all(s.history and len(s.history) <= 12 for s in mine)


def test_an_error_while_waiting_is_raised_on_the_search_thread():
    class Broken(Evaluator):
        def submit(self, asks, fidelity):
            shape, n, configs = super().submit(asks, fidelity)
            return shape, n, [{"A": -1}] if (shape, n) == ("b", 2) else configs

    with pytest.raises(RuntimeError, match="the agent died"):
        drive_streams(searches(), SPACE, Broken(), budget=12, ahead=2)


def test_the_seeds_go_out_as_each_shape_s_first_batch_before_the_pruning(monkeypatch):
    import harness.streams as streams
    from harness.rounds import seeds_round
    from harness.strategies.seeded import Seeded

    order = []
    prepare = streams.prepare_problems
    monkeypatch.setattr(streams, "prepare_problems", lambda *a, **k: order.append("prune") or prepare(*a, **k))
    ev = Evaluator()
    submit = ev.submit
    ev.submit = lambda asks, fidelity: order.append("submit") or submit(asks, fidelity)
    seeds = [{"A": 7, "B": 3}, {"A": 1, "B": 1}]
    mine = [ShapeSearch(Seeded(get_strategy("genetic", seed=1, batch_size=3), seeds), lambda c: False, shape=s)
            for s in ("a", "b")]
    drive_streams(mine, SPACE, ev, budget=6, first_round=lambda live: seeds_round(live, SPACE, 6))
    assert order[:3] == ["submit", "submit", "prune"]
    firsts = [configs for kind, shape, configs in ev.log if kind == "submit"][:2]
    assert firsts == [[key(c) for c in seeds]] * 2


def test_under_a_time_limit_nothing_is_asked_ahead_of_the_first_results():
    now = {"t": 0.0}
    ev = Evaluator()
    finish = ev.finish
    ev.finish = lambda handle, waited: now.__setitem__("t", now["t"] + 1.0) or finish(handle, waited)
    stats = StreamStats()
    mine = searches(shapes=("a",), name="random", batch=2)
    drive_streams(mine, SPACE, ev, time_limit=4.5, ahead=3, clock=lambda: now["t"], stats=stats)
    kinds = [k for k, _, _ in ev.log]
    assert kinds[:3] == ["submit", "told", "submit"]
    assert mine[0].stopped == "time_limit" and not mine[0].pending
    assert 6 <= len(mine[0].history) <= 10


def test_ahead_grows_with_the_devices_and_shrinks_with_the_shapes():
    assert ahead_for(1, 10) == 2  # one GPU: a batch measured while the next is built
    assert ahead_for(2, 10) == 2
    assert ahead_for(4, 10) == 3
    assert ahead_for(8, 10) == 5
    assert ahead_for(4, 1) == 8  # one shape on four GPUs: as many as allowed
    assert ahead_for(4, 10, in_flight=6) == 6  # --in-flight


def _seeded(shapes=("a", "b")):
    from harness.strategies.seeded import Seeded

    seeds = [{"A": 7, "B": 3}, {"A": 1, "B": 1}, {"A": 2, "B": 2}]
    return [ShapeSearch(Seeded(get_strategy("genetic", seed=1, batch_size=3), seeds), lambda c: False, shape=s)
            for s in shapes]


def test_a_shape_asks_its_batch_2_beside_its_seeds_and_its_depth_once_the_devices_are_learned():
    from harness.rounds import seeds_round

    learned = {"devices": 1}
    gate = {"a": threading.Event(), "b": threading.Event()}
    ev = Evaluator(gate=gate)
    finish = ev.finish
    ev.finish = lambda handle, waited: learned.update(devices=4) or finish(handle, waited)  # the agents reported
    mine = _seeded()
    stats = StreamStats()
    submit = ev.submit

    def submit_then_open(asks, fidelity):  # a's seeds come back once both shapes asked their batch 2
        handle = submit(asks, fidelity)
        if sum(kind == "submit" for kind, _, _ in ev.log) == 4:
            gate["a"].set()
        if any(kind == "told" for kind, _, _ in ev.log):
            gate["b"].set()
        return handle

    ev.submit = submit_then_open
    drive_streams(mine, SPACE, ev, budget=30, ahead=lambda: ahead_for(learned["devices"], 2), stats=stats,
                  first_round=lambda live: seeds_round(live, SPACE, 30))
    kinds = [(kind, sh) for kind, sh, _ in ev.log]
    # seeds, then batch 2 of each before anything was told (any depth >= 2 allows it)
    assert [k for k, _ in kinds[:4]] == ["submit"] * 4 and kinds.index(("told", "a")) == 4
    # once a's seeds were told (the devices learned), b asked its whole depth with its seeds still out
    b_before_told = [k for k, sh in kinds[:kinds.index(("told", "b"))] if sh == "b"]
    assert b_before_told == ["submit"] * ahead_for(4, 2)
    assert stats.ahead == ahead_for(4, 2) == 8 and ev.most == {"a": 8, "b": 8}


def test_what_a_seeded_shape_asks_does_not_depend_on_when_its_seeds_come_back():
    from harness.rounds import seeds_round

    def run(delay):
        mine = _seeded(("a", "b", "c"))
        drive_streams(mine, SPACE, Evaluator(delay=delay), budget=18, ahead=3,
                      first_round=lambda live: seeds_round(live, SPACE, 18))
        return {s.shape: [key(t.config) for t in s.history] for s in mine}

    rng = random.Random(4)
    assert run(lambda shape, n: 0.0) == run(lambda shape, n: rng.random() * 0.02) == \
        run(lambda shape, n: 0.03 if n == 1 else 0.0)  # the seeds back last


def test_each_shape_is_reported_spent_once_as_its_search_ends_while_the_others_go_on():
    gate = {"a": threading.Event()}
    ev = Evaluator(gate=gate)
    spent = []

    def on_spent(search):
        spent.append((search.shape, len(search.history), ev.flying.get("a", 0)))
        if len(spent) == 2:
            gate["a"].set()

    mine = searches()
    drive_streams(mine, SPACE, ev, budget=9, ahead=2, on_spent=on_spent)
    assert [s for s, _, _ in spent] in (["b", "c", "a"], ["c", "b", "a"])
    assert all(n == 9 for _, n, _ in spent)  # spent: every batch told
    assert spent[0][2] == 2 and spent[1][2] == 2  # b and c were spent while a's batches were out


def test_the_shapes_first_batches_go_out_in_turn():
    ev = Evaluator(gate={"a": threading.Event(), "b": threading.Event(), "c": threading.Event()})
    for gate in ev.gate.values():
        gate.set()
    drive_streams(searches(), SPACE, ev, budget=12, ahead=3)
    firsts = [shape for kind, shape, _ in ev.log if kind == "submit"][:9]
    assert firsts == ["a", "b", "c"] * 3  # no shape's batches queued behind another's whole depth
