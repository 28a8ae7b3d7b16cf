"""Strategies from outside the tree ($HARNESS_STRATEGIES_PATH) and --strategy-option, through the CLI."""

import csv
import json

import pytest

from harness import strategies
from harness.strategies.halving import Halving
from tests.conftest import ANSWERS_ONLY, Workspace

TARGET = "native-qemu-free"  # this machine, wall-clock timing
SPACE = "MR: [1, 2, 4]\nNR: [16]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1, 0]\n"

MINE = '''
"""A strategy of my own: the space backwards, each proposal written to a file."""
import json

from harness.strategies.base import Batch, Strategy


class Backwards(Strategy):
    name = "mine"
    description = "the space backwards"
    options = {"log": ("file the proposals are appended to", "", str),
               "stride": ("propose every stride-th config", 1, int)}

    def _propose(self, summary, problem, limit, budget):
        order = list(range(len(problem)))[::-1][::self.stride]
        configs = self._unmeasured_in_order(order, problem, summary.measured(), limit)
        with open(self.log, "a") as f:
            for config in configs:
                f.write(json.dumps(config, sort_keys=True) + "\\n")
        return Batch(configs)


STRATEGY = Backwards
'''


@pytest.fixture()
def ws(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "mine.py").write_text(MINE)
    project = tmp_path / "project"
    project.mkdir()
    w = Workspace(project)
    w.env["HARNESS_STRATEGIES_PATH"] = str(plugins)
    (w.path / "search.yaml").write_text(SPACE)
    return w


def tune(ws, *extra, check=True):
    return ws.harness("tune", "matmul", "--target", TARGET, "--space", "search.yaml", "--iters", "3",
                      "--warmup", "1", "--shapes", "32x16x8", "--top", "0", *ANSWERS_ONLY, *extra, check=check)


def measured_configs(ws):
    with open(ws.path / "results" / TARGET / "matmul" / "results.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if not r["variant_id"].startswith("lib:")]
    return [{k[4:]: int(v) for k, v in r.items() if k.startswith("cfg_") and v != ""} for r in rows]


@pytest.mark.slow
def test_a_strategy_from_a_folder_of_its_own_runs_a_tune_with_its_options(ws):
    log = ws.path / "proposed.jsonl"
    out = tune(ws, "--strategy", "mine", "--strategy-option", "log=%s" % log, "--strategy-option", "stride=2",
               "--budget", "3", "--batch-size", "2", "--no-warm-start").stdout
    assert "search: mine" in out
    proposed = [json.loads(line) for line in log.read_text().splitlines()]
    # the 6 configs backwards, every second one: MR 4, 2, 1 with PACK_B 0; budget 3
    assert [(c["MR"], c["PACK_B"]) for c in proposed] == [(4, 0), (2, 0), (1, 0)]
    assert sorted(map(json.dumps, measured_configs(ws))) == sorted(
        json.dumps({k: c[k] for k in ("MR", "NR", "KC", "MC", "NC", "PACK_B")}) for c in proposed)


def test_help_lists_every_strategy_and_its_options_those_from_the_folder_included(ws):
    out = ws.harness("tune", "--help").stdout
    flat = " ".join(out.replace("│", " ").split())
    assert "mine (the space backwards)" in flat
    assert "stride (int, default 1): propose every stride-th config" in flat
    assert "eta (int, default 3)" in flat


@pytest.mark.parametrize("extra, words", [
    (("--strategy", "halving", "--strategy-option", "eta=x"), "--strategy-option eta=x: eta of strategy halving is an int"),
    (("--strategy", "halving", "--strategy-option", "et=2"), "strategy halving has no option 'et'; its options: eta"),
    (("--strategy", "halving", "--strategy-option", "eta=1"), "--strategy-option eta must be at least 2 (got 1)"),
    (("--strategy", "mine", "--strategy-option", "stride"), "--strategy-option 'stride': write NAME=VALUE"),
    (("--strategy", "exhaustive", "--strategy-option", "eta=3"), "strategy exhaustive has no option 'eta'; it takes no options"),
])
@pytest.mark.slow
def test_a_bad_strategy_option_is_one_line_and_exit_2_before_anything_is_built(ws, extra, words):
    proc = tune(ws, *extra, check=False)
    assert proc.returncode == 2, proc.stderr
    error = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    assert len(error) == 1 and words in error[0], proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (ws.path / "build").exists()


@pytest.mark.slow
def test_a_strategy_file_that_does_not_load_is_named_in_one_line(ws, tmp_path):
    (tmp_path / "plugins" / "broken.py").write_text("STRATEGY = 3\n")
    proc = tune(ws, "--strategy", "mine", check=False)
    assert proc.returncode == 2
    assert "broken.py: STRATEGY must be a harness.strategies.base.Strategy subclass" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_each_built_in_strategy_declares_its_options_once_and_they_set_its_attributes():
    table = strategies.registry()
    assert list(table)[:5] == ["exhaustive", "random", "halving", "bayes", "genetic"]
    halving = strategies.get_strategy("halving", **strategies.parse_options("halving", ["eta=4"]))
    assert isinstance(halving, Halving) and halving.eta == 4 and halving.max_rungs == 4
    assert strategies.parse_options("bayes", ["multivariate=no"]) == {"multivariate": False}
    for cls in table.values():
        for name, (text, default, kind) in cls.options.items():
            assert text and kind in (int, float, bool, str) and isinstance(default, kind), (cls.name, name)
