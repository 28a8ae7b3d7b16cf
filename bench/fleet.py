"""Fleet throughput: the same bundle run on two loopback sshd "hosts" against one, and the
time to notice a host that died and move its jobs.

    python3 bench/fleet.py [--shapes 160x160x160,192x192x128,...]

Both hosts are this machine (its cores are shared), each with its own sshd and workdir; the
jobs are native CPU matmuls, so two hosts can at best use the two cores of this machine.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._sshd import make_server  # noqa: E402

SPACE = "BLOCK_M: [8, 16, 32]\nBLOCK_N: [16, 32, 64]\nBLOCK_K: [16, 32]\nGROUP_M: [1]\n"


def harness(ws, *args, check=True):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "harness"] + list(args), cwd=ws, env=env,
                          capture_output=True, text=True)
    if check and proc.returncode:
        raise SystemExit("harness %s failed:\n%s" % (" ".join(args), proc.stderr))
    return proc


def targets_yaml(ws, a, b):
    known = ws / "known"
    known.write_text(a.known_hosts.read_text() + b.known_hosts.read_text())
    with open(b.dir / "authorized_keys", "a") as f:
        f.write(Path(str(a.client_key) + ".pub").read_text())
    common = ("  arch: native\n  profiler: wallclock\n  ssh:\n    host: 127.0.0.1\n    user: root\n"
              "    key: %s\n    known_hosts: %s\n" % (a.client_key, known))
    return ("one:\n%s  hosts:\n    - {host: 127.0.0.1, port: %d, workdir: %s}\n"
            "two:\n%s  hosts:\n    - {host: 127.0.0.1, port: %d, workdir: %s}\n"
            "    - {host: 127.0.0.1, port: %d, workdir: %s}\n"
            % (common, a.port, ws / "one-a", common, a.port, ws / "two-a", b.port, ws / "two-b"))


def timed_run(ws, target, iters):
    harness(ws, "build", "matmul", "--target", target, "--shapes", SHAPES, "--space", "space.yaml")
    harness(ws, "push", target)
    start = time.perf_counter()
    harness(ws, "run", "--remote", target, "--iters", str(iters))
    return time.perf_counter() - start


def notice_time(ws, b, iters):
    """Kill host b's sshd (and its agent) mid-run; seconds until the harness says it moved its jobs."""
    harness(ws, "run", "--remote", "two", "--iters", str(iters), "--all")  # warm files, same bundle
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "--remote", "two", "--iters", str(iters), "--all"],
                            cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = {}

    def read_err():
        for line in proc.stderr:
            seen.setdefault("lines", []).append(line)
            if "dropped out" in line and "at" not in seen:
                seen["at"] = time.perf_counter()

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    log = ws / "two-b/results/two/matmul/agent.log"
    while "@@progress" not in (log.read_text() if log.exists() else "") or log.read_text().count("@@progress") < 3:
        time.sleep(0.05)
    killed = time.perf_counter()
    b.kill_hard()
    pid = (ws / "two-b/results/two/matmul/agent.pid").read_text()
    os.kill(int(pid), 9)
    proc.wait()
    reader.join()
    if proc.returncode:
        print("".join(seen.get("lines", [])[-5:]))
    return seen.get("at", float("nan")) - killed, proc.returncode


SHAPES = "160x160x160,192x192x128,256x128x128,128x256x128,224x160x96"


def main():
    global SHAPES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--iters", type=int, default=100)
    args = parser.parse_args()
    SHAPES = args.shapes
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        a, b = make_server(tmp / "a"), make_server(tmp / "b")
        try:
            ws = tmp / "ws"
            ws.mkdir()
            (ws / "space.yaml").write_text(SPACE)
            (ws / "targets.yaml").write_text(targets_yaml(ws, a, b))
            one = timed_run(ws, "one", args.iters)
            two = timed_run(ws, "two", args.iters)
            jobs = harness(ws, "build", "matmul", "--target", "two", "--shapes", SHAPES,
                           "--space", "space.yaml").stdout
            notice, rc = notice_time(ws, b, args.iters)
        finally:
            a.stop()
            b.stop()
    print(jobs.strip())
    print("one host : %.2f s" % one)
    print("two hosts: %.2f s" % two)
    print("throughput ratio two/one: %.2f (goal >= 1.8; both hosts share this machine's %d cores)"
          % (one / two, os.cpu_count()))
    print("host killed -> its jobs moved: %.2f s (run exit code %d)" % (notice, rc))


if __name__ == "__main__":
    main()
