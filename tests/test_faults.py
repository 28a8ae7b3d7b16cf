"""Variants that really crash, hang or answer wrong; an agent killed mid-run resumes."""

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from tests.conftest import ANSWERS_ONLY, REPO

SHAPES = "32x32x32,64x48x32"


@pytest.mark.slow
def test_crash_hang_wrong_are_statuses_and_the_rest_is_measured(local_workspace):
    ws = local_workspace
    ws.harness("build", "faulty_matmul", "--target", "local", "--shapes", SHAPES)
    ws.harness("run", "--timeout", "1", "--iters", "3", *ANSWERS_ONLY)  # the hanging jobs wait out the timeout
    df = pd.read_csv(ws.path / "results/local/faulty_matmul/results.csv")
    by_fault = df.groupby("cfg_FAULT")["status"].agg(set).to_dict()
    assert by_fault == {"none": {"ok"}, "crash": {"crash"}, "hang": {"timeout"}, "wrong": {"wrong_answer"}}
    assert df[df.cfg_FAULT == "crash"].message.str.contains("SIGSEGV|Segmentation", regex=True).all()
    # every variant on every shape has its row: the faults did not end the run
    assert len(df) == 2 * 4 * 2  # (MR 1, 2) x 4 faults x 2 shapes
    assert df[df.status == "ok"].shape[0] == 4  # MR 1 and 2, two shapes
    report = ws.harness("report").stdout
    assert "crash 4" in report and "timeout 4" in report and "wrong_answer 4" in report


def _agent(bundle, results, *extra):
    return [sys.executable, "-u", "-m", "remote_agent", "run", "--bundle", str(bundle), "--results", str(results),
            "--iters", "3"] + list(extra)


@pytest.mark.slow
def test_agent_killed_mid_run_resumes_without_redoing_or_losing_rows(local_workspace):
    ws = local_workspace
    # the workspace's small space (4 configs, 12 jobs): the full packed space is some 200 compiles here
    ws.harness("build", "matmul", "--target", "local", "--shapes", "32x32x32,64x64x64,96x64x32", "--space",
               "space.yaml")
    bundle = ws.path / "build/local/matmul"
    results = ws.path / "results.csv"
    quick = ("--max-time", "0.05")  # this test is about resuming, not timing: short jobs
    proc = subprocess.Popen(_agent(bundle, results, *quick), cwd=REPO, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen = 0
    for line in proc.stdout:
        if line.startswith("@@progress") and '"status": "ok"' in line:
            seen += 1
            if seen == 5:
                os.killpg(proc.pid, signal.SIGKILL)
                break
    proc.wait()
    first = pd.read_csv(results)
    assert 5 <= (first.status == "ok").sum()
    total = len(pd.read_json(bundle / "manifest.json", typ="series")["jobs"])
    assert (first.status == "ok").sum() < total  # it really was interrupted
    # a torn half row at the end (killed mid-write) must not survive either
    with open(results, "a") as f:
        f.write("1,local,matmul,vhalf")
    rerun = subprocess.run(_agent(bundle, results, *quick), cwd=REPO, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    final = pd.read_csv(results)
    keys = final[["variant_id", "shape_id", "device"]].apply(tuple, axis=1)
    assert keys.is_unique  # nothing redone
    assert (final.status == "ok").sum() == total  # nothing lost
    kept = final.set_index(["variant_id", "shape_id"]).loc[
        first[first.status == "ok"].set_index(["variant_id", "shape_id"]).index]
    assert list(kept.timestamp) == list(first[first.status == "ok"].timestamp)  # first run's rows kept as they were
    progress = [l for l in rerun.stdout.splitlines() if l.startswith("@@progress")]
    assert '"total": %d' % (total - (first.status == "ok").sum()) in progress[0]


def _processes_running(path_part):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open("/proc/%s/cmdline" % pid, "rb").read().decode(errors="replace")
        except OSError:
            continue
        if path_part in cmdline and "remote_agent" not in cmdline and "pytest\x00" not in cmdline:
            found.append(pid)
    return found


@pytest.mark.slow
def test_two_runs_at_once_the_second_refuses_and_a_killed_agent_leaves_nothing_running(local_workspace):
    ws = local_workspace
    ws.harness("build", "faulty_matmul", "--target", "local", "--shapes", "32x32x32")
    bundle = ws.path / "build/local/faulty_matmul"
    results = ws.path / "r.csv"
    first = subprocess.Popen(_agent(bundle, results, "--timeout", "30"), cwd=REPO, stdout=subprocess.PIPE, text=True)
    for line in first.stdout:  # it holds the lock once it prints its first progress line
        if line.startswith("@@progress"):
            break
    second = subprocess.run(_agent(bundle, results), cwd=REPO, capture_output=True, text=True)
    assert second.returncode == 2
    assert "another run is already writing" in second.stderr
    deadline = time.monotonic() + 20
    while not _processes_running(str(bundle / "artifacts")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_running(str(bundle / "artifacts")), "expected variants (the hanging one among them) to be running"
    first.kill()  # SIGKILL: the agent cannot clean up; the variant must die with it
    first.wait()
    deadline = time.monotonic() + 5
    while _processes_running(str(bundle / "artifacts")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _processes_running(str(bundle / "artifacts"))


def test_a_failed_compile_is_recorded_for_the_pairs_that_wanted_it():
    """GPU variants are specialized per shape class: a variant that failed for one shape's
    specialization is that shape's row, not a row for every shape of the dtype. Bundles written
    before ``failed`` existed still get every shape of the dtype."""
    from types import SimpleNamespace

    from remote_agent.agent import Agent

    variants = {"ok": {"id": "ok", "status": "ok", "dtype": "fp16"},
                "bad16": {"id": "bad16", "status": "compile_error", "dtype": "fp16"},
                "lib": {"id": "lib", "status": "compile_timeout", "dtype": "fp16"}}
    shapes = {s: {"id": s, "dtype": "fp16"} for s in ("div16", "odd")}
    jobs = [{"variant": "ok", "shape": "odd"}]
    manifest = {"jobs": jobs, "failed": [{"variant": "bad16", "shape": "div16"}]}
    pairs = Agent._failed_pairs(SimpleNamespace(manifest=manifest), variants, shapes)
    assert pairs == [("bad16", "div16"), ("lib", "div16"), ("lib", "odd")]  # the library's build: every shape
    older = {"jobs": jobs}
    pairs = Agent._failed_pairs(SimpleNamespace(manifest=older), variants, shapes)
    assert sorted(pairs) == [("bad16", "div16"), ("bad16", "odd"), ("lib", "div16"), ("lib", "odd")]
