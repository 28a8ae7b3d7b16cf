"""GPU workers started before their first round (``serve --standby BACKEND[:INDICES]``).

A GPU worker's start is seconds: a Python process, the driver's init, torch's import (the
reference). The host knows the target's backend and devices when a tune starts, long before its
first round is built, so the serving agent starts one standby process per device at once
(``gpu_worker standby``): it loads all that, then waits. When the round's runner starts a worker
for a device, it takes that device's standby if it was started with the very environment the
worker would get; the standby reads the worker's arguments and becomes it. Any other case (no
standby there, a different environment or command, a standby that died) starts a fresh worker as
before. The agent's own driver init is done here too (in a thread where the devices are named),
so its first round lists its devices at once.

Standard library only.
"""

import json
import sys
import threading

from ..supervisor import start_process
from .gpu import physical_indices, visible_variable, worker_env
from .gpu_backends import api_for

COMMAND = [sys.executable, "-m", "remote_agent.runners.gpu_worker"]  # + "worker" or "standby"


def parse_spec(text):
    """``cuda`` or ``cuda:0,1`` -> (backend, [indices] or None for every device)."""
    backend, _, indices = str(text).partition(":")
    if backend not in ("cuda", "hip"):
        raise ValueError("--standby takes cuda or hip, optionally :INDICES (got %r)" % text)
    try:
        chosen = [int(x) for x in indices.split(",") if x.strip()] if indices else None
    except ValueError:
        raise ValueError("--standby %s: device indices are integers such as 0,1" % text)
    return backend, chosen


class Standbys(object):
    """One standby worker process per chosen device. They are started from the agent's main
    thread: a child started from a thread gets its parent-death signal when that thread ends."""

    def __init__(self, backend, chosen, log):
        self.backend = backend
        self.log = log
        self.ready = {}  # physical index -> (process, stderr, env); taken and closed from the same thread
        if chosen is None:  # every device the driver counts (the agent's driver init done here)
            try:
                api = api_for(backend)
                api.init()
                chosen = list(range(api.device_count()))
            except Exception as exc:  # the first round's runner says why
                chosen = []
                log("no standby workers: %s" % exc)
        else:  # the agent's own driver init (a second or more with several GPUs) meanwhile
            threading.Thread(target=_init_driver, args=(backend,), daemon=True, name="driver-init").start()
        self._spawn(chosen)

    def _spawn(self, indices):
        physical = physical_indices(self.backend, max(indices) + 1 if indices else 0)
        for i in indices:
            if 0 <= i < len(physical):
                env = worker_env(self.backend, physical[i])
                proc, stderr = start_process(COMMAND + ["standby", "--backend", self.backend], env)
                self.ready[physical[i]] = (proc, stderr, env)
        if self.ready:
            self.log("standby workers started for %s device(s) %s" % (
                self.backend, ",".join(sorted(self.ready, key=str))))

    def take(self, argv, env):
        """The standby for the worker ``argv`` with environment ``env``, made that worker:
        (process, stderr), or None (the caller starts one)."""
        device = env.get(visible_variable(self.backend))
        entry = self.ready.pop(device, None)
        if entry is None:
            return None
        proc, stderr, started_env = entry
        unfit = ("had exited (status %s)" % proc.returncode if proc.poll() is not None
                 else "was started for another command" if argv[:4] != COMMAND + ["worker"]
                 else "was started with another environment" if started_env != env else None)
        if unfit:
            self.log("the standby worker for %s device %s %s: a fresh worker starts" % (self.backend, device, unfit))
            _discard(proc, stderr)
            return None
        try:
            proc.stdin.write((json.dumps({"argv": argv[4:]}) + "\n").encode())
            proc.stdin.flush()
        except OSError:
            _discard(proc, stderr)
            return None
        return proc, stderr

    def close(self):
        """Stop the standbys no runner took."""
        left, self.ready = list(self.ready.values()), {}
        for proc, stderr, _ in left:
            _discard(proc, stderr)


def _init_driver(backend):
    try:
        api_for(backend).init()
    except Exception:  # the first round's runner says why
        pass


def _discard(proc, stderr):
    """Stop a standby (a process that ran nothing yet) and close its files."""
    try:
        proc.kill()
    except OSError:
        pass
    proc.wait()
    for f in (proc.stdin, proc.stdout, stderr):
        try:
            f.close()
        except OSError:
            pass
