"""Compile worker processes kept from one compile to the next (and from one tune round to the
next): importing Triton costs about a second, paid once per worker instead of once per config.

``run_job(module, payload, timeout, env)`` has the contract of ``common.run_python_child``: it
returns ``(returncode, facts, stderr)``, or None past ``timeout``. A worker is
``python -m harness.compile.workers MODULE``: it imports MODULE once and answers each JSON line
on its stdin with ``MODULE.compile_job(job)`` as one JSON line. A worker that runs past the
timeout is killed with its process group; one that dies returns its exit code and the tail of
its stderr; either way the next job gets a fresh worker. Each worker has its own Triton cache
folder, emptied after every job (the bundle's artifacts are the cache). Workers run at a lower
priority (``NICE``): on a GPU node that also measures, the GPU workers take the cores first.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
_idle: dict = {}  # (module, env) -> [Worker]
NICE = 10  # the workers' lower scheduling priority
_lock = threading.Lock()


class Worker:
    def __init__(self, module: str, env: dict):
        self.cache = tempfile.mkdtemp(prefix="harness-triton-")
        env = dict(env, TRITON_CACHE_DIR=self.cache)
        env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.compile.workers", module],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env,
                                     start_new_session=True)
        self.buf = b""

    def ask(self, payload: dict, timeout: float):
        """One job: (0, facts, "") | (returncode, None, stderr) when it died | None on timeout."""
        import time

        try:
            self.proc.stdin.write((json.dumps(payload) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._died()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return self._died()
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        for name in os.listdir(self.cache):
            shutil.rmtree(os.path.join(self.cache, name), ignore_errors=True)
        return 0, json.loads(line.decode()), ""

    def _died(self):
        rc = self.proc.wait()
        self.stderr.seek(0)
        err = self.stderr.read().decode(errors="replace")
        self.close()
        return rc, None, err

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.close()

    def close(self):
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self.cache, ignore_errors=True)


def _key(module: str, env: dict) -> tuple:
    """The idle workers' key: their module and environment (a job's own Triton cache aside)."""
    return module, tuple(sorted((k, v) for k, v in env.items() if k != "TRITON_CACHE_DIR"))


def prestart(module: str, env: dict, count: int) -> None:
    """Start ``count`` idle workers of ``module`` now: each imports it (Triton: a second or
    more) while the caller goes on, and the first compiles find them ready."""
    key = _key(module, env)
    started = [Worker(module, dict(key[1])) for _ in range(max(0, count))]
    with _lock:
        _idle.setdefault(key, []).extend(started)


def run_job(module: str, payload: dict, timeout: float, env: dict):
    """``payload`` compiled by a kept worker of ``module`` (one is started when none is idle)."""
    key = _key(module, env)
    env = dict(key[1])
    with _lock:
        idle = _idle.setdefault(key, [])
        worker = idle.pop() if idle else None
    if worker is None:
        worker = Worker(module, env)
    done = worker.ask(payload, timeout)
    if done is not None and done[1] is not None:
        with _lock:
            _idle[key].append(worker)
    return done


@atexit.register
def close_all() -> None:
    with _lock:
        workers = [w for ws in _idle.values() for w in ws]
        _idle.clear()
    for w in workers:
        w.close()


def serve(module_name: str) -> int:
    """The worker: the protocol on a private copy of stdout (a compiler that prints cannot
    corrupt it), one reply line per job line."""
    import importlib

    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    try:
        os.nice(NICE)  # where the agent measures on this machine too, its GPU workers come first
    except OSError:
        pass
    handle = importlib.import_module(module_name).compile_job
    for line in sys.stdin:
        if line.strip():
            out.write(json.dumps(handle(json.loads(line))) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
