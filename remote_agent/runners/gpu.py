"""GPU runner: cubin/hsaco variants launched through the driver library, one worker per GPU.

The agent process (``GpuRunner``) never touches a GPU context: it hands jobs to one worker
process per device (gpu_worker.py) through ``remote_agent.supervisor`` and yields their results.
A worker that crashes or hangs is replaced by the supervisor; the job in flight is recorded
``crash`` or ``timeout``. With several devices, each job runs once, on whichever worker is free;
its row names that device. Library jobs (``lib:<name>``, gpu_library.py) are spread the same
way. The agent names no kernel: what depends on one comes from the bundle's device plug-in.

The rest of the GPU runner, one module per concept:
  gpu_api.py       the driver API interface and GpuError (cuda.py, hip.py implement it)
  gpu_backends.py  api_for: the driver API of each backend
  gpu_worker.py    the per-device worker process (Worker, the protocol loop, ncu/rocprof child)
  gpu_memory.py    device buffers of a shape (ShapeData), poison, torch views
  gpu_launch.py    a loaded function and its packed arguments (Kernel, Params)
  gpu_timing.py    L2 flush, check around the measurement (the sample loop: profilers/events.py)
  gpu_reference.py the fp32 reference (torch or the bundle's kernel) and its self-check
  gpu_plugin.py    the kernel's device plug-in from the bundle (reference, library launchers)
  gpu_library.py   library jobs (library_plan) and timing the library
  gpu_artifact.py  ELF facts of a cubin / hsaco
"""

import json
import os
import sys

from .. import contract, measure
from ..errors import AgentError
from .gpu_api import GpuError
from .gpu_backends import api_for
from .gpu_library import library_plan


class GpuRunner(object):
    """Spreads a bundle's jobs over one worker process per device (see the module docstring)."""

    def __init__(self, bundle, manifest, options, log, devices, worker_command=None, worker_env=None):
        from ..profilers.events import gpu_profiler_class

        self.bundle = os.path.abspath(bundle)
        self.manifest = manifest
        self.options = options
        self.log = log
        self._devices = devices  # [(name, physical index)]
        name = _opt(options, "profiler", None) or manifest["target"].get("profiler") or "events"
        self.profiler = gpu_profiler_class(name)
        self.counter_names = list(self.profiler.counter_names)
        self.worker_command = worker_command or self._worker_command
        self.worker_env = worker_env or self._worker_env
        self.worker_facts = {}
        self.keep_workers = False  # remote_agent.serve: the workers outlive run_all, for the next round
        self.standbys = None  # remote_agent.serve: workers started before the first round (gpu_standby)
        self._supervisor = None

    def devices(self):
        return [name for name, _ in self._devices]

    def library_plan(self, selected=None):
        return library_plan(self.manifest, selected)

    def worker_options(self):
        estimator = _opt(self.options, "estimator", None) or measure.default_estimator(self.manifest["target"]["backend"])
        return {"profiler": self.profiler.name, "warmup": _opt(self.options, "warmup", 2),
                "iters": _opt(self.options, "iters", 10), "min_time_ms": _opt(self.options, "min_time_ms", 100.0),
                "max_noise": _opt(self.options, "max_noise", 0.01), "estimator": estimator,
                "max_time": _opt(self.options, "max_time", measure.default_max_time(estimator)),
                "timeout": _opt(self.options, "timeout", 60.0),
                "reference": os.environ.get("HARNESS_GPU_REFERENCE", "auto")}

    def _worker_command(self, device_name):
        return [sys.executable, "-m", "remote_agent.runners.gpu_worker", "worker", "--bundle", self.bundle,
                "--device-index", "0", "--options", json.dumps(self.worker_options())]

    def _worker_env(self, device_name):
        return worker_env(self.manifest["target"]["backend"], dict(self._devices)[device_name])

    def requests_for(self, todo, variants, shapes, broken):
        """(requests [(job, request)] for the workers in measuring order, [(job, device, result)]
        of the jobs that cannot run: a broken artifact is a load error)."""
        groups = {}
        for job, device in todo:
            groups.setdefault((job["variant"], job["shape"]), []).append((job, device))
        devices = self.devices()
        timing = self.worker_options()  # per job too: kept workers take each round's options
        requests, unrunnable = [], []
        for (vid, sid), pairs in groups.items():
            variant = variants[vid]
            if variant.get("status") != contract.OK:
                continue  # the agent recorded its compile status already
            if len(pairs) < len(devices):
                continue  # ran on another device in an earlier (resumed) run
            job = pairs[0][0]
            if vid in broken:
                unrunnable.append((job, pairs[0][1], {"status": contract.LOAD_ERROR, "message": broken[vid]}))
                continue
            requests.append((job, {"variant": _slim_variant(variant), "shape": shapes[sid], "grid": job["grid"],
                                   "options": timing}))
        # one shape after another, so each worker generates a shape's data once
        requests.sort(key=measuring_order(self.manifest.get("order")))
        return requests, unrunnable

    def run_all(self, todo, variants, shapes, broken, options, more=None):
        """Yields (job, device, result) of ``todo`` as they finish. ``more()``: further requests
        (of rounds queued meanwhile), asked whenever a device would otherwise idle."""
        from ..supervisor import Supervisor

        requests, unrunnable = self.requests_for(todo, variants, shapes, broken)
        for item in unrunnable:
            yield item
        sup = self._supervisor or Supervisor(self.devices(), self.worker_command, self.worker_env,
                                             job_timeout=_opt(options, "timeout", 60.0), log=self.log,
                                             spawn=self.standbys.take if self.standbys else None,
                                             loaded=self.standbys.loaded if self.standbys else None,
                                             kind_of=lambda request: request["shape"]["id"])
        if self.keep_workers:
            self._supervisor = sup  # its busy seconds are read while it runs (remote_agent.serve)
        from ..supervisor import SupervisorError

        try:
            device_of = lambda request: request.get("device")  # noqa: E731 (a pinned round's jobs carry it)
            for job, device, result in sup.run(requests, keep=self.keep_workers, device_of=device_of, more=more):
                yield job, device, result
        except SupervisorError as exc:
            raise AgentError(str(exc))
        finally:
            self.worker_facts = sup.ready_facts
            self._supervisor = sup if self.keep_workers else None

    def close(self):
        """Stop the workers kept for the next round (``keep_workers``)."""
        if self._supervisor is not None:
            self._supervisor.close()
            self._supervisor = None


def measuring_order(order=None):
    """Sort key of a request: the shapes by id, and a shape's jobs in the manifest's ``order``
    ({shape id: [variant ids]}, ``lib:<name>`` included; a winners' re-measure rotates it round by
    round, so that no candidate, nor the library, always meets the GPU first, cool from the pause
    between rounds, or last, at its power cap), the jobs it does not list after those, by variant
    id."""
    order = order or {}

    def key(request):
        sid, vid = request[1]["shape"]["id"], request[1]["variant"]["id"]
        listed = order.get(sid) or []
        return (sid, listed.index(vid) if vid in listed else len(listed), vid)

    return key


def _slim_variant(v):
    return {"id": v["id"], "artifact": v["artifact"], "sha256": v.get("sha256"), "launch": v["launch"],
            "config": v["config"]}


def visible_variable(backend):
    return "CUDA_VISIBLE_DEVICES" if backend == "cuda" else "HIP_VISIBLE_DEVICES"


def physical_indices(backend, count):
    """The driver's indices of the agent's first ``count`` devices (its visible-devices variable
    renumbers them): what a worker's own visible-devices variable names."""
    visible = os.environ.get(visible_variable(backend))
    return ([v.strip() for v in visible.split(",")] if visible else [str(i) for i in range(count)])[:count]


def worker_env(backend, physical):
    """The environment of the worker of the device the driver numbers ``physical``: it sees that
    device alone, and imports this agent."""
    env = dict(os.environ)
    env[visible_variable(backend)] = str(physical)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _opt(options, name, default):
    if isinstance(options, dict):
        return options.get(name, default)
    value = getattr(options, name, None)
    return default if value is None else value


def make_gpu_runner(bundle, manifest, options, log):
    """Find the devices (the agent itself opens no context) and build the runner."""
    backend = manifest["target"]["backend"]
    try:
        api = api_for(backend)
        api.init()
        count = api.device_count()
        names = [api.device_name(i) for i in range(count)]
    except GpuError as exc:
        raise AgentError("%s target, but %s" % (backend, exc))
    if count == 0:
        raise AgentError("no %s device here" % backend)
    physical = physical_indices(backend, count)
    chosen = list(range(count))
    wanted = _opt(options, "devices", None)
    if wanted:
        try:
            chosen = [int(x) for x in str(wanted).split(",") if x.strip()]
        except ValueError:
            raise AgentError("--devices takes GPU indices such as 0,1; got %r" % wanted)
        bad = [i for i in chosen if i < 0 or i >= count]
        if bad:
            raise AgentError("--devices %s: this node has %d %s device(s)" % (wanted, count, backend))
    arch = manifest["target"].get("gpu_arch")
    devices = [("%s:%d" % (backend, i), physical[i]) for i in chosen]
    for i in chosen:
        log("device %s:%d is %s" % (backend, i, names[i]))
        if backend == "cuda" and arch:
            major, minor = api.attribute(75, i), api.attribute(76, i)
            if "%d%d" % (major, minor) != str(arch):
                log("warning: the bundle is built for sm%s, device %d is sm%d%d" % (arch, i, major, minor))
    return GpuRunner(bundle, manifest, options, log, devices)
