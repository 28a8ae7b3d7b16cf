"""harness run: start the agent (here, or on the remote with one SSH command) and follow it.

On a remote the agent runs detached (``remote_agent start``): a dropped SSH connection does not
stop it, and the next ``harness run --remote`` attaches to it instead of starting another.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from remote_agent import measure
from remote_agent.contract import PROGRESS_PREFIX

from . import ui
from .errors import HarnessError
from .push import remote_bundle_dir, remote_results_dir


class ConnectionLost(HarnessError):
    """The SSH connection dropped while following a remote run (the run goes on there)."""


DEFAULT_INTERLEAVE = measure.DEFAULT_INTERLEAVE
# how a remote runs the agent: its pushed code on the path, no .pyc written (one cut short by a
# full disk would stop every later run), and ``--pushed``: the run checks the push's marker
# against its manifest and its own code before it runs anything (docs/security.md)
AGENT_ENV = {"PYTHONPATH": "agent", "PYTHONDONTWRITEBYTECODE": "1"}
AGENT_PYTHON_FLAGS = ["-B", "-u"]


@dataclass
class RunOptions:
    warmup: int = 2
    iters: int = 10
    timeout: float = 60.0
    rerun_all: bool = False
    profiler: Optional[str] = None
    devices: Optional[str] = None
    min_time_ms: float = 100.0
    max_noise: float = 0.01  # stop sampling when the deciding estimator's noise settles under this
    max_time: float = 0.5  # seconds of sampling per job at most (after --iters samples)
    estimator: Optional[str] = None  # min or median (None: the agent's default for the backend)
    interleave: int = DEFAULT_INTERLEAVE  # CPU: jobs of one shape measured together, a sample each in turn
    select: Optional[str] = None  # job indices for this host (fleets)
    race: float = 0.0  # CPU, min estimator: stop timing a config this far behind its shape's best (0: off)


ESTIMATOR_HELP = ("the time that decides (ranks, winners, uplift): min or median of a job's samples; default: the "
                  "target's estimator:, else min on CPU targets (a neighbour only ever slows a sample down, so the "
                  "minimum reproduces where the median measures the neighbours) and median on GPU targets")
INTERLEAVE_HELP = ("CPU targets: measure up to this many jobs of one shape together, one sample of each in turn, "
                   "so that a slow stretch of the machine slows them alike instead of whichever ran in it "
                   "(1: one job after another)")
MAX_TIME_HELP = ("seconds of sampling per variant and shape at most (once --iters samples are in); default %g with "
                 "the min estimator (which samples at least %g s first), %g with the median"
                 % (measure.MIN_MAX_TIME, measure.MIN_SETTLE_TIME, measure.DEFAULT_MAX_TIME))


def timing_choice(target, estimator: Optional[str], max_time: Optional[float]) -> tuple:
    """(estimator, max_time) of a run: --estimator, else the target's (min on CPUs, median on
    GPUs); --max-time, else that estimator's default. One line and exit 2 for a bad name."""
    name = estimator or target.deciding_estimator
    if name not in measure.ESTIMATORS:
        raise HarnessError("--estimator %s: choose min or median" % name)
    if max_time is not None and max_time <= 0:
        raise HarnessError("--max-time must be positive (got %g)" % max_time)
    return name, (measure.default_max_time(name) if max_time is None else max_time)


def agent_args(bundle: str, results: str, options: RunOptions) -> list:
    args = ["--bundle", bundle, "--results", results,
            "--warmup", str(options.warmup), "--iters", str(options.iters),
            "--timeout", str(options.timeout), "--min-time-ms", str(options.min_time_ms),
            "--max-noise", str(options.max_noise), "--max-time", str(options.max_time),
            "--interleave", str(options.interleave)]
    if options.estimator:
        args += ["--estimator", options.estimator]
    if options.race:
        args += ["--race", str(options.race)]
    if options.rerun_all:
        args.append("--all")
    if options.profiler:
        args += ["--profiler", options.profiler]
    if options.devices:
        args += ["--devices", options.devices]
    if options.select is not None:
        args += ["--select", options.select]
    return args


def local_results_path(root: Path, target: str, kernel: str) -> Path:
    from .names import check_name, confined

    return confined(root, "results", check_name(target, "target"), check_name(kernel, "kernel"), "results.csv")


def run_local(root: Path, target, kernel: str, options: RunOptions) -> Path:
    """The agent on this machine, on the host's own bundle (run_under still applies)."""
    from .transport.local import LocalTransport

    transport = LocalTransport(target)
    from .bundle import bundle_dir

    bundle = bundle_dir(root, target.name, kernel).resolve()
    if not (bundle / "manifest.json").exists():
        raise HarnessError("no bundle for %s on %s; run: harness build %s --target %s"
                           % (kernel, target.name, kernel, target.name))
    results = local_results_path(root, target.name, kernel).resolve()
    argv = [transport.python, "-u", "-m", "remote_agent", "run"] + agent_args(str(bundle), str(results), options)
    with ui.progress() as bar:
        follow(transport, argv, cwd=str(LocalTransport.agent_root()), env=None, label=target.name,
               on_progress=ProgressBar(bar, target.name))
    return results


def run_remote(target, kernel: str, options: RunOptions, transport, on_progress=None) -> str:
    """One SSH command starts the agent detached in the remote workdir (or attaches to the run
    in progress) and streams its log; progress lines drive ``on_progress``. A transport with
    a scheduler of its own (Slurm) runs the jobs its way."""
    from .transport.base import SCHEDULER, can

    if can(transport, SCHEDULER):
        return transport.run_jobs(target, kernel, options, on_progress)
    results = "%s/results.csv" % remote_results_dir(target.name, kernel)
    argv = [transport.python] + AGENT_PYTHON_FLAGS + ["-m", "remote_agent", "start", "--results", results, "--"] + \
        agent_args(remote_bundle_dir(target.name, kernel), results, options) + ["--pushed"]
    if on_progress is None:
        with ui.progress() as bar:
            follow(transport, argv, cwd=transport.workdir or None, env=AGENT_ENV,
                   label=transport.label, on_progress=ProgressBar(bar, target.name))
    else:
        follow(transport, argv, cwd=transport.workdir or None, env=AGENT_ENV,
               label=transport.label, on_progress=on_progress)
    return results


def remote_status(target, kernel: str, transport) -> dict:
    results = "%s/results.csv" % remote_results_dir(target.name, kernel)
    command = transport.shell_command([transport.python, "-B", "-m", "remote_agent", "status", "--results", results],
                                      cwd=transport.workdir or None, env=AGENT_ENV)
    rc, out, err = transport.run_capture(command)
    if rc != 0:
        lines = err.strip().splitlines()
        raise HarnessError("cannot read the status on %s: %s" % (transport.label, lines[-1][-200:] if lines else "exit %d" % rc))
    try:
        return json.loads(out.decode("utf-8", "replace"))
    except ValueError:
        raise HarnessError("cannot read the status on %s: it answered %r" % (transport.label, out[:80]))


class ProgressBar:
    """Turns the agent's progress lines into a rich progress bar."""

    def __init__(self, bar, label: str):
        self.bar = bar
        self.task = bar.add_task("run %s" % label, total=None, info="")
        self.counts = {}

    def __call__(self, info: dict) -> None:
        if info.get("status"):
            self.counts[info["status"]] = self.counts.get(info["status"], 0) + 1
        self.bar.update(self.task, total=info["total"], completed=info["done"],
                        info=" ".join("%s %d" % kv for kv in sorted(self.counts.items())))


def follow(transport, argv, cwd, env, label, on_progress: Callable[[dict], None]):
    """Run argv through the transport; progress lines go to on_progress, agent messages are shown."""
    messages = []

    def on_line(line: str):
        if line.startswith(PROGRESS_PREFIX):
            on_progress(json.loads(line[len(PROGRESS_PREFIX):]))
        elif line.strip():
            messages.append(line)
            if not line.startswith("agent: error: "):  # the command's own error line says it once
                ui.console.print(line, markup=False)

    try:
        rc, err = transport.run(argv, on_line=on_line, cwd=cwd, env=env)
    except (OSError, EOFError) as exc:
        raise ConnectionLost(_lost(label, exc))
    except Exception as exc:  # paramiko.SSHException and friends
        if type(exc).__module__.startswith("paramiko"):
            raise ConnectionLost(_lost(label, exc))
        raise
    if rc == -1 and getattr(transport, "is_remote", False):
        raise ConnectionLost(_lost(label, "the connection closed"))
    if rc != 0:
        lines = [l for l in err.strip().splitlines() + messages if l.strip()]
        errors = [l for l in lines if l.startswith("agent: error: ")]
        message = (errors or lines or ["exit code %d" % rc])[-1]
        if message.startswith("agent: error: "):
            message = message[len("agent: error: "):]
        raise HarnessError("the agent on %s stopped: %s" % (label, message))


def _lost(label, exc) -> str:
    return ("lost the connection to %s (%s); the run goes on there: `harness run --remote` attaches to it "
            "again, `harness report` fetches what is done" % (label, exc))
