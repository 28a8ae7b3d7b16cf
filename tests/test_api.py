"""harness.api: the library layer the commands call, called here as a script would."""

import csv
import dataclasses
import inspect

import pytest
from typer.models import ParameterInfo

from harness.api.build import BuildArgs
from harness.api.push import PushArgs
from harness.api.report import ReportArgs
from harness.api.run import RunArgs
from harness.api.tune import TuneArgs, tune
from harness.commands import workflow
from tests.conftest import Workspace

ARGS = {"build": BuildArgs, "push": PushArgs, "run": RunArgs, "report": ReportArgs, "tune": TuneArgs}


@pytest.mark.parametrize("command", sorted(ARGS))
def test_each_dataclass_has_the_command_lines_options_and_defaults(command):
    options = {}
    for name, p in inspect.signature(getattr(workflow, command)).parameters.items():
        options[name] = p.default.default if isinstance(p.default, ParameterInfo) else p.default
    fields = {f.name: f.default for f in dataclasses.fields(ARGS[command])}
    assert list(fields) == list(options)
    for name, default in options.items():
        if default is ...:  # a required argument: no default in the dataclass either
            assert fields[name] is dataclasses.MISSING, name
        else:
            assert fields[name] == default, name


@pytest.mark.slow
def test_tune_from_python_builds_runs_and_reports_and_leaves_its_options_as_given(tmp_path, monkeypatch):
    ws = Workspace(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_KERNELS_PATH", ws.env["HARNESS_KERNELS_PATH"])
    args = TuneArgs(kernel="matmul", target="native-qemu-free", shapes="16x16x16", space="space.yaml", iters=3,
                    warmup=1, strategy="exhaustive", top=0, targets_file=str(tmp_path / "targets.yaml"))
    before = dataclasses.replace(args)
    tune(args)
    assert args == before  # the api worked on its own copy (it fills in the target, timing, ...)
    with open(tmp_path / "results" / "native-qemu-free" / "matmul" / "results.csv", newline="") as f:
        measured = list(csv.DictReader(f))
    assert {r["shape_id"] for r in measured} == {"16x16x16_fp32_NN"}
    # SMALL_SPACE's 4 configs: BLOCK_N 32 pruned for N = 16, the other two measured
    assert sorted(r["status"] for r in measured) == ["ok", "ok", "pruned", "pruned"]
    tuned = (tmp_path / "tuned" / "native-qemu-free" / "matmul.csv").read_text()
    assert "16x16x16" in tuned
