"""`harness tune --strategy ...`, the noise-aware winner and `harness simulate`, through the real CLI.

The local tests share one project folder: artifacts are content-addressed per (config, dtype), so
a config compiled for one test is cached for the next and the file stays fast on two cores.
"""

import csv
import json
import re
import statistics
from pathlib import Path

import pandas as pd
import pytest

from harness.shapes import parse_shape
from harness.kernels.matmul.rules import CPU_RULES
from harness.strategies import get_strategy, key, pruning_predicate, tune_rounds
from harness.strategies.winner import MIN_RESOLUTION
from harness.targets import Target
from remote_agent import contract
from tests.conftest import ANSWERS_ONLY, Workspace, needs

REPO = Path(__file__).resolve().parent.parent
RECORDED = REPO / "tests" / "data" / "cpu_fullspace" / "matmul_local_x86_64.csv"
SPACE = "MR: [1, 2, 4]\nNR: [16, 32]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1, 0]\n"
SPACE_DICT = {"MR": [1, 2, 4], "NR": [16, 32], "KC": [64], "MC": [16], "NC": [64], "PACK_B": [1, 0]}
TARGET = "native-qemu-free"  # this machine, wall-clock timing


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    w = Workspace(tmp_path_factory.mktemp("tune"))
    (w.path / "search.yaml").write_text(SPACE)
    return w


def rows(ws, target=TARGET):
    path = ws.path / "results" / target / "matmul" / "results.csv"
    if not path.exists():  # nothing measured yet (a test run on its own)
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def cfg(row):
    return tuple(sorted((k[4:], int(v)) for k, v in row.items() if k.startswith("cfg_") and v != ""))


def artifacts(ws, target=TARGET):
    return sorted(p.name for p in (ws.path / "build" / target / "matmul" / "artifacts").glob("*.elf"))


def tune(ws, *extra, check=True):
    return ws.harness("tune", "matmul", "--target", TARGET, "--space", "search.yaml", "--iters", "3",
                      "--warmup", "1", *extra, check=check)


def expected_asks(shape_text, budget, seed, batch_size):
    """What the library's random strategy asks for, driven without building anything."""
    shape, target = parse_shape(shape_text), Target(name=TARGET)
    is_pruned = pruning_predicate(CPU_RULES, [shape], target)
    asked = []

    def evaluate(configs):
        asked.append([key(c) for c in configs])
        return [{"config": c, "status": "ok", "time_ns": 1000.0 + len(asked)} for c in configs]

    tune_rounds(get_strategy("random", seed=seed, batch_size=batch_size), SPACE_DICT, is_pruned, evaluate,
                budget=budget)
    return asked


@pytest.mark.slow
def test_random_search_builds_only_what_it_asks_and_resumes(ws):
    shape = "32x16x32"  # NR 32 is pruned for N = 16 by the kernel's own rule (nr_exceeds_n)
    out = tune(ws, "--shapes", shape, "--strategy", "random", "--budget", "4", "--batch-size", "2", "--seed", "7",
               "--top", "0", *ANSWERS_ONLY).stdout
    assert "search: random, 2 rounds" in out
    # the harness says how long the whole tune took, and where the time went
    assert re.search(r"tune wall time: [\d.]+ s end to end \(search [\d.]+ s, report [\d.]+ s\)", out)
    first = [cfg(r) for r in rows(ws)]
    assert len(first) == 4 and len(set(first)) == 4
    assert len(artifacts(ws)) == 4  # only the asked configs were compiled
    manifest = json.loads((ws.path / "build" / TARGET / "matmul" / "manifest.json").read_text())
    assert len(manifest["jobs"]) == 2  # the bundle holds the last round only
    # an interrupted search (budget 4) goes on to budget 6 from the rows on disk
    out = tune(ws, "--shapes", shape, "--strategy", "random", "--budget", "6", "--batch-size", "2", "--seed", "7",
               "--top", "0", *ANSWERS_ONLY).stdout
    assert "32x16x32_fp32_NN" in out and "resumed" in out
    table_row = next(l for l in out.splitlines() if l.startswith("│ 32x16x32_fp32_NN") and "budget" in l)
    cells = [c.strip() for c in table_row.strip("│").split("│")]
    assert cells[1:5] == ["6", "4", "2", "6"]  # feasible, resumed, new, distinct
    measured = [cfg(r) for r in rows(ws)]
    assert measured[:4] == first and len(measured) == 6 and len(set(measured)) == 6
    assert len(artifacts(ws)) == 6
    # exactly what the strategy asks under its seed, round by round; never a pruned config
    asked = [c for batch in expected_asks(shape, 6, 7, 2) for c in batch]
    assert measured == asked
    assert all(dict(c)["NR"] < 32 for c in measured)
    assert all(r["status"] == "ok" and int(r["samples"]) >= 3 for r in rows(ws))


@pytest.mark.fresh_compile_cache  # a compile that the cache answers never times out
@pytest.mark.slow
def test_a_failed_compile_in_a_search_round_is_a_row_and_the_search_goes_on(tmp_path):
    """Each config of a round that does not compile comes back as a row with its status; such
    configs used to vanish from the round, and a shape whose whole batch failed stopped searching
    as if the round had been interrupted ("no_results")."""
    w = Workspace(tmp_path)
    (w.path / "search.yaml").write_text(SPACE)
    out = tune(w, "--shapes", "24x24x24", "--strategy", "random", "--budget", "4", "--batch-size", "2",
               "--top", "0", "--compile-timeout", "0.001").stdout
    assert "search: random, 2 rounds" in out
    table_row = next(l for l in out.splitlines() if l.startswith("│ 24x24x24_fp32_NN"))
    assert "budget" in table_row and "no_results" not in table_row
    mine = rows(w)
    assert len(mine) == 4 and len({cfg(r) for r in mine}) == 4
    assert {r["status"] for r in mine} == {contract.COMPILE_TIMEOUT}
    assert {r["shape_id"] for r in mine} == {"24x24x24_fp32_NN"}


@pytest.mark.slow
def test_halving_remeasures_the_best_longer(ws):
    out = tune(ws, "--shapes", "32x32x32", "--strategy", "halving", "--budget", "5", "--batch-size", "4",
               "--top", "0", "--max-noise", "1", "--estimator", "median").stdout
    # any noise will do, so the samples are the fewest --iters allows (the minimum would sample
    # at least its settle time)
    assert "(x3 longer)" in out
    mine = [r for r in rows(ws) if r["shape_id"] == "32x32x32_fp32_NN"]
    # --iters 3: at least 3 samples (5 for the noise to settle); eta 3: at least 9 samples
    rung0 = [r for r in mine if int(r["samples"]) < 9]
    rung1 = [r for r in mine if int(r["samples"]) >= 9]
    assert len(rung0) == 3 and len(rung1) == 1 and len(mine) == 4  # within the budget of 5
    fastest = min(rung0, key=contract.deciding_time)
    assert rung1[0]["variant_id"] == fastest["variant_id"]  # the agent re-measured it (--all), not skipped


@pytest.mark.slow
def test_noise_aware_winner_is_remeasured_interleaved_and_reported(ws):
    # no warm start: its fastest seed would join the top 2 whenever noise ranks it third
    # (top_candidates' seed rule, tested in test_strategies.py), and this test counts two candidates
    out = tune(ws, "--shapes", "32x32x32,24x16x32", "--strategy", "random", "--budget", "3", "--batch-size", "3",
               "--top", "2", "--repeats", "3", "--seed", "7", "--library", "--no-warm-start").stdout
    assert "re-measuring the top 2 configs of 2 shapes interleaved, 3 rounds" in out
    assert "noise-aware winners" in out
    winners = json.loads((ws.path / "results" / TARGET / "matmul" / "winners.json").read_text())
    all_rows = rows(ws)
    # a shape whose winner measured noisy (a busy machine) gets 3 more rounds, and says so
    more = re.search(r"more rounds \(([^)]*)\)", " ".join(out.split()))  # the line may wrap
    noisy = more.group(1).split(", ") if more else []
    for sid in ("32x32x32_fp32_NN", "24x16x32_fp32_NN"):
        w = winners["shapes"][sid]
        n = 6 if sid in noisy else 3
        assert w["repeats"] == n and w["decided"] in ("clear", "tie") and len(w["candidates"]) == 2, (sid, w, out)
        assert w["spread_ns"] >= 0 and w["median_ns"] > 0
        re_rows = [all_rows[i] for i in winners["remeasure_rows"] if all_rows[i]["shape_id"] == sid]
        # the library is timed again in every repeat, in the winners' window; the uplift takes its
        # time over those repeats as the winner's is taken (the minimum where the minimum decides)
        lib_rows = [r for r in re_rows if r["variant_id"].startswith("lib:")]
        assert len(lib_rows) == n and len([r for r in all_rows if r["variant_id"].startswith("lib:")
                                           and r["shape_id"] == sid]) == n + 1  # the first round's, and n repeats
        uplift = {u["shape_id"]: u for u in csv.DictReader(open(ws.path / "tuned" / TARGET / "matmul.uplift.csv"))}
        lib_times = [float(r["time_ns"]) for r in lib_rows]
        by_min = all(r["estimator"] == "min" for r in lib_rows)
        assert float(uplift[sid]["library_ns"]) == pytest.approx(min(lib_times) if by_min
                                                                 else statistics.median(lib_times))
        re_rows = [r for r in re_rows if not r["variant_id"].startswith("lib:")]
        order = [r["variant_id"] for r in re_rows]
        pairs = [order[i:i + 2] for i in range(0, len(order), 2)]
        assert len(order) == 2 * n and pairs == [pairs[0], pairs[0][::-1]] * (n // 2) + [pairs[0]] * (n % 2), (sid, order, out)  # A B, B A, ...
        minima = {}
        for r in re_rows:
            assert r["estimator"] == "min" and float(r["time_ns"]) == float(r["time_ns_min"])
            minima.setdefault(r["variant_id"], []).append(float(r["time_ns"]))
        low = sorted(minima[w["variant_id"]])
        assert w["estimator"] == "min" and w["median_ns"] == low[0]  # the smallest of its repeats
        assert w["spread_ns"] == pytest.approx(max(low[1] - low[0], MIN_RESOLUTION * low[0]))  # to its next repeat
        # the report uses the winner and shows its spread
        best = {b["shape"]: b for b in json.loads((ws.path / "tuned" / TARGET / "matmul.json").read_text())["best"]}
        assert best[sid]["variant_id"] == w["variant_id"]
        assert best[sid]["spread_ns"] == pytest.approx(w["spread_ns"])
    # a later search resumes from the search rows, not from the re-measures
    out = tune(ws, "--shapes", "24x16x32", "--strategy", "random", "--budget", "3", "--seed", "7", "--top", "0").stdout
    row = next(l for l in out.splitlines() if l.startswith("│ 24x16x32_fp32_NN"))
    assert [c.strip() for c in row.strip("│").split("│")][2:4] == ["3", "0"]  # resumed 3, new 0


@pytest.mark.slow
def test_time_limit_stops_the_search(ws):
    # 24x16x32 prunes like 32x16x32, so seed 7 asks for configs compiled there: the rounds are short,
    # about 0.1 s here (a build from the cache and an agent process). The first round always runs;
    # a limit far below any round's length (1 ms) leaves no time for a second one, however fast.
    before_rows = [r for r in rows(ws) if r["shape_id"] == "24x16x32_fp32_NN"]
    before = len(before_rows)
    out = tune(ws, "--shapes", "24x16x32", "--strategy", "random", "--seed", "7", "--time-limit", "0.001s",
               "--batch-size", "2", "--top", "0").stdout
    assert "search: random, 1 rounds" in out
    row = next(l for l in out.splitlines() if l.startswith("│ 24x16x32_fp32_NN"))
    assert row.rstrip(" │").endswith("time_limit")
    after = [r for r in rows(ws) if r["shape_id"] == "24x16x32_fp32_NN"]
    assert len(after) == before + 2, ([r["variant_id"] for r in before_rows], [r["variant_id"] for r in after], out)


@pytest.mark.parametrize("args, needle", [
    (["--strategy", "bayse"], "unknown --strategy 'bayse' (did you mean 'bayes'?)"),
    (["--strategy", "random", "--budget", "0"], "--budget is a number of evaluations per shape"),
    (["--strategy", "random", "--time-limit", "ten minutes"], "--time-limit 'ten minutes'"),
    (["--top", "2", "--repeats", "1"], "--repeats at least 2"),
])
def test_bad_tune_options_are_one_line(ws, args, needle):
    proc = tune(ws, "--shapes", "16x16x16", *args, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr


@pytest.mark.slow
def test_without_strategy_a_big_space_gets_the_budgeted_default(ws):
    # CPU spaces are small (exhaustive by default); past 1000 configs the default is a budgeted search
    (ws.path / "big.yaml").write_text("MR: [1, 2, 4, 6, 8, 12]\nNR: [16, 32, 48, 64]\nKC: [64, 128, 256]\n"
                                      "MC: [16, 32, 64]\nNC: [64, 128, 256]\nPACK_B: [1, 0]\n")  # 1296 configs
    out = ws.harness("tune", "matmul", "--target", TARGET, "--space", "big.yaml", "--shapes", "40x24x32",
                     "--iters", "2", "--warmup", "1", "--budget", "2", "--top", "0", *ANSWERS_ONLY).stdout
    assert "effort default: strategy genetic, --budget 2 per shape" in out and "search: genetic" in out
    assert len([r for r in rows(ws) if r["shape_id"] == "40x24x32_fp32_NN"]) == 2


@pytest.mark.slow
def test_simulate_command_is_deterministic(local_workspace):
    args = ["simulate", RECORDED, "--strategy", "random,halving", "--seeds", "3", "--shape", "256x256x256_fp32_NN"]
    first = local_workspace.harness(*args).stdout
    assert first == local_workspace.harness(*args).stdout
    lines = [l for l in first.splitlines() if l.startswith("│ 256x256x256")]
    assert [l.split("│")[2].strip() for l in lines] == ["random", "halving"]
    assert all(l.split("│")[3].strip() == "250" and l.split("│")[6].strip() == "3/3" for l in lines)
    bad = local_workspace.harness("simulate", "nope.csv", check=False)
    assert bad.returncode == 2 and "results file nope.csv does not exist" in bad.stderr
    bad = local_workspace.harness("simulate", RECORDED, "--strategy", "annealing", check=False)
    assert bad.returncode == 2 and "unknown --strategy annealing" in bad.stderr


@pytest.mark.slow
@needs("qemu-aarch64", "clang", "aarch64-linux-gnu-ld")
def test_bayes_search_on_an_emulated_board_over_ssh(workspace):
    ws = workspace
    (ws.path / "search.yaml").write_text(SPACE)
    out = ws.harness("tune", "matmul", "--target", "arm", "--shapes", "32x32x32", "--space", "search.yaml",
                     "--strategy", "bayes", "--budget", "3", "--batch-size", "3", "--iters", "2", "--top", "0",
                     "--library", *ANSWERS_ONLY).stdout
    assert "search: bayes, 1 rounds" in out
    remote = ws.path / "remote-arm"
    pushed = list((remote / "bundles" / "arm" / "matmul" / "artifacts").glob("*.elf"))
    assert len(pushed) == 4  # the three asked configs and the library reference: nothing else was sent
    df = pd.read_csv(ws.path / "results" / "arm" / "matmul" / "results.csv")  # brought home round by round
    assert sorted(df["variant_id"].str.startswith("lib:")) == [False, False, False, True]
    assert set(df["status"]) == {"ok"}
    tuned = json.loads((ws.path / "tuned" / "arm" / "matmul.json").read_text())
    assert tuned["arch"] == "aarch64" and "under qemu-aarch64" in tuned["device"]
    assert tuned["cu_num"] >= 1 and tuned["toolchain"].startswith(("clang", "Debian clang"))
    assert "against the library" in out and "lib:openblas:fp32" in out
    # the tuned configs verified on the board, apart from the target's own bundle and results
    out = ws.harness("report", "--compare-wo-tuning", "tuned/arm/matmul.json", "--iters", "2").stdout
    assert "1 entries: ok 1" in out
    assert list((remote / "bundles" / "arm--compare" / "matmul" / "artifacts").glob("*.elf"))
    assert len(pd.read_csv(ws.path / "results" / "arm" / "matmul" / "results.csv")) == len(df)
    assert len(list((remote / "bundles" / "arm" / "matmul" / "artifacts").glob("*.elf"))) == 4
