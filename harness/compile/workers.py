"""Compile worker processes kept from one compile to the next (and from one tune round to the
next): importing Triton costs a second or more, paid once per worker instead of once per config,
and with a zygote once per worker key instead of once per worker.

``run_job(module, payload, timeout, env)`` has the contract of ``common.run_python_child``: it
returns ``(returncode, facts, stderr)``, or None past ``timeout``. A worker imports MODULE once
and answers each JSON line on its stdin with ``MODULE.compile_job(job)`` as one JSON line. A
worker that runs past the timeout is killed with its process group; one that dies returns its
exit code and the tail of its stderr; either way the next job gets a fresh worker. Each worker
has its own Triton cache folder, emptied after every job (the bundle's artifacts are the cache).
Workers run at a lower priority (``worker_loop.NICE``): on a GPU node that also measures, the
GPU workers take the cores first.

Each worker key (module and environment, ``_key``) has a zygote (harness/compile/zygote.py): a
process that imported the module once and forks the key's workers, so a new worker costs a
fork, not a Triton import (2 to 3 s on a busy 64-core node, where a tune starts up to 64 workers
at once). Where it has none (it could not start, ``HARNESS_COMPILE_ZYGOTE=0``), a worker is its
own process (``python -m harness.compile.worker_loop MODULE``), importing the module itself.
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
import time

from .zygote import ZYGOTE_IMPORT_TIMEOUT, close_zygotes, with_root, zygote_for

_idle: dict = {}  # (module, env) -> [Worker]
_lock = threading.Lock()
_prestarting: list = []  # the threads that fork prestart's workers


class Worker:
    """One kept worker: forked by its key's zygote, or (the fallback) started with ``Popen``."""

    def __init__(self, module: str, env: dict):
        self.cache = tempfile.mkdtemp(prefix="harness-triton-")
        self.stderr = tempfile.TemporaryFile()
        self.proc = _forked_worker(module, env, self.cache, self.stderr)
        if self.proc is None:
            self.proc = _popen_worker(module, env, self.cache, self.stderr)
        self.buf = b""

    def ask(self, payload: dict, timeout: float):
        """One job: (0, facts, "") | (returncode, None, stderr) when it died | None on timeout."""
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


def _popen_worker(module: str, env: dict, cache: str, stderr) -> subprocess.Popen:
    """A worker started as its own process: it imports ``module`` itself."""
    return subprocess.Popen([sys.executable, "-m", "harness.compile.worker_loop", module],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            env=with_root(dict(env, TRITON_CACHE_DIR=cache)), start_new_session=True)


def _forked_worker(module: str, env: dict, cache: str, stderr):
    """A worker forked by the key's zygote (``ForkedProcess``), or None where there is none. A
    zygote found dead by this fork (it died since it last answered) is started again, once."""
    for _ in range(2):
        zygote = zygote_for(_key(module, env))
        if zygote is None:
            return None
        proc = zygote.fork(cache, stderr)
        if proc is not None or zygote.alive():
            return proc
    return None


# ---- the public functions ----------------------------------------------------------------------
def _key(module: str, env: dict) -> tuple:
    """The idle workers' key: their module and environment (a job's own Triton cache aside)."""
    return module, tuple(sorted((k, v) for k, v in env.items() if k != "TRITON_CACHE_DIR"))


def prestart(module: str, env: dict, count: int, forked: int = 0) -> None:
    """Start idle workers of ``module`` now, while the caller goes on, so that the first compiles
    find them ready. With a zygote: the zygote now (it imports ``module``) and a thread that asks
    it for ``forked`` workers (else ``count``; each fork waits for the import); without:
    ``count`` workers, each importing ``module`` (Triton: a second or more)."""
    key = _key(module, env)
    env = dict(key[1])
    if zygote_for(key) is None:
        _add_idle(key, [Worker(module, env) for _ in range(max(0, count))])
        return
    thread = threading.Thread(target=_prestart_forked, args=(key, module, env, forked or count), daemon=True,
                              name="harness-prestart-workers")
    with _lock:
        _prestarting.append(thread)
    thread.start()


def _prestart_forked(key: tuple, module: str, env: dict, count: int) -> None:
    for _ in range(max(0, count)):
        _add_idle(key, [Worker(module, env)])


def _add_idle(key: tuple, workers: list) -> None:
    with _lock:
        _idle.setdefault(key, []).extend(workers)


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
        _add_idle(key, [worker])
    return done


@atexit.register
def close_all() -> None:
    """Stop every idle worker, then every zygote (after the workers: it gives their exit status)."""
    with _lock:
        threads = list(_prestarting)
        _prestarting.clear()
    for thread in threads:
        thread.join(ZYGOTE_IMPORT_TIMEOUT)
    with _lock:
        workers = [w for ws in _idle.values() for w in ws]
        _idle.clear()
    for w in workers:
        w.close()
    close_zygotes()
