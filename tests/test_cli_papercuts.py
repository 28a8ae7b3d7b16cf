"""What a newcomer trips over: the default target, `run --remote` without a name, a push before
any build for its target, `--targets` after any command, missing optional dependencies, and a
shape whose every config was pruned. Each case: the exit code, the one line, no traceback."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ANSWERS_ONLY, REPO, needs

ONE_CONFIG = "MR: [1]\nNR: [16]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1]\n"


def _one_line_error(proc, *words):
    """Exit 2, no traceback, and one line on stderr holding every word."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _no_traceback(proc):
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


# ---- the default target ------------------------------------------------------------------------
@pytest.mark.slow
def test_build_without_target_uses_default_key_else_local(local_workspace):
    ws = local_workspace
    (ws.path / "one.yaml").write_text(ONE_CONFIG)
    out = _no_traceback(ws.harness("build", "matmul", "--shapes", "16x16x16", "--space", "one.yaml")).stdout
    assert "target: local (targets.yaml names no `default:`" in out
    assert (ws.path / "build/local/matmul/manifest.json").exists()
    # a top-level `default:` is a setting, not a target, and picks the target
    (ws.path / "targets.yaml").write_text("default: native-qemu-free\n" + ws.targets_yaml())
    out = _no_traceback(ws.harness("build", "matmul", "--shapes", "16x16x16", "--space", "one.yaml")).stdout
    assert "target: native-qemu-free (targets.yaml:1 says `default: native-qemu-free`" in out
    assert (ws.path / "build/native-qemu-free/matmul/manifest.json").exists()
    listing = ws.harness("targets").stdout
    assert "native-qemu-free (default)" in listing and "default " not in listing.replace("(default)", "")


@pytest.mark.parametrize("default, words", [
    ("lcoal", ["targets.yaml:1", "default: unknown target 'lcoal'", "did you mean 'local'"]),
    ("[local]", ["targets.yaml:1", "default: must name a target"]),
    ("\n  arch: native", ["targets.yaml:2", "`default` is not a target"]),
])
def test_bad_default_key_is_one_line_with_file_and_line(local_workspace, default, words):
    ws = local_workspace
    (ws.path / "targets.yaml").write_text("default: %s\n" % default + ws.targets_yaml())
    _one_line_error(ws.harness("build", "matmul", check=False), *words)
    _one_line_error(ws.harness("targets", check=False), *words)


def test_no_default_and_no_local_target(local_workspace):
    ws = local_workspace
    (ws.path / "targets.yaml").write_text("board:\n  arch: native\n")
    _one_line_error(ws.harness("build", "matmul", check=False), "targets.yaml", "no `default: NAME`",
                    "pass --target NAME", "known: board")


# ---- --targets in every position ---------------------------------------------------------------
COMMANDS = [  # (arguments, exit code, what shows that the file was read)
    (["targets"], 0, "only-here"),
    (["targets", "check", "only-here"], 0, "only-here"),
    (["build", "no-such-kernel", "--target", "only-here"], 2, "unknown kernel 'no-such-kernel'"),
    (["tune", "no-such-kernel", "--target", "only-here"], 2, "unknown kernel 'no-such-kernel'"),
    (["push", "only-here"], 0, "only-here runs on this machine"),
    (["run", "--target", "only-here"], 2, "nothing built for only-here"),
    (["report", "--target", "only-here"], 2, "nothing built for only-here"),
    (["status", "only-here"], 2, "nothing built for only-here"),
    (["simulate", "missing.csv"], 2, "results file missing.csv does not exist"),
]


@pytest.mark.slow
@pytest.mark.parametrize("args, rc, shows", COMMANDS, ids=[" ".join(c[0][:2]) for c in COMMANDS])
def test_targets_option_before_and_after_every_command(tmp_path, args, rc, shows):
    (tmp_path / "my.yaml").write_text("only-here:\n  arch: native\n  profiler: wallclock\n")
    project = tmp_path / "project"  # no targets.yaml here
    project.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    env.pop("HARNESS_TARGETS", None)
    for argv in (["--targets", "../my.yaml"] + args, args + ["--targets", "../my.yaml"]):
        proc = subprocess.run([sys.executable, "-m", "harness"] + argv, cwd=project, env=env, capture_output=True,
                              text=True, timeout=120)
        _no_traceback(proc)
        assert proc.returncode == rc, (argv, proc.stdout, proc.stderr)
        assert shows in proc.stdout + proc.stderr, (argv, proc.stdout, proc.stderr)
    # a subcommand's own position too: harness targets --targets F check T
    if args[:2] == ["targets", "check"]:
        proc = subprocess.run([sys.executable, "-m", "harness", "targets", "--targets", "../my.yaml", "check",
                               "only-here"], cwd=project, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "only-here" in proc.stdout, proc.stderr


# ---- run --remote with and without a name, push before any build for its target ---------------
def test_run_remote_needs_a_push_or_a_name(local_workspace):
    _one_line_error(local_workspace.harness("run", "--remote", check=False), "nothing pushed yet",
                    "harness run --remote TARGET")
    _one_line_error(local_workspace.harness("run", "local", check=False), "add --remote", "--target local")


@pytest.mark.fresh_compile_cache
@pytest.mark.slow
@needs("qemu-riscv64", "clang", "riscv64-linux-gnu-ld")
def test_push_builds_from_last_build_and_run_remote_takes_the_pushed_target(workspace):
    ws = workspace
    (ws.path / "two.yaml").write_text("MR: [1, 2]\nNR: [16]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1]\n")
    ws.harness("build", "matmul", "--target", "local", "--shapes", "32x32x32", "--space", "two.yaml")
    out = _no_traceback(ws.harness("push", "rv")).stdout
    assert "nothing built for rv yet: building matmul for it with the options of the last build (for local): " \
           "--shapes 32x32x32 --space two.yaml" in out
    assert "built matmul for rv: 2 variants (2 compiled, 0 cached" in out and "pushed matmul to rv" in out
    manifest = json.loads((ws.path / "build/rv/matmul/manifest.json").read_text())
    assert [s["id"] for s in manifest["shapes"]] == ["32x32x32_fp32_NN"]
    # the same build again compiles nothing; a second push sends nothing
    again = ws.harness("build", "matmul", "--target", "rv", "--shapes", "32x32x32", "--space", "two.yaml").stdout
    assert "0 compiled, 2 cached" in again
    assert "0 files sent" in ws.harness("push", "rv").stdout
    # --remote alone: the last pushed target (rv, not local, the last built one before the push)
    out = _no_traceback(ws.harness("run", "--remote", "--iters", "2", *ANSWERS_ONLY)).stdout
    assert "results on rv:" in out
    rows = (ws.path / "remote-rv/results/rv/matmul/results.csv").read_text().splitlines()
    assert len(rows) == 3  # header + 2 variants
    # --remote NAME still works, with options on either side
    out = _no_traceback(ws.harness("run", "--iters", "2", "--remote", "rv", "--all", *ANSWERS_ONLY)).stdout
    assert "results on rv:" in out
    assert len((ws.path / "remote-rv/results/rv/matmul/results.csv").read_text().splitlines()) == 5
    # report without a name: the last run's target
    proc = _no_traceback(ws.harness("report"))
    assert "new rows from rv" in proc.stderr
    assert (ws.path / "tuned/rv/matmul.json").exists() and not (ws.path / "tuned/local").exists()


# ---- a shape whose every config was pruned -----------------------------------------------------
def _strip_path(ws, without):
    """A PATH of links to every program on PATH except ``without``."""
    bin_dir = ws.path / ("bin-without-" + "-".join(without))
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if name not in without and not (bin_dir / name).exists():
                (bin_dir / name).symlink_to(Path(folder) / name)
    return str(bin_dir)


@pytest.mark.slow
def test_all_pruned_shape_names_rules_counts_and_nearest_change(local_workspace):
    ws = local_workspace
    (ws.path / "space2.yaml").write_text("MR: [4, 32]\nNR: [16]\nKC: [16, 32]\nMC: [32]\nNC: [64]\nPACK_B: [1]\n")
    out = ws.harness("build", "pruned_matmul", "--target", "local", "--shapes", "32x32x32,24x40x56",
                     "--space", "space2.yaml").stdout
    expected = ("24x40x56_fp32_NN: all 4 configs pruned: k_not_multiple 2 (K is not a multiple of KC); "
                "mr_over_m 2 (MR larger than M); nearest change: add KC 8 to the space, "
                "or use K=48")
    assert expected in out.splitlines()
    assert "32x32x32_fp32_NN: all" not in out
    # perf missing here: --profiler perf is one line; the target's own perf falls back to the wall clock
    no_perf = dict(ws.env, PATH=_strip_path(ws, ["perf", "chromium", "chromium-browser"]))
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--profiler", "perf"], cwd=ws.path, env=no_perf,
                          capture_output=True, text=True, timeout=300)
    _one_line_error(proc, "--profiler perf needs perf", "apt-get install linux-perf")
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--iters", "2", *ANSWERS_ONLY], cwd=ws.path, env=no_perf,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "perf is not installed here: timing with the wall clock, no counters (for counters: apt-get install " \
           "linux-perf" in proc.stderr
    # the report says it again under "no ok config for"; --html needs no browser
    proc = subprocess.run([sys.executable, "-m", "harness", "report", "--html"], cwd=ws.path, env=no_perf,
                          capture_output=True, text=True, timeout=300)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index("no ok config for: 24x40x56_fp32_NN")
    assert lines[at + 1] == expected
    assert (ws.path / "tuned/local/pruned_matmul.html").stat().st_size > 0


# ---- missing optional dependencies, in a virtual environment without them ----------------------
def _base_venv(dest: Path, leave_out=("optuna",)) -> Path:
    """A venv (no system site packages) holding harness's base dependencies and what they need,
    linked from this Python's site-packages, less ``leave_out``: no `gpu` extra (triton)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    site = next(dest.glob("lib/python*/site-packages"))
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in project["dependencies"]]
    seen, linked = set(), set()
    while todo:
        req = todo.pop()
        if req.name.lower() in seen or req.name in leave_out:
            continue
        seen.add(req.name.lower())
        dist = md.distribution(req.name)
        todo += [r for r in map(Requirement, dist.requires or []) if r.marker is None or r.marker.evaluate({"extra": ""})]
        for file in dist.files:
            top = file.parts[0]
            if top != ".." and top not in linked and Path(dist.locate_file(top)).exists():
                (site / top).symlink_to(dist.locate_file(top))
                linked.add(top)
    return dest / "bin" / "python"


@pytest.mark.fresh_compile_cache
@pytest.mark.slow
def test_missing_triton_and_optuna_in_a_venv_without_them(local_workspace, tmp_path):
    ws = local_workspace
    python = _base_venv(tmp_path / "venv")
    for module in ("triton", "optuna"):
        assert subprocess.run([str(python), "-c", "import %s" % module], capture_output=True).returncode == 1
    (ws.path / "targets.yaml").write_text((REPO / "targets.yaml").read_text())  # gpu-node, mi300

    def harness(*args):
        return subprocess.run([str(python), "-m", "harness"] + list(args), cwd=ws.path, env=ws.env,
                              capture_output=True, text=True, timeout=300)

    _one_line_error(harness("build", "matmul", "--target", "gpu-node", "--shapes", "256x256x256:fp16"),
                    "gpu-node is a cuda target", "pip install 'harness[gpu]'")
    _one_line_error(harness("tune", "matmul", "--target", "mi300", "--shapes", "256x256x256:fp16"),
                    "mi300 is a hip target", "pip install 'harness[gpu]'")
    _one_line_error(harness("tune", "matmul", "--target", "local", "--strategy", "bayes", "--budget", "2"),
                    "--strategy bayes needs optuna", "pip install 'optuna>=4'")
    # the base install is enough for a CPU build
    (ws.path / "one.yaml").write_text(ONE_CONFIG)
    proc = harness("build", "matmul", "--target", "local", "--shapes", "16x16x16", "--space", "one.yaml")
    assert proc.returncode == 0 and "1 compiled" in proc.stdout, proc.stderr


def test_the_command_line_starts_without_numpy():
    """Every `harness` command pays the CLI's import; numpy (0.06 s of it) is imported only where
    a search or a report needs it (a test suite runs the CLI a few hundred times)."""
    probe = "import sys, harness.cli; print(sorted(m for m in ('numpy', 'pandas', 'optuna') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
