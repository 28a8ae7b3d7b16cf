"""The long-lived agent of a tune (remote_agent/serve.py, harness/agent_session.py) and asking ahead.

- over the loopback sshd: the serving agent is killed (SIGKILL) in the middle of a round; the
  host restarts it, the round resumes, and the tune ends with every asked pair measured once;
- GPU workers (the real worker process on tests/gpu_standin.py's CPU stand-in) stay up from one
  round to the next, jobs spread over two devices, and a pinned round uses one (or one per shape);
- strategies.driver.drive asks the next rounds before the last one is told (up to its depth),
  tells them in the order they were asked, never asks a pending config again, keeps the budget
  (pending configs counted), asks nothing ahead of the first results under a time limit, and
  waits for strategies that cannot ask ahead;
- rounds built at once (harness.build.compile_bundle in two threads) compile a variant they both
  want once, and a round compiles each config only for the specializations of its own shapes.
"""

import csv
import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from harness.strategies import get_strategy, key
from harness.strategies.driver import AskAhead, ShapeSearch, drive
from remote_agent import serve
from tests.conftest import REPO

NATIVE = "  arch: native\n  profiler: wallclock\n"
SPACE = "MR: [1, 2, 4]\nNR: [16, 32, 48]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1]\n"


def _progress(log: Path) -> list:
    try:
        text = log.read_text()
    except OSError:
        return []
    return [json.loads(l[len("@@progress "):]) for l in text.splitlines() if l.startswith("@@progress ")]


def _kill_serving_agent_when(tune, serve_dir: Path, now, poll: float):
    """SIGKILL the serving agent (serve.pid) as soon as ``now(progress lines, rounds seen)`` holds,
    watching serve.log while ``tune`` runs (5 minutes at most); its pid, or None if never."""
    deadline = time.monotonic() + 300
    while tune.poll() is None and time.monotonic() < deadline:
        lines = _progress(serve_dir / "serve.log")
        if now(lines, list(dict.fromkeys(p["round"] for p in lines))):
            killed = int(json.loads((serve_dir / "serve.pid").read_text()))
            os.kill(killed, signal.SIGKILL)
            return killed
        time.sleep(poll)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("in_flight", ["0", "3"])
def test_killing_the_serving_agent_mid_round_loses_and_repeats_nothing(workspace, in_flight):
    ws = workspace
    (ws.path / "space2.yaml").write_text(SPACE)
    with open(ws.path / "targets.yaml", "a") as f:
        f.write("box:\n" + NATIVE + "  workdir: %s\n  ssh:\n%s" % (ws.path / "box", ws.sshd.target_ssh_yaml()))
    serve_dir = ws.path / "box/results/box/matmul/serve"
    tune = subprocess.Popen(
        [sys.executable, "-m", "harness", "tune", "matmul", "--target", "box", "--space", "space2.yaml",
         "--shapes", "96x96x96,64x96x80", "--strategy", "random", "--budget", "6", "--batch-size", "2",
         "--iters", "300", "--top", "0", "--in-flight", in_flight], cwd=ws.path, env=ws.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    killed = _kill_serving_agent_when(  # inside round 2 or later
        tune, serve_dir, lambda lines, rounds: len(rounds) >= 2 and lines[-1]["status"]
        and lines[-1]["done"] < lines[-1]["total"], 0.01)
    out, err = tune.communicate(timeout=300)
    assert tune.returncode == 0, out + err
    assert killed, "never saw the agent inside a later round"
    assert "restarting it" in out + err
    log = (serve_dir / "serve.log").read_text()
    assert "resumed:" in log  # the new agent took the killed round up where it stopped
    assert log.count("serving ") == 2  # started once, restarted once: not once per round
    with open(ws.path / "results/box/matmul/results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    pairs = Counter((tuple(r[c] for c in ("cfg_MR", "cfg_NR", "cfg_KC")), r["shape_id"]) for r in rows)
    assert len(pairs) == 12 and set(pairs.values()) == {1}, pairs  # 6 configs x 2 shapes, each exactly once
    assert {r["status"] for r in rows} == {"ok"}
    assert not serve.serving_pid(str(serve_dir)) or (serve_dir / "stop").exists()


def test_gpu_workers_stay_up_across_rounds_and_a_pinned_round_uses_one_device_per_shape(tmp_path, monkeypatch):
    from tests.test_gpu_supervisor import make_bundle, standin_runner

    standin_runner(monkeypatch)
    bundle = make_bundle(tmp_path / "bundle")
    manifest = json.loads((bundle / "manifest.json").read_text())
    results = tmp_path / "results" / "results.csv"
    work = tmp_path / "serve"
    server = serve.Server(str(work), idle_timeout=60, out=io.StringIO(), log=lambda m: None)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not serve.serving_pid(str(work)) and time.monotonic() < deadline:
        time.sleep(0.01)
    options = {"warmup": 1, "iters": 3, "timeout": 20.0, "min_time_ms": 1.0}
    jobs = manifest["jobs"]

    def submit(name, part, pin=False, timing=options):
        serve.write_json(str(work / "queue" / (name + ".json")), {
            "bundle": str(bundle), "results": str(results), "manifest": dict(manifest, jobs=part),
            "options": timing, "pin": pin})
        reply = serve.wait_round(str(work), name, timeout=120)
        assert "done" in reply, reply
        return reply

    def worker_pids():
        (runner,) = server.runners.values()
        return {d: w.proc.pid for d, w in runner._supervisor._kept.items()}

    (work / "queue").mkdir(parents=True, exist_ok=True)
    first = submit("a-1", jobs[:6])
    pids = worker_pids()
    second = submit("a-2", jobs[6:12])
    assert worker_pids() == pids  # the same processes, contexts and data: nothing restarted
    assert len(first["rows"]) == 6 and len(second["rows"]) == 6
    device = first["header"].index("device")
    assert {r[device] for r in first["rows"] + second["rows"]} == {"cuda:0", "cuda:1"}
    assert set(first["done"]["busy"]) == {"cuda:0", "cuda:1"}
    pinned = submit("a-3", jobs[:4], pin=True, timing=dict(options, min_time_ms=2.0, iters=4))
    assert {r[device] for r in pinned["rows"]} == {"cuda:0"}
    assert worker_pids() == pids  # other timing options reach the same workers with each job
    # a winners' re-measure: each shape's jobs on one device, the shapes on different devices
    first_shape, second_shape = sorted({j["shape"] for j in jobs[:12]})
    spread = submit("a-4", jobs[:12], pin={first_shape: 1, second_shape: 0})
    shape = spread["header"].index("shape_id")
    assert len(spread["rows"]) == 12
    assert {(r[shape], r[device]) for r in spread["rows"]} == {(first_shape, "cuda:1"), (second_shape, "cuda:0")}
    assert spread["done"]["busy"]["cuda:0"] > 0 and spread["done"]["busy"]["cuda:1"] > 0
    (work / "stop").touch()
    thread.join(60)
    assert not thread.is_alive()
    for pid in pids.values():  # the workers went with the agent
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists("/proc/%d" % pid) and \
                "Z" not in open("/proc/%d/stat" % pid).read().split()[2]:
            time.sleep(0.05)
        assert not os.path.exists("/proc/%d" % pid) or "Z" in open("/proc/%d/stat" % pid).read().split()[2]


SPACE_DICT = {"A": [1, 2, 3, 4], "B": [1, 2, 3, 4, 5]}


def _ahead_evaluator(log, depth=2, budget=None):
    """Times are a function of the config; every submit and collect is logged; with ``budget``,
    each submit checks that no search has more told and pending configs than that."""
    def submit(asks, fidelity):
        log.append(("submit", [key(c) for _, b in asks for c in b.configs]))
        for s, _ in asks:
            assert budget is None or len(s.history) + len(s.pending) <= budget
        return asks

    def collect(asks):
        log.append(("collect", [key(c) for _, b in asks for c in b.configs]))
        return [[{"config": c, "status": "ok", "time_ns": 10.0 * c["A"] + c["B"]} for c in b.configs] for _, b in asks]

    return AskAhead(submit, collect, depth)


def _in_flight(log) -> list:
    """Rounds submitted and not yet collected, after each step of the log."""
    out, n = [], 0
    for kind, _ in log:
        n += 1 if kind == "submit" else -1
        out.append(n)
    return out


def test_drive_asks_the_next_round_before_the_last_is_told():
    log = []
    searches = [ShapeSearch(get_strategy(name, seed=1, batch_size=3), lambda c: False) for name in ("random", "bayes")]
    drive(searches, SPACE_DICT, _ahead_evaluator(log), budget=10)
    kinds = [k for k, _ in log]
    assert kinds[:3] == ["submit", "submit", "collect"]  # round 2 went out before round 1 came back
    for s in searches:
        asked = [key(t.config) for t in s.history]
        assert len(asked) == 10 and len(set(asked)) == 10  # the budget, and no config twice
        assert not s.pending and s.stopped == "budget"


def test_a_strategy_that_cannot_ask_ahead_waits_for_its_results():
    log = []
    search = ShapeSearch(get_strategy("halving", seed=1, batch_size=4), lambda c: False)
    drive([search], SPACE_DICT, _ahead_evaluator(log), budget=12)
    kinds = [k for k, _ in log]
    assert kinds == ["submit", "collect"] * (len(kinds) // 2)  # never two rounds in flight
    assert len(search.history) <= 12 and search.history


def test_a_worker_keeps_the_data_of_several_shapes_within_its_budget(tmp_path, monkeypatch):
    from remote_agent.runners.gpu_worker import Worker
    from tests.gpu_standin import StandinApi
    from tests.test_gpu_supervisor import make_bundle

    manifest = json.loads((make_bundle(tmp_path / "bundle") / "manifest.json").read_text())
    a, b = manifest["shapes"]
    options = {"warmup": 1, "iters": 3, "min_time_ms": 1.0, "reference": "kernel"}
    worker = Worker(str(tmp_path / "bundle"), manifest, 0, options, api=StandinApi())
    first = worker.data_for(a)
    worker.data_for(b)
    assert worker.data_for(a) is first  # both shapes stayed: the next round finds them
    monkeypatch.setenv("HARNESS_GPU_DATA_BYTES", "1")  # room for one shape only: the other goes
    worker = Worker(str(tmp_path / "bundle"), manifest, 0, options, api=StandinApi())
    first = worker.data_for(a)
    worker.data_for(b)
    assert list(worker.shapes) == [b["id"]] and worker.data_for(a) is not first


@pytest.mark.parametrize("depth", [3, 4])
def test_drive_keeps_depth_rounds_in_flight_and_tells_them_in_the_order_asked(depth):
    log = []
    searches = [ShapeSearch(get_strategy(name, seed=1, batch_size=2), lambda c: False)
                for name in ("random", "genetic", "bayes")]
    drive(searches, SPACE_DICT, _ahead_evaluator(log, depth, budget=14), budget=14)
    assert max(_in_flight(log)) == depth  # depth rounds out before the first came back
    assert [k for k, _ in log][:depth + 1] == ["submit"] * depth + ["collect"]
    submitted = [configs for kind, configs in log if kind == "submit"]
    collected = [configs for kind, configs in log if kind == "collect"]
    assert collected == submitted  # told in the order they were asked, each once
    for s in searches:
        asked = [key(t.config) for t in s.history]
        assert len(asked) == 14 and len(set(asked)) == 14  # the budget exactly, and no config twice
        assert not s.pending and s.stopped == "budget"


def test_drive_asks_nothing_ahead_of_the_first_results_under_a_time_limit():
    log, now = [], {"t": 0.0}
    evaluate = _ahead_evaluator(log, depth=3)
    collect = evaluate.collect
    evaluate.collect = lambda asks: now.__setitem__("t", now["t"] + 1.0) or collect(asks)  # a round: 1 s
    search = ShapeSearch(get_strategy("random", seed=1, batch_size=2), lambda c: False)
    drive([search], SPACE_DICT, evaluate, time_limit=4.5, clock=lambda: now["t"])
    kinds = [k for k, _ in log]
    assert kinds[:4] == ["submit", "collect", "submit", "submit"]  # then up to 3 in flight
    assert max(_in_flight(log)) == 3
    assert search.stopped == "time_limit" and not search.pending
    # each round of 2 took 1 s: the limit's 4.5 s hold 8 or 9 configs; the last round is shrunk to what fits
    assert 8 <= len(search.history) <= 10 and now["t"] <= 5.0


def _cpu_build(tmp_path, pairs):
    from harness import kernels
    from harness.build import BuildOptions, compile_bundle
    from harness.shapes import parse_shape
    from harness.targets import Target

    shapes = [parse_shape("32x32x32"), parse_shape("32x32x32:fp16")]
    return compile_bundle(kernels.get("matmul"), Target(name="local", arch="native"), shapes, tmp_path,
                          BuildOptions(jobs=2, only_pairs=pairs, progress=False))


@pytest.mark.fresh_compile_cache
@pytest.mark.slow
def test_a_round_compiles_each_config_for_its_own_shapes_only_and_overlapping_rounds_compile_once(
        tmp_path, monkeypatch):
    from harness.compile.cpp import CppCompiler

    calls = []
    real = CppCompiler.compile

    def counted(self, config, shape, timeout):
        calls.append((config["MR"], shape.dtype))
        return real(self, config, shape, timeout)

    monkeypatch.setattr(CppCompiler, "compile", counted)
    a = {"MR": 1, "NR": 16, "KC": 64, "MC": 16, "NC": 64, "PACK_B": 1}
    b = dict(a, MR=2)
    fp32, fp16 = "32x32x32_fp32_NN", "32x32x32_fp16_NN"
    summary = _cpu_build(tmp_path, [(a, fp32), (b, fp16)])
    assert sorted(calls) == [(1, "fp32"), (2, "fp16")]  # not a for fp16 nor b for fp32
    assert sorted((j.variant, j.shape) for j in summary.manifest.jobs) == sorted(
        (v.id, s) for v, s in zip(summary.manifest.variants, (fp32, fp16)))
    assert {v.status for v in summary.manifest.variants} == {"ok"}
    calls.clear()
    c = dict(a, NR=32)
    results = [None, None]
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, _cpu_build(tmp_path, [(c, fp32)])))
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert calls == [(1, "fp32")]  # two rounds built at once wanted c: compiled once
    (va,), (vb,) = results[0].manifest.variants, results[1].manifest.variants
    assert va.status == vb.status == "ok" and va.sha256 == vb.sha256


@pytest.mark.slow
def test_a_compile_done_before_its_build_registers_its_callback_does_not_hang_the_build(tmp_path):
    """A cached compile can finish before its build registers the callback that forgets it; the
    callback then runs at once in the build's thread, and it takes the lock the build held: the
    build hung for good (a second `harness build` on the GPU node, 1 run in 4). Here every compile
    is done when it is handed back (a pool that runs it on submit), so the race always goes that
    way; in a child process, so that a hang cannot take the lock from the tests after it."""
    script = """
import sys
from concurrent.futures import Future
from harness import build
from tests.test_long_lived_agent import _cpu_build

class DoneOnSubmit:
    def submit(self, fn, *args):
        future = Future()
        future.set_result(fn(*args))
        return future

build.compile_pool = lambda jobs: DoneOnSubmit()
summary = _cpu_build(__import__("pathlib").Path(sys.argv[1]), [({"MR": 1, "NR": 16, "KC": 64, "MC": 16, "NC": 64, "PACK_B": 1},
                                                               "32x32x32_fp32_NN")])
print(summary.manifest.variants[0].status, len(build._compiling))
"""
    try:
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the build hung on a compile that was done before its callback was registered")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "0"]  # built, and forgotten once done


def test_a_winners_remeasure_spreads_shapes_over_the_devices_by_their_jobs():
    from harness.remeasure import spread_shapes

    slots = spread_shapes({"a": 4, "b": 3, "c": 3, "d": 3, "e": 2}, 2)
    load = Counter()
    for sid, slot in slots.items():
        load[slot] += {"a": 4, "b": 3, "c": 3, "d": 3, "e": 2}[sid]
    assert set(slots.values()) == {0, 1} and sorted(load.values()) == [7, 8]
    assert set(spread_shapes({"a": 4, "b": 3}, 1).values()) == {0}
    assert serve.pinned_devices(["cuda:0", "cuda:1"], {"a": 0, "b": 1, "c": 2}) == (
        None, {"a": "cuda:0", "b": "cuda:1", "c": "cuda:0"})
    assert serve.pinned_devices(["cuda:0", "cuda:1"], True) == (["cuda:0"], None)
    assert serve.pinned_devices(["cuda:0", "cuda:1"], False) == (None, None)


def test_the_seeds_round_goes_out_before_the_spaces_are_pruned_and_asks_what_the_strategy_would(monkeypatch):
    import harness.strategies.driver as driver
    from harness.rounds import seeds_round
    from harness.strategies.seeded import Seeded

    seeds = [{"A": 4, "B": 5}, {"A": 9, "B": 1}, {"A": 1, "B": 1}, {"A": 2, "B": 2}, {"A": 3, "B": 3}]
    pruned = lambda c: c["A"] == 2  # noqa: E731

    def searches():
        return [ShapeSearch(Seeded(get_strategy("genetic", seed=1, batch_size=3), seeds), pruned)]

    plain, early, order = [], [], []
    drive(searches(), SPACE_DICT, _ahead_evaluator(plain), budget=9)
    evaluate = _ahead_evaluator(early)
    submit, prepare = evaluate.submit, driver.prepare_problems
    evaluate.submit = lambda asks, fidelity: order.append("submit") or submit(asks, fidelity)
    monkeypatch.setattr(driver, "prepare_problems", lambda *a, **k: order.append("prune") or prepare(*a, **k))
    drive(searches(), SPACE_DICT, evaluate, budget=9, first_round=lambda live: seeds_round(live, SPACE_DICT, 9))
    assert order[:2] == ["submit", "prune"]  # the seeds' round left before the pruning began
    # the seeds in the space, unpruned, in order, up to the batch: what the strategy asks first
    assert early[0] == plain[0] == ("submit", [key(c) for c in ({"A": 4, "B": 5}, {"A": 1, "B": 1}, {"A": 3, "B": 3})])
    assert len(early) == len(plain) == 6  # then the same three rounds of three


def test_gpu_rounds_queued_together_run_as_one_stream_and_each_gets_its_own_rows(tmp_path, monkeypatch):
    bundle, manifest, results, work, runs = _stream_node(tmp_path, monkeypatch)
    options = {"warmup": 1, "iters": 3, "timeout": 20.0, "min_time_ms": 1.0}
    jobs = manifest["jobs"]
    parts = {"s-1": jobs[:5], "s-2": jobs[5:9], "s-3": jobs[9:12]}
    for name, part in parts.items():  # queued before the agent starts: it finds them all
        _queue_round(work, name, bundle, results, manifest, part, options)
    replies = _serve_until_done(work, list(parts))
    assert len(runs) == 1  # one run of the workers measured the three rounds
    seen = Counter()
    for name, part in parts.items():
        reply = replies[name]
        assert "done" in reply, reply
        header = reply["header"]
        got = sorted((r[header.index("variant_id")], r[header.index("shape_id")]) for r in reply["rows"])
        assert got == sorted((j["variant"], j["shape"]) for j in part)  # its own rows, each once
        assert reply["done"]["rows"] == len(part) and set(reply["done"]["busy"]) == {"cuda:0", "cuda:1"}
        seen.update(got)
    assert set(seen.values()) == {1} and len(seen) == 12
    with open(results, newline="") as f:
        assert len(list(csv.DictReader(f))) == 12  # nothing measured twice


def test_a_pinned_round_joins_the_stream_on_its_device_with_its_own_timing_and_rows(tmp_path, monkeypatch):
    """A winners' re-measure during the search: two pinned rounds of the same pairs (other
    timing) queued with an unpinned round run in one stream; each gets exactly its own rows."""
    bundle, manifest, results, work, runs = _stream_node(tmp_path, monkeypatch)
    search = {"warmup": 1, "iters": 3, "timeout": 20.0, "min_time_ms": 1e-4, "max_noise": 1.0}
    remeasure = dict(search, iters=150)
    jobs = manifest["jobs"]
    shape = jobs[0]["shape"]
    mine = [j for j in jobs if j["shape"] == shape][:3]
    parts = {"s-1": (jobs[:8], search, False), "s-2": (mine, remeasure, {shape: 1}),
             "s-3": (mine, remeasure, {shape: 1}), "s-4": (jobs[8:12], search, False)}
    for name, (part, options, pin) in parts.items():
        _queue_round(work, name, bundle, results, manifest, part, options, pin)
    replies = _serve_until_done(work, list(parts))
    assert len(runs) == 1  # the pinned rounds joined the stream
    for name, (part, options, pin) in parts.items():
        reply = replies[name]
        assert "done" in reply, reply
        header = reply["header"]
        col = {c: header.index(c) for c in ("variant_id", "shape_id", "device", "samples")}
        got = sorted((r[col["variant_id"]], r[col["shape_id"]]) for r in reply["rows"])
        assert got == sorted((j["variant"], j["shape"]) for j in part)  # its own rows, each once
        samples = {int(r[col["samples"]]) for r in reply["rows"]}
        if pin:
            assert {r[col["device"]] for r in reply["rows"]} == {"cuda:1"}
            assert min(samples) >= 150  # its own timing reached the kept workers
        else:
            assert max(samples) < 150
    with open(results, newline="") as f:
        assert len(list(csv.DictReader(f))) == 8 + 3 + 3 + 4


def test_a_stream_round_resumed_after_a_kill_skips_only_the_jobs_its_own_rows_list(tmp_path, monkeypatch):
    """Two rounds of the same pairs were in a stream when the agent was killed: the first had
    written one row (listed in its .rows), the second none. Resumed, the first measures the rest
    of its jobs and the second all of its own, though the first's row lies past its offset."""
    from tests.test_gpu_supervisor import make_bundle, standin_runner

    standin_runner(monkeypatch)
    bundle = make_bundle(tmp_path / "bundle")
    manifest = json.loads((bundle / "manifest.json").read_text())
    results = tmp_path / "results" / "results.csv"
    work = tmp_path / "serve"
    queue = work / "queue"
    queue.mkdir(parents=True)
    options = {"warmup": 1, "iters": 3, "timeout": 20.0, "min_time_ms": 1e-4}
    shape = manifest["jobs"][0]["shape"]
    mine = [j for j in manifest["jobs"] if j["shape"] == shape][:3]
    variants = [v for v in manifest["variants"] if v["id"] in {j["variant"] for j in mine}]
    spec = {"bundle": str(bundle), "results": str(results), "options": options, "pin": {shape: 0},
            "manifest": dict(manifest, jobs=mine, variants=variants)}
    serve.write_json(str(queue / "r-1.json"), spec)  # measure the first round alone, then stage the kill
    _serve_until_done(work, ["r-1"])
    first_row_end = int((queue / "r-1.rows").read_text().split("\n")[0].split()[1])
    offset = json.loads((queue / "r-1.start").read_text())["offset"]
    with open(results, "rb+") as f:  # what a kill after r-1's first row leaves
        f.truncate(first_row_end)
    (queue / "r-1.done").unlink()
    (queue / "r-1.rows").write_text("%d %d\n" % (offset, first_row_end))
    serve.write_json(str(queue / "r-2.json"), spec)
    serve.write_json(str(queue / "r-2.start"), {"offset": offset})
    replies = _serve_until_done(work, ["r-1", "r-2"])
    for reply in replies.values():
        header = reply["header"]
        assert sorted(r[header.index("variant_id")] for r in reply["rows"]) == sorted(j["variant"] for j in mine)
    with open(results, newline="") as f:
        assert len(list(csv.DictReader(f))) == 6  # each round's three, none twice


def _stream_node(tmp_path: Path, monkeypatch):
    """A GPU bundle on the two-device stand-in, a results path, an agent folder with its queue, and
    the list that counts the runs of the workers: (bundle, manifest, results, work, runs)."""
    from remote_agent import supervisor
    from tests.test_gpu_supervisor import make_bundle, standin_runner

    standin_runner(monkeypatch)
    runs = []
    run = supervisor.Supervisor.run
    monkeypatch.setattr(supervisor.Supervisor, "run", lambda self, *a, **k: runs.append(1) or run(self, *a, **k))
    bundle = make_bundle(tmp_path / "bundle")
    manifest = json.loads((bundle / "manifest.json").read_text())
    work = tmp_path / "serve"
    (work / "queue").mkdir(parents=True)
    return bundle, manifest, tmp_path / "results" / "results.csv", work, runs


def _queue_round(work: Path, name: str, bundle: Path, results: Path, manifest: dict, part: list, options: dict,
                 pin=False) -> None:
    """Queue round ``name``: the jobs ``part`` of ``manifest`` with their variants."""
    variants = [v for v in manifest["variants"] if v["id"] in {j["variant"] for j in part}]
    serve.write_json(str(work / "queue" / (name + ".json")), {
        "bundle": str(bundle), "results": str(results), "options": options, "pin": pin,
        "manifest": dict(manifest, jobs=part, variants=variants)})


def _serve_until_done(work: Path, names: list) -> dict:
    """Serve ``work`` in a thread until the rounds ``names`` are done; their wait_round replies."""
    stop = work / "stop"
    deadline = time.monotonic() + 30
    while serve.serving_pid(str(work)) and time.monotonic() < deadline:
        time.sleep(0.01)  # the last agent's workers hold its lock until they are gone
    if stop.exists():
        stop.unlink()
    server = serve.Server(str(work), idle_timeout=60, out=io.StringIO(), log=lambda m: None)
    errors = []
    thread = threading.Thread(target=lambda: _recording(errors, server.serve), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not serve.serving_pid(str(work)) and time.monotonic() < deadline and not errors:
        time.sleep(0.01)
    replies = {name: serve.wait_round(str(work), name, timeout=120) for name in names}
    stop.touch()
    thread.join(60)
    assert not errors and all("done" in r for r in replies.values()), (errors, replies)
    return replies


def _recording(errors: list, call) -> None:
    try:
        call()
    except BaseException as exc:
        errors.append(repr(exc))


def _serving_with_standbys(work: Path):
    """``serve --standby cuda`` on ``work`` in a thread, once its standbys are started: (server,
    its log lines, the errors it raised, its thread)."""
    lines, errors = [], []
    server = serve.Server(str(work), idle_timeout=60, out=io.StringIO(), log=lines.append, standby="cuda")
    thread = threading.Thread(target=lambda: _recording(errors, server.serve), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while server.standbys is None and time.monotonic() < deadline:  # (it logs before the attribute is set)
        time.sleep(0.01)
    return server, lines, errors, thread


def test_standby_workers_become_the_first_rounds_workers_and_a_dead_one_is_replaced(tmp_path, monkeypatch):
    """``serve --standby cuda``: a worker per device starts with the agent, before any round, and
    the first round's runner takes them; a standby that died meanwhile is replaced by a worker
    started as before, and every job of the round has its row."""
    bundle, manifest, results, work, runs = _stream_node(tmp_path, monkeypatch)
    monkeypatch.setenv("HARNESS_STANDIN_DEVICES", "2")
    server, lines, errors, thread = _serving_with_standbys(work)
    assert "standby workers started for cuda device(s) 0,1" in lines
    dead = server.standbys.ready["1"].proc
    dead.kill()
    dead.wait()
    jobs = manifest["jobs"][:6]
    _queue_round(work, "s-1", bundle, results, manifest, jobs, {"warmup": 1, "iters": 3, "timeout": 20.0,
                                                                "min_time_ms": 1.0})
    reply = serve.wait_round(str(work), "s-1", timeout=120)
    (work / "stop").touch()
    thread.join(60)
    assert not errors and "done" in reply, (errors, reply)
    ready = {line.split(" ready")[0]: line for line in lines if line.startswith("worker for")}
    assert "started before the round (standby)" in ready["worker for cuda:0"]
    assert re.search(r"ready after [\d.]+ s: .*start: device [\d.]+ s, plug-in [\d.]+ s, reference [\d.]+ s, "
                     r"self-check [\d.]+ s", ready["worker for cuda:0"])
    # the dead one is replaced by a worker started afresh (which may not be ready before the round's
    # jobs are all done by the other worker: then it has no ready line)
    assert "the standby worker for cuda device 1 had exited (status -9): a fresh worker starts" in lines
    assert "standby" not in ready.get("worker for cuda:1", "")
    header = reply["header"]
    assert sorted((r[header.index("variant_id")], r[header.index("shape_id")]) for r in reply["rows"]) == \
        sorted((j["variant"], j["shape"]) for j in jobs)
    assert {r[header.index("status")] for r in reply["rows"]} == {"ok"}


# a torch whose import waits for the file $FAKE_TORCH_GATE, as a node's slow torch import, opened by
# the test; it sees no GPU, so the worker it ends up in checks against the reference kernel
FAKE_TORCH = """import os
import time

while not os.path.exists(os.environ["FAKE_TORCH_GATE"]):
    time.sleep(0.01)
__version__ = "0+gate"


class cuda:
    @staticmethod
    def is_available():
        return False
"""


def test_a_bridge_measures_until_the_torch_standby_is_loaded_then_hands_its_device_over(tmp_path, monkeypatch):
    """Where the standby imports torch, a bridge (no torch) starts beside it. A round before torch
    is loaded runs on the bridges; the next round, after it is loaded, on the standbys, which take
    the devices over between jobs. Every job of both rounds has its one row."""
    bundle, manifest, results, work, runs = _stream_node(tmp_path, monkeypatch)
    monkeypatch.setenv("HARNESS_STANDIN_DEVICES", "2")
    fake = tmp_path / "faketorch"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(FAKE_TORCH)
    gate = tmp_path / "torch-gate"
    monkeypatch.setenv("FAKE_TORCH_GATE", str(gate))
    monkeypatch.setenv("PYTHONPATH", str(fake) + os.pathsep + os.environ["PYTHONPATH"])
    monkeypatch.syspath_prepend(str(fake))  # (the agent looks for torch before it starts a bridge)
    server, lines, errors, thread = _serving_with_standbys(work)
    assert "standby workers started for cuda device(s) 0,1 (and a bridge each, which measures until torch is " \
           "loaded)" in lines
    options = {"warmup": 1, "iters": 3, "timeout": 20.0, "min_time_ms": 1.0}
    first, second = manifest["jobs"][:4], manifest["jobs"][4:8]
    _queue_round(work, "s-1", bundle, results, manifest, first, options)
    replies = [serve.wait_round(str(work), "s-1", timeout=120)]
    ready = [line for line in lines if line.startswith("worker for")]
    assert ready and all("started before the round (bridge: measures until torch is loaded)" in line and
                         "reference kernel" in line for line in ready), ready
    gate.touch()
    for standby in server.standbys.ready.values():  # each says it is loaded (not read here)
        assert select.select([standby.proc.stdout], [], [], 30)[0]
    _queue_round(work, "s-2", bundle, results, manifest, second, options)
    replies.append(serve.wait_round(str(work), "s-2", timeout=120))
    (work / "stop").touch()
    thread.join(60)
    assert not errors and all("done" in r for r in replies), (errors, replies)
    handed = [line for line in lines if "torch is loaded; its standby takes over" in line]
    taken_over = [line for line in lines if line.startswith("worker for") and "(standby)" in line]
    assert handed and len(handed) == len(taken_over), lines  # each device that measured in s-2
    for reply, jobs in zip(replies, (first, second)):
        header = reply["header"]
        assert sorted((r[header.index("variant_id")], r[header.index("shape_id")]) for r in reply["rows"]) == \
            sorted((j["variant"], j["shape"]) for j in jobs)
        assert {r[header.index("status")] for r in reply["rows"]} == {"ok"}


def test_a_shape_s_remeasure_goes_to_the_device_with_the_fewest_remeasure_jobs_still_to_run():
    """A device runs its pinned jobs first, so the one with the fewest left ends them first: a
    shape whose search ends after another shape's re-measure came back goes there, not to the
    device that was given fewer jobs in all."""
    import types

    from harness.remeasure import ShapeRemeasures
    from harness.run import RunOptions
    from harness.shapes import make_shape
    from harness.strategies.base import Trial

    class Session:
        library = False
        run_options = RunOptions()
        target = types.SimpleNamespace(is_gpu=True)
        shapes = [make_shape(64, 64, 64 * i, "fp16", "NN") for i in (1, 2, 3)]

        def __init__(self):
            self.sent, self.back = [], {}

        def pinned_devices(self):
            return 2

        def rows(self):
            return []

        def submit(self, pairs, fidelity, library, pin, timing):
            self.sent.append((pairs[0][1].id, pin))
            self.back[len(self.sent)] = threading.Event()
            return len(self.sent)

        def collect(self, handle):
            assert self.back[handle].wait(10)
            return []

    session = Session()
    remeasures = ShapeRemeasures(session, SPACE_DICT, top=3, repeats=2)
    history = lambda n: [Trial({"A": a, "B": 1}, "ok", 100.0 + a) for a in range(1, n + 1)]  # noqa: E731
    a, b, c = (s.id for s in session.shapes)
    assert remeasures.start(a, history(3)) and remeasures.start(b, history(2))
    for handle in (1, 2):  # a's two rounds back; b's still out
        session.back[handle].set()
    remeasures.shapes[a].thread.join(10)
    assert remeasures.start(c, history(3))
    for event in session.back.values():
        event.set()
    for state in remeasures.shapes.values():
        state.thread.join(10)
        assert state.error is None
    slots = {sid: pin[sid] for sid, pin in session.sent}
    assert slots == {a: 0, b: 1, c: 0}  # by jobs given in all, c (3 a round) would join b (2 a round)
    assert remeasures.load == [0, 0]
