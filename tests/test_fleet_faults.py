"""Fleets of hosts and the faults real labs cause, each caused for real: a host that dies, an
sshd killed mid-run, a corrupted artifact, perf missing, a full disk, two runs at once, and
target fields that try to inject shell commands."""

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ANSWERS_ONLY, REPO
from tests.sshd import make_server

NATIVE = "  arch: native\n  profiler: wallclock\n"


def _add_box(ws, workdir=None):
    """A native-arch target "box" reached over the loopback sshd, with its own workdir."""
    (ws.path / "targets.yaml").write_text(ws.targets_yaml() + "box:\n" + NATIVE + "  workdir: %s\n  ssh:\n%s"
                                          % (workdir or ws.path / "box", ws.sshd.target_ssh_yaml()))


def _wait_for(predicate, seconds=60, what="condition"):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for %s" % what)


def _progress_lines(log: Path) -> int:
    try:
        return sum(1 for line in log.read_text().splitlines() if line.startswith("@@progress") and '"status": "' in line)
    except OSError:
        return 0


@pytest.fixture
def second_sshd(tmp_path):
    server = make_server(tmp_path / "sshd2")
    yield server
    server.stop()


def _fleet_yaml(ws, a, b):
    # both "hosts" are this machine: each gets its own workdir
    with open(b.dir / "authorized_keys", "a") as f:  # one key for the whole fleet
        f.write(Path(str(a.client_key) + ".pub").read_text())
    known = ws.path / "known_hosts_all"
    known.write_text(a.known_hosts.read_text() + b.known_hosts.read_text())
    return ("fleet:\n" + NATIVE + "  ssh:\n    host: 127.0.0.1\n    user: root\n    key: %s\n    known_hosts: %s\n"
            "  hosts:\n    - {host: 127.0.0.1, port: %d, workdir: %s}\n    - {host: 127.0.0.1, port: %d, workdir: %s}\n"
            % (a.client_key, known, a.port, ws.path / "host-a", b.port, ws.path / "host-b"))


@pytest.mark.slow
def test_fleet_spreads_jobs_and_moves_a_dead_hosts_jobs(workspace, second_sshd):
    ws, a, b = workspace, workspace.sshd, second_sshd
    with open(ws.path / "targets.yaml", "a") as f:
        f.write(_fleet_yaml(ws, a, b))
    ws.harness("build", "faulty_matmul", "--target", "fleet", "--shapes", "32x32x32,48x32x32,64x32x32")
    pushed = ws.harness("push", "fleet").stdout
    assert pushed.count("files sent") == 2  # both hosts got the bundle
    manifest = json.loads((ws.path / "build/fleet/faulty_matmul/manifest.json").read_text())
    total = len(manifest["jobs"])
    run = subprocess.Popen([sys.executable, "-m", "harness", "run", "--remote", "fleet", "--timeout", "1",
                            "--iters", "2"], cwd=ws.path, env=ws.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    log_b = ws.path / "host-b/results/fleet/faulty_matmul/agent.log"
    _wait_for(lambda: _progress_lines(log_b) >= 1, what="host b to measure something")
    killed_at = time.monotonic()
    b.kill_hard()  # host b dies: its sshd, its sessions and its agent
    pid_file = ws.path / "host-b/results/fleet/faulty_matmul/agent.pid"
    os.kill(int(pid_file.read_text()), 9)
    out, err = run.communicate(timeout=300)
    finished_at = time.monotonic()
    assert run.returncode == 0, err
    assert "dropped out" in err and "jobs moved" in out
    report = ws.harness("report", "--target", "fleet")  # host b is down: a warning, not the end
    assert "cannot reach" in report.stderr
    df = pd.read_csv(ws.path / "results/fleet/faulty_matmul/results.csv")
    ran = df[df.status != "pruned"]
    assert len(ran) == total and ran[["variant_id", "shape_id"]].apply(tuple, axis=1).is_unique
    assert set(ran.status) == {"ok", "timeout", "crash", "wrong_answer"}
    assert finished_at - killed_at < 60


@pytest.mark.slow
def test_sshd_killed_mid_run_the_run_finishes_and_is_picked_up(workspace):
    ws, server = workspace, workspace.sshd
    _add_box(ws)
    ws.harness("build", "faulty_matmul", "--target", "box", "--shapes", "32x32x32,64x32x32")
    ws.harness("push", "box")
    run = subprocess.Popen([sys.executable, "-m", "harness", "run", "--remote", "box", "--timeout", "1"],
                           cwd=ws.path, env=ws.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results_dir = ws.path / "box/results/box/faulty_matmul"
    _wait_for(lambda: _progress_lines(results_dir / "agent.log") >= 1, what="the first row")
    server.kill_hard()
    out, err = run.communicate(timeout=60)
    assert run.returncode == 2 and "lost the connection" in err and "Traceback" not in err
    _wait_for(lambda: (results_dir / "agent.exit").exists(), seconds=120, what="the detached agent to finish")
    assert (results_dir / "agent.exit").read_text() == "0"
    server.start()  # the board is back
    status = ws.harness("status", "box").stdout
    assert "finished (exit 0)" in status
    ws.harness("report", "--target", "box")
    df = pd.read_csv(ws.path / "results/box/faulty_matmul/results.csv")
    manifest = json.loads((ws.path / "build/box/faulty_matmul/manifest.json").read_text())
    assert len(df[df.status != "pruned"]) == len(manifest["jobs"])


@pytest.mark.slow
def test_second_run_attaches_instead_of_starting_another(workspace):
    ws = workspace
    _add_box(ws)
    ws.harness("build", "faulty_matmul", "--target", "box", "--shapes", "32x32x32")
    ws.harness("push", "box")
    cmd = [sys.executable, "-m", "harness", "run", "--remote", "box", "--timeout", "2"]
    first = subprocess.Popen(cmd, cwd=ws.path, env=ws.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results_dir = ws.path / "box/results/box/faulty_matmul"
    log, pid_file = results_dir / "agent.log", results_dir / "agent.pid"
    _wait_for(lambda: pid_file.exists() and log.exists() and log.stat().st_size > 0, what="the first run to start")
    # The agent's few seconds of work could end before a second harness has even started (2 busy
    # cores): the test holds the agent, its whole process group, stopped until the second run has
    # attached. The kernels run in sessions of their own, so their timing and deadlines are untouched.
    pid = int(pid_file.read_text())
    group = os.getpgid(pid)
    os.killpg(group, signal.SIGSTOP)
    try:
        second = subprocess.Popen(cmd, cwd=ws.path, env=ws.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
        attached = "attaching to the run in progress (pid %d)" % pid
        lines = []

        def read_stderr():
            for line in second.stderr:
                lines.append(line)

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        _wait_for(lambda: any(attached in line for line in lines) or second.poll() is not None,
                  what="the second run to attach")
    finally:
        os.killpg(group, signal.SIGCONT)
    second.wait(timeout=120)
    reader.join(timeout=10)
    first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0
    assert any(attached in line for line in lines), "".join(lines)
    df = pd.read_csv(results_dir / "results.csv")
    ran = df[df.status != "pruned"]
    manifest = json.loads((ws.path / "build/box/faulty_matmul/manifest.json").read_text())
    assert len(ran) == len(manifest["jobs"])
    assert df[["variant_id", "shape_id"]].apply(tuple, axis=1).is_unique  # measured once
    assert set(ran.status) == {"ok", "timeout", "crash", "wrong_answer"}


@pytest.mark.slow
def test_corrupted_artifact_is_caught_by_its_hash(workspace):
    ws = workspace
    _add_box(ws)
    ws.harness("build", "matmul", "--target", "box", "--shapes", "32x32x32", "--space", "space.yaml")
    ws.harness("push", "box")
    artifact = sorted((ws.path / "box/bundles/box/matmul/artifacts").glob("*.elf"))[0]
    data = bytearray(artifact.read_bytes())
    data[-100] ^= 0xFF
    artifact.write_bytes(bytes(data))
    ws.harness("run", "--remote", "box", "--iters", "2", *ANSWERS_ONLY)
    df = pd.read_csv(ws.path / "box/results/box/matmul/results.csv")
    bad = df[df.status == "load_error"]
    assert len(bad) == 1 and "does not match its hash" in bad.message.iloc[0]
    assert (df.status == "ok").sum() == len(df) - 1


@pytest.mark.slow
def test_perf_missing_falls_back_to_wall_clock_and_says_so(local_workspace, tmp_path):
    ws = local_workspace
    ws.harness("build", "matmul", "--target", "local", "--shapes", "32x32x32", "--space", "space.yaml")
    bare = tmp_path / "bin"  # a PATH with python but no perf
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    proc = subprocess.run([str(bare / "python3"), "-m", "remote_agent", "run", "--bundle",
                           str(ws.path / "build/local/matmul"), "--results", str(tmp_path / "r.csv")],
                          cwd=REPO, env={"PATH": str(bare)}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "perf not found; falling back to wall clock" in proc.stderr
    df = pd.read_csv(tmp_path / "r.csv")
    assert set(df.profiler) == {"wallclock"} and set(df.status) == {"ok"}
    assert df["ctr_task_clock"].isna().all()  # empty, never 0


@pytest.mark.slow
def test_full_disk_gives_a_clear_error_and_only_whole_rows(local_workspace, tmp_path):
    ws = local_workspace
    # 4 packed configs x 16 shapes: more rows than the tmpfs holds, from 4 compiles (a shape adds
    # rows and no compile); each row sampled briefly (--max-time), as its time is not checked here
    ws.harness("build", "matmul", "--target", "local", "--shapes",
               "32x32x32,64x64x64,96x64x32,32x64x32,64x32x32,32x32x64,48x48x48,64x64x32,96x32x32,32x96x32,"
               "32x32x96,96x96x32,48x32x32,32x48x32,32x32x48,80x64x32", "--space", "space.yaml")
    disk = tmp_path / "tiny"
    disk.mkdir()
    # room for the agent to start (16 KiB: remote_agent/bundlecheck.py), not for every row
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        if os.environ.get("CI"):
            raise AssertionError("cannot mount a tmpfs: %s" % mounted.stderr)
        pytest.skip("cannot mount a tmpfs here")
    try:
        proc = subprocess.run([sys.executable, "-m", "remote_agent", "run", "--bundle",
                               str(ws.path / "build/local/matmul"), "--results", str(disk / "results.csv"),
                               "--iters", "2", "--max-time", "0.02"], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 2
        error = proc.stderr.strip().splitlines()[-1]
        assert "No space left on device" in error and "rows before it are kept" in error
        with open(disk / "results.csv", newline="") as f:
            rows = list(csv.reader(f))
        assert len(rows) > 2 and all(len(r) == len(rows[0]) for r in rows)
        assert (disk / "results.csv").read_bytes().endswith(b"\n")
    finally:
        subprocess.run(["umount", str(disk)])


@pytest.mark.slow
def test_hostile_target_fields_execute_nothing(workspace, tmp_path):
    ws = workspace
    canary = tmp_path / "INJECTED"
    evil_dir = ws.path / ("box dir;$(touch %s)'q\"`touch %s`" % (canary, canary))
    _add_box(ws, "'%s'" % str(evil_dir).replace("'", "''"))
    ws.harness("build", "matmul", "--target", "box", "--shapes", "32x32x32", "--space", "space.yaml")
    ws.harness("push", "box")
    ws.harness("run", "--remote", "box", "--iters", "2", *ANSWERS_ONLY)
    ws.harness("report", "--target", "box")
    assert (evil_dir / "results/box/matmul/results.csv").exists()  # the odd folder was used as is
    assert not canary.exists() and not Path("INJECTED").exists()
    df = pd.read_csv(ws.path / "results/box/matmul/results.csv")
    assert set(df.status) == {"ok"}
    assert str(ws.sshd.client_key) not in (evil_dir / "results/box/matmul/agent.log").read_text()


@pytest.mark.slow
def test_run_under_is_split_not_shelled(local_workspace, tmp_path):
    ws = local_workspace
    canary = tmp_path / "RUN_UNDER_INJECTED"
    (ws.path / "targets.yaml").write_text("odd:\n" + NATIVE + "  run_under: env X=1;touch %s $(touch %s)\n"
                                          % (canary, canary))
    ws.harness("build", "matmul", "--target", "odd", "--shapes", "32x32x32", "--space", "space.yaml")
    ws.harness("run", "--iters", "2", *ANSWERS_ONLY)
    assert not canary.exists()
