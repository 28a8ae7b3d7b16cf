"""Tuning through a real Slurm: a one-node cluster on 127.0.0.1 (munged, slurmctld, slurmd; see
tests/slurm.py) whose login node is a loopback sshd. The emulated RVV board's matmul is built,
pushed to the cluster's shared folder, run as a job array and reported; a task killed with
scancel mid-run is submitted again and nothing is lost or measured twice."""

import json
import shutil
import subprocess
import sys
import time

import pandas as pd
import pytest

from tests.conftest import ANSWERS_ONLY, QEMU_RV, Workspace, needs
from tests.slurm import make_cluster

needs_slurm = needs("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "qemu-riscv64", "clang")

SHAPES = "32x32x32,64x32x32"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = make_cluster(tmp_path_factory.mktemp("slurm"))
    yield c
    c.stop()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, cluster):
    """The matmul for the emulated RVV board, built once (4 configs x 2 shapes)."""
    ws = _workspace(tmp_path_factory.mktemp("build"), cluster)
    ws.harness("build", "matmul", "--target", "rv", "--shapes", SHAPES, "--space", "space.yaml")
    return ws.path


def _workspace(path, cluster, slurm: str = None, bundle=None) -> Workspace:
    """A project whose target "rv" is the emulated RVV board: on the cluster when ``slurm``
    (the slurm section's YAML) is given, else on the login node over plain SSH; with the
    bundle built in the folder ``bundle``."""
    path.mkdir(parents=True, exist_ok=True)
    if bundle:
        shutil.copytree(bundle / "build", path / "build")
        shutil.copytree(bundle / ".harness", path / ".harness")
    ws = Workspace(path, cluster.login)
    text = ("rv:\n  arch: riscv64\n  march: rv64gcv\n  vlen: 256\n  toolchain: clang\n  profiler: perf\n"
            "  events: [task-clock]\n  run_under: %s\n  workdir: %s\n  ssh:\n%s"
            % (QEMU_RV, path / "shared", cluster.login.target_ssh_yaml()))
    if slurm:
        text += "  slurm:\n" + slurm
    (path / "targets.yaml").write_text(text)
    return ws


def _results(ws) -> pd.DataFrame:
    return pd.read_csv(ws.path / "results/rv/matmul/results.csv")


def _run_state(ws) -> dict:
    folder = ws.path / "shared/results/rv/matmul/slurm"
    return json.loads((folder / (folder / "current").read_text() / "run.json").read_text())


@pytest.mark.slow
@needs_slurm
def test_job_array_results_equal_a_plain_ssh_run(tmp_path, cluster, bundle):
    ws = _workspace(tmp_path / "cluster", cluster, "    tasks: 3\n    time: '5'\n    poll: 0.3\n", bundle)
    assert "files sent" in ws.harness("push", "rv").stdout
    ws.harness("run", "--remote", "rv", "--iters", "2", *ANSWERS_ONLY)
    state = _run_state(ws)
    assert state["arrays"][0]["chunks"] == [0, 1, 2] and len(state["arrays"]) == 1  # 3 tasks, none again
    ws.harness("report", "--target", "rv")
    on_slurm = _results(ws)
    # the tuned files' device facts come from the compute nodes (each task probed its own)
    probed = list((ws.path / "shared/results/rv/matmul/slurm").glob("*/chunk-*.csv.device.json"))
    facts = json.loads((ws.path / ".harness/state.json").read_text())["targets"]["rv"]["device_facts"]
    assert len(probed) == 3 and facts == json.loads(probed[0].read_text()) and facts["arch"]

    plain = _workspace(tmp_path / "plain", cluster, bundle=bundle)  # the same bundle over plain SSH
    plain.harness("push", "rv")
    plain.harness("run", "--remote", "rv", "--iters", "2", *ANSWERS_ONLY)
    plain.harness("report", "--target", "rv")
    over_ssh = _results(plain)

    manifest = json.loads((ws.path / "build/rv/matmul/manifest.json").read_text())
    assert len(manifest["jobs"]) >= 3
    jobs = {(j["variant"], j["shape"]) for j in manifest["jobs"]}
    for df in (on_slurm, over_ssh):
        assert len(df) == len(jobs) and set(df.status) == {"ok"}
        assert set(zip(df.variant_id, df.shape_id)) == jobs
    assert on_slurm.host.nunique() == 1  # the compute node


@pytest.mark.slow
@needs_slurm
def test_a_task_cancelled_mid_run_is_submitted_again_and_nothing_is_lost(tmp_path, cluster, bundle):
    ws = _workspace(tmp_path / "cancel", cluster, "    tasks: 3\n    poll: 0.3\n", bundle)
    ws.harness("push", "rv")
    # slow jobs (over a second each under qemu), one after another (--interleave 1: interleaved
    # jobs of a shape end together): a task is caught between its first and last row
    run = subprocess.Popen([sys.executable, "-m", "harness", "run", "--remote", "rv", "--iters", "100",
                            "--interleave", "1"],
                           cwd=ws.path, env=ws.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        victim = _wait_for_a_task_with_rows(ws, cluster)
        cluster.command("scancel", victim)
        out, err = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    assert "array task %s" % victim in err and "CANCELLED" in err and "again as array" in err
    state = _run_state(ws)
    assert len(state["arrays"]) == 2 and len(state["arrays"][1]["chunks"]) == 1
    status = ws.harness("status", "rv").stdout
    assert "3 of 3 chunks done" in status and status.count(": COMPLETED") == 3  # 2 first tasks, 1 again
    assert "%s (chunk" % victim in status and "CANCELLED" in status and "CANCELLED AT" in status  # its stderr

    ws.harness("report", "--target", "rv")
    df = _results(ws)
    manifest = json.loads((ws.path / "build/rv/matmul/manifest.json").read_text())
    assert len(df) == len(manifest["jobs"]) and set(df.status) == {"ok"}  # nothing lost
    assert df[["variant_id", "shape_id"]].apply(tuple, axis=1).is_unique  # nothing measured twice


@pytest.mark.slow
@needs_slurm
def test_tune_rounds_run_as_job_arrays(tmp_path, cluster, bundle):
    ws = _workspace(tmp_path / "tune", cluster, "    tasks: 2\n    poll: 0.3\n", bundle)
    ws.harness("tune", "matmul", "--target", "rv", "--shapes", SHAPES, "--space", "space.yaml", "--strategy",
               "random", "--budget", "2", "--batch-size", "2", "--top", "0", "--iters", "2", *ANSWERS_ONLY)
    df = _results(ws)
    assert len(df) == 4 and set(df.status) == {"ok"} and df.shape_id.nunique() == 2
    state = _run_state(ws)  # the round's configs, measured anew (--all), in an array of 2 tasks
    assert state["rerun_all"] and len(state["chunks"]) == 2 and state["arrays"][0]["chunks"] == [0, 1]


@pytest.mark.slow
@needs_slurm
def test_slurm_values_reach_sbatch_quoted_and_a_task_without_python_ends_the_run(tmp_path, cluster, bundle):
    ws = _workspace(tmp_path / "faults", cluster, "    tasks: 2\n    poll: 0.3\n", bundle)
    ws.harness("push", "rv")
    good = (ws.path / "targets.yaml").read_text()
    (ws.path / "targets.yaml").write_text(good + "    partition: 'x; touch %s'\n" % (tmp_path / "pwned"))
    proc = ws.harness("run", "--remote", "rv", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "sbatch on" in proc.stderr and "partition" in proc.stderr
    assert not (tmp_path / "pwned").exists()

    (ws.path / "targets.yaml").write_text(good + "  python: python3-not-on-the-nodes\n")
    proc = ws.harness("run", "--remote", "rv", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "agent exit 127" in proc.stderr and "python3-not-on-the-nodes" in proc.stderr  # the task's stderr
    assert len(_run_state(ws)["arrays"]) == 1  # not submitted again: it would fail the same way


@pytest.mark.parametrize("section, error", [
    ("    partiton: gpu\n", "rv.slurm: unknown key 'partiton' (did you mean 'partition'?)"),
    ("    time: 1h\n", "rv.slurm.time: '1h' is not a Slurm time limit"),
    ("    gres: gpu 1\n", "rv.slurm.gres: 'gpu 1' is not NAME[:TYPE]:COUNT"),
    ("    tasks: 0\n", "rv.slurm.tasks must be positive"),
    ("    options: [--array=0-3]\n", "rv.slurm.options: --array is set by the harness"),
    ("    options: [qos=high]\n", "rv.slurm.options: 'qos=high' is not an sbatch option"),
    ("    poll: soon\n", "rv.slurm: poll must be an integer or a number"),
])
def test_bad_slurm_section_names_file_and_line(tmp_path, section, error):
    from harness.errors import HarnessError
    from harness.targets import load_targets

    path = tmp_path / "targets.yaml"
    path.write_text("rv:\n  arch: riscv64\n  ssh: {host: login.example.org}\n  slurm:\n" + section)
    with pytest.raises(HarnessError) as info:
        load_targets(path)
    assert error in str(info.value) and "%s:5" % path in str(info.value)


def test_slurm_target_needs_a_login_node_and_takes_its_time_as_written(tmp_path):
    from harness.errors import HarnessError
    from harness.targets import load_targets

    path = tmp_path / "targets.yaml"
    path.write_text("rv:\n  arch: riscv64\n  slurm: {tasks: 2}\n")
    with pytest.raises(HarnessError, match="slurm needs an ssh section"):
        load_targets(path)
    path.write_text("rv:\n  ssh: {host: login}\n  slurm: {time: 1:30:00, gres: 'gpu:1', options: [--qos=high]}\n")
    slurm = load_targets(path)["rv"].slurm
    assert (slurm.time, slurm.gres, slurm.options, slurm.tasks) == ("1:30:00", "gpu:1", ["--qos=high"], 4)


def test_task_states_are_read_from_sacct_or_scontrol():
    from harness.transport.slurm_queue import parse_ended, parse_queued

    sacct = "12_0|COMPLETED|0:0\n12_1|CANCELLED by 0|0:15\n12_[2-3]|PENDING|0:0\n13_0|PREEMPTED|0:0\n99_0|FAILED|1:0\n"
    states = parse_ended(sacct, {"12", "13"})
    assert {k: (s.state, s.exit) for k, s in states.items()} == {
        ("12", 0): ("COMPLETED", "0:0"), ("12", 1): ("CANCELLED", "0:15"), ("13", 0): ("PREEMPTED", "0:0")}
    scontrol = ("JobId=15 ArrayJobId=12 ArrayTaskId=1 JobName=h JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15\n"
                "JobId=12 JobName=plain JobState=COMPLETED ExitCode=0:0\n")
    (only,) = parse_ended(scontrol, {"12"}).values()
    assert (only.name, only.state, only.reason) == ("12_1", "TIMEOUT", "TimeLimit")
    queued = parse_queued("12_2|RUNNING|None\n12_3|PENDING|JobArrayTaskLimit\n40_0|RUNNING|None\n", {"12"})
    assert sorted((s.name, s.state, s.reason) for s in queued.values()) == [
        ("12_2", "RUNNING", ""), ("12_3", "PENDING", "JobArrayTaskLimit")]


def test_readme_cluster_example_is_a_valid_target(tmp_path):
    from harness.targets import load_targets
    from tests.conftest import REPO

    text = (REPO / "README.md").read_text().split("## Clusters (Slurm)", 1)[1]
    (tmp_path / "targets.yaml").write_text(text.split("```yaml\n", 1)[1].split("```", 1)[0])
    target = load_targets(tmp_path / "targets.yaml")["h100-cluster"]
    assert target.slurm.gres == "gpu:1" and target.slurm.time == "00:30:00" and target.slurm.tasks == 8


def _wait_for_a_task_with_rows(ws, cluster, seconds=120) -> str:
    """The name (JOB_TASK) of a running array task whose chunk has a row but is not done."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = _run_state(ws)
        except (OSError, ValueError):
            time.sleep(0.1)
            continue
        folder = ws.path / "shared/results/rv/matmul/slurm" / state["id"]
        array = state["arrays"][0]
        for job_task, st in cluster.queued():
            job, _, task = job_task.partition("_")
            if st != "RUNNING" or job != array["job"] or not task.isdigit():
                continue
            chunk = array["chunks"][int(task)]
            results = folder / ("chunk-%d.csv" % chunk)
            rows = results.read_text().count("\n") - 1 if results.exists() else 0
            if 1 <= rows < len(state["chunks"][chunk]) - 1:
                return job_task
        time.sleep(0.05)
    raise AssertionError("no array task was caught mid-run")
