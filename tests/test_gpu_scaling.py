"""A GPU tune on a node of two devices, through the real CLI: Triton's sm90 AOT compiles here (no
GPU), the long-lived agent, and the real GPU workers on tests/gpu_standin.py's CPU stand-in.

- each shape's search is a stream of its own (harness.streams), its batches rounds of their own;
- the winners' re-measure is spread over the devices, every candidate of a shape on one device;
- the tune's last lines give each device's busy share and where the time went, and the HTML
  report has them too (from results/<target>/<kernel>/tune_timing.json);
- a second tune of the same space in a fresh project compiles nothing and says it reused.
"""

import csv
import json
import re
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import ANSWERS_ONLY, Workspace

pytest.importorskip("triton")

TARGETS = ("node:\n  backend: cuda\n  arch: x86_64\n  gpu_arch: 90\n  shared_mem_max: 232448\n"
           "  multiprocessors: 132\n  profiler: events\n  devices: \"0,1\"\n")
SPACE = ("BLOCK_M: [16, 32]\nBLOCK_N: [32, 64]\nBLOCK_K: [32]\nGROUP_M: [1]\nSPLIT_K: [1]\nnum_warps: [4]\n"
         "num_stages: [2]\n")
SHAPES = "64x64x64,32x64x128,48x64x64"


def node_project(path: Path, cache_dir: Path) -> Workspace:
    path.mkdir()
    ws = Workspace(path)
    (path / "targets.yaml").write_text(TARGETS)
    (path / "space.yaml").write_text(SPACE)
    ws.env.update(HARNESS_GPU_API="tests.gpu_standin:StandinApi", HARNESS_STANDIN_DEVICES="2",
                  HARNESS_CACHE_DIR=str(cache_dir))
    return ws


def tune(ws: Workspace) -> str:
    return ws.harness("tune", "matmul", "--target", "node", "--space", "space.yaml", "--shapes", SHAPES,
                      "--strategy", "random", "--budget", "4", "--batch-size", "2", "--top", "2", "--repeats", "2",
                      "--min-time-ms", "1", "--html").stdout


@pytest.mark.slow
def test_a_two_device_tune_spreads_the_remeasure_reports_each_device_and_reuses_compiles(tmp_path):
    first = node_project(tmp_path / "first", tmp_path / "cache")
    out = tune(first)
    compiled = int(re.search(r"compiles: (\d+) compiled, 0 reused", out).group(1))
    assert compiled >= 4  # the searched configs and the support kernels
    results = first.path / "results" / "node" / "matmul"
    with open(results / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    remeasured = set(json.loads((results / "winners.json").read_text())["remeasure_rows"])
    devices = defaultdict(set)
    for i, row in enumerate(rows):
        if i in remeasured:
            devices[row["shape_id"]].add(row["device"])
    assert len(devices) == 3
    assert all(len(d) == 1 for d in devices.values()), devices  # a shape's candidates on one device
    # the agents and their workers were started by a round of no jobs with every shape (built
    # before any config, so that the workers start while the seeds compile)
    queue = results / "serve" / "queue"
    warm = [json.loads(f.read_text()) for f in sorted(queue.glob("*.json"))
            if not json.loads(f.read_text())["manifest"]["jobs"]]
    assert len(warm) == 1 and len(warm[0]["manifest"]["shapes"]) == 3
    names = warm[0]["manifest"]["config_names"]
    assert names and all("cfg_" + n in rows[0] for n in names)  # the results file's columns, as every round's
    assert set().union(*devices.values()) == {"cuda:0", "cuda:1"}  # the shapes on both devices
    # the tune started its agent first, and the agent a worker per device before any round
    log = (results / "serve" / "serve.log").read_text()
    for device in ("cuda:0", "cuda:1"):
        assert re.search(r"worker for %s ready after [\d.]+ s: .*started before the round \(standby\).*"
                         r"standby: .*driver [\d.]+ s, waiting [\d.]+ s" % device, log), log
    # the last lines: each device's busy share per phase, and where the time went
    busy = " ".join(out.split())
    assert re.search(r"cuda:0 \d+% \(search \d+%, re-measure \d+%\); cuda:1 \d+% \(search \d+%, re-measure \d+%\)",
                     busy), busy
    assert re.search(r"where the time went: search [\d.]+ s \(\d+ configs, [\d.]+ configs/s; .*measure waited on "
                     r"build [\d.]+ s; pruning [\d.]+ s; each shape's search a stream, 4 batches in flight per shape, "
                     r"\d+ at most at once\), re-measure [\d.]+ s, report [\d.]+ s", " ".join(out.split()))
    record = json.loads((results / "tune_timing.json").read_text())
    assert set(record["devices"]) == {"cuda:0", "cuda:1"}
    # a device's re-measure jobs done while other shapes still search count in the search
    # (harness.tune_timing), so only the last shape's device is sure to be busy in the re-measure
    assert all("re-measure" in v and sum(v.values()) > 0 for v in record["devices"].values()), record
    assert any(v["re-measure"] > 0 for v in record["devices"].values()), record
    page = (first.path / "tuned" / "node" / "matmul.html").read_text()
    assert "Where the tune's time went" in page and "busy in the re-measure" in page and "cuda:1" in page
    assert "batches in flight per shape" in page
    # the same space in a fresh project: every compile comes from the cache
    second = node_project(tmp_path / "second", tmp_path / "cache")
    out = tune(second)
    assert "compiles: 0 compiled, %d reused from the compile cache" % compiled in out


def test_killing_the_agent_mid_stream_loses_and_repeats_nothing(tmp_path):
    """Several shapes' batches in flight as one stream of rounds on two stand-in GPUs: the serving
    agent is killed (SIGKILL) while it measures; the host restarts it once, the rounds it had
    joined resume from their offsets, and every asked pair ends up measured exactly once."""
    import subprocess
    import sys
    from collections import Counter

    from remote_agent import serve
    from tests.test_long_lived_agent import _kill_serving_agent_when

    ws = node_project(tmp_path / "p", tmp_path / "cache")
    serve_dir = ws.path / "results/node/matmul/serve"
    tune = subprocess.Popen(
        [sys.executable, "-m", "harness", "tune", "matmul", "--target", "node", "--space", "space.yaml", "--shapes",
         SHAPES, "--strategy", "random", "--budget", "4", "--batch-size", "1", "--top", "0", "--min-time-ms", "40"],
        cwd=ws.path, env=ws.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = _kill_serving_agent_when(  # a round just joined the stream
        tune, serve_dir, lambda lines, rounds: len(rounds) >= 3 and any(p["status"] is None for p in lines[-2:]),
        0.005)
    out, err = tune.communicate(timeout=300)
    assert tune.returncode == 0, out + err
    assert killed, "never saw the agent inside the stream"
    assert "restarting it" in out + err
    log = (serve_dir / "serve.log").read_text()
    assert "resumed:" in log
    assert log.count("serving ") == 2  # started once, restarted once
    with open(ws.path / "results/node/matmul/results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    pairs = Counter((tuple(r[c] for c in ("cfg_BLOCK_M", "cfg_BLOCK_N")), r["shape_id"]) for r in rows)
    assert len(pairs) == 12 and set(pairs.values()) == {1}, pairs  # 4 configs x 3 shapes, each exactly once
    assert {r["status"] for r in rows} == {"ok"}
    assert not serve.serving_pid(str(serve_dir)) or (serve_dir / "stop").exists()


def test_a_tune_of_two_dtypes_measures_both_through_workers_kept_across_rounds(tmp_path):
    """Each round builds one shape's batch and the kept workers read the first round's manifest:
    every round must carry the fill, error and reference kernels of every dtype of the tune."""
    ws = node_project(tmp_path / "mixed", tmp_path / "cache")
    out = ws.harness("tune", "matmul", "--target", "node", "--space", "space.yaml", "--shapes",
                     "64x64x64:fp16:NN,32x64x128:bf16:NT,48x64x64:bf16:TN", "--strategy", "random", "--budget", "3",
                     "--batch-size", "1", "--top", "0", *ANSWERS_ONLY).stdout
    assert "no ok config" not in out, out
    with open(ws.path / "results" / "node" / "matmul" / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    by_shape = defaultdict(set)
    for row in rows:
        by_shape[row["shape_id"]].add(row["status"])
    assert by_shape == {"64x64x64_fp16_NN": {"ok"}, "32x64x128_bf16_NT": {"ok"}, "48x64x64_bf16_TN": {"ok"}}, by_shape


def test_a_gpu_tune_that_fails_after_starting_its_agent_stops_it_and_its_standby_workers(tmp_path):
    """The agent and its standby workers start before the shapes are read: a typo in a shape is
    still one line and exit 2, and nothing the tune started is left running."""
    from remote_agent.serve import serving_pid

    ws = node_project(tmp_path / "p", tmp_path / "cache")
    proc = ws.harness("tune", "matmul", "--target", "node", "--space", "space.yaml", "--shapes", "64x64x6q4",
                      "--strategy", "random", "--budget", "4", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error: K='6q4' in shape '64x64x6q4' is not a whole number" in proc.stderr
    serve_dir = ws.path / "results" / "node" / "matmul" / "serve"
    assert "standby workers started for cuda device(s) 0,1" in (serve_dir / "serve.log").read_text()
    deadline = time.monotonic() + 20
    while serving_pid(str(serve_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert serving_pid(str(serve_dir)) is None
    assert not _standbys_of(tmp_path)


def _standbys_of(tmp_path: Path) -> list:
    """Standby worker processes whose environment names ``tmp_path`` (this test's compile cache)."""
    found = []
    for pid in subprocess.run(["pgrep", "-f", "gpu_worker standby"], capture_output=True, text=True).stdout.split():
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                if str(tmp_path).encode() in f.read():
                    found.append(pid)
        except OSError:
            pass  # gone meanwhile
    return found
