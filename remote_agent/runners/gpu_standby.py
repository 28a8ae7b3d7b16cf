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

torch's import is most of a standby's start: 4 to 7 s on a 64-core node whose cores compile at the
same time, while the first configs are built in 3 to 6 s. So where the standby imports torch, a
bridge starts beside it (``gpu_worker standby --bridge``: the driver alone). A round that comes
before the standby is loaded gets the bridge: a worker that checks answers against the bundle's
reference kernel (itself checked against the host at its start, as with ``--reference kernel``)
and imports torch only if a library job comes first. Once the standby says it is loaded, the
supervisor hands it the device between two of the bridge's jobs (``loaded``) and stops the bridge;
results measured before then say ``ref kernel``, after it ``ref torch``. Where the standby is
loaded before the first round, the bridge is stopped unused.

Standard library only.
"""

import importlib.util
import json
import os
import select
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
    """One standby worker process per chosen device, and where the standby imports torch, a
    bridge beside it (see the module docstring). They are started from the agent's main thread:
    a child started from a thread gets its parent-death signal when that thread ends."""

    def __init__(self, backend, chosen, log):
        self.backend = backend
        self.log = log
        self.ready = {}  # physical index -> _Standby; taken and closed from the same thread
        self.bridges = {}  # physical index -> _Standby started with --bridge
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
        bridged = bridges_help()
        for i in indices:
            if 0 <= i < len(physical):
                env = worker_env(self.backend, physical[i])
                self.ready[physical[i]] = _Standby(self.backend, env)
                if bridged:
                    self.bridges[physical[i]] = _Standby(self.backend, env, bridge=True)
        if self.ready:
            self.log("standby workers started for %s device(s) %s%s" % (
                self.backend, ",".join(sorted(self.ready, key=str)),
                " (and a bridge each, which measures until torch is loaded)" if self.bridges else ""))

    def take(self, argv, env):
        """The standby for the worker ``argv`` with environment ``env``, made that worker:
        (process, stderr), or None (the caller starts one). Its torch standby once that is loaded,
        else the device's bridge, else the torch standby all the same (its worker starts once
        torch is in)."""
        device = env.get(visible_variable(self.backend))
        standby = self.ready.get(device)
        if standby is not None and standby.loaded():
            self._discard_bridge(device)
            return self._become(self.ready.pop(device), device, argv, env)
        bridge = self.bridges.pop(device, None)
        if bridge is not None:
            taken = self._become(bridge, device, argv, env)
            if taken is not None:
                self.log("%s device %s: a worker without torch measures until its standby has loaded torch" % (
                    self.backend, device))
                return taken
        standby = self.ready.pop(device, None)
        return self._become(standby, device, argv, env) if standby is not None else None

    def loaded(self, argv, env):
        """Whether the torch standby of the worker ``argv`` with environment ``env`` is loaded
        and fit to become it: the supervisor then hands it the device of that worker's bridge
        between two jobs."""
        standby = self.ready.get(env.get(visible_variable(self.backend)))
        return standby is not None and standby.loaded() and standby.fit(argv, env) is None

    def _become(self, standby, device, argv, env):
        unfit = standby.fit(argv, env)
        if unfit:
            self.log("the standby worker for %s device %s %s: a fresh worker starts" % (self.backend, device, unfit))
            standby.discard()
            return None
        try:
            standby.proc.stdin.write((json.dumps({"argv": argv[4:]}) + "\n").encode())
            standby.proc.stdin.flush()
        except OSError:
            standby.discard()
            return None
        return standby.proc, standby.stderr

    def _discard_bridge(self, device):
        bridge = self.bridges.pop(device, None)
        if bridge is not None:
            bridge.discard()

    def close(self):
        """Stop the standbys no runner took."""
        left = list(self.ready.values()) + list(self.bridges.values())
        self.ready, self.bridges = {}, {}
        for standby in left:
            standby.discard()


class _Standby(object):
    """One standby process: started at once; ``loaded()`` once it said so on its stdout."""

    def __init__(self, backend, env, bridge=False):
        self.env = env
        self.command = COMMAND + ["standby", "--backend", backend] + (["--bridge"] if bridge else [])
        self.proc, self.stderr = start_process(self.command, env)
        self.said = b""

    def loaded(self):
        """Whether it has loaded what it loads (read without waiting)."""
        while b"\n" not in self.said and self.proc.poll() is None:
            readable, _, _ = select.select([self.proc.stdout], [], [], 0)
            if not readable:
                return False
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                return False
            self.said += chunk
        return b"\n" in self.said

    def fit(self, argv, env):
        """Why it cannot become the worker ``argv`` with environment ``env`` (None: it can)."""
        if self.proc.poll() is not None:
            return "had exited (status %s)" % self.proc.returncode
        if argv[:4] != COMMAND + ["worker"]:
            return "was started for another command"
        if self.env != env:
            return "was started with another environment"
        return None

    def discard(self):
        """Stop it (a process that ran nothing yet) and close its files."""
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.stderr):
            try:
                f.close()
            except OSError:
                pass


def bridges_help():
    """Whether a bridge is worth its process: the standby imports torch (the node has it) and
    the reference is left to ``auto`` (with ``torch`` asked for, a bridge would import it too)."""
    return os.environ.get("HARNESS_GPU_REFERENCE", "auto") == "auto" and importlib.util.find_spec("torch") is not None


def _init_driver(backend):
    try:
        api_for(backend).init()
    except Exception:  # the first round's runner says why
        pass
