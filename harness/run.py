"""harness run: start the agent (here, or on the remote with one SSH command) and follow it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from remote_agent.contract import PROGRESS_PREFIX

from . import ui
from .errors import HarnessError
from .push import remote_bundle_dir, remote_results_dir


@dataclass
class RunOptions:
    warmup: int = 2
    iters: int = 10
    timeout: float = 60.0
    rerun_all: bool = False
    profiler: Optional[str] = None
    devices: Optional[str] = None
    min_time_ms: float = 100.0


def agent_args(bundle: str, results: str, options: RunOptions, run_under: Optional[str]) -> list:
    args = ["-u", "-m", "remote_agent", "run", "--bundle", bundle, "--results", results,
            "--warmup", str(options.warmup), "--iters", str(options.iters),
            "--timeout", str(options.timeout), "--min-time-ms", str(options.min_time_ms)]
    if options.rerun_all:
        args.append("--all")
    if options.profiler:
        args += ["--profiler", options.profiler]
    if run_under:
        args += ["--run-under", run_under]
    if options.devices:
        args += ["--devices", options.devices]
    return args


def local_results_path(root: Path, target: str, kernel: str) -> Path:
    return Path(root) / "results" / target / kernel / "results.csv"


def run_local(root: Path, target, kernel: str, options: RunOptions) -> Path:
    """The agent on this machine, on the host's own bundle (run_under still applies)."""
    from .transport.local import LocalTransport

    transport = LocalTransport(target)
    bundle = (Path(root) / "build" / target.name / kernel).resolve()
    if not (bundle / "manifest.json").exists():
        raise HarnessError("no bundle for %s on %s; run: harness build %s --target %s"
                           % (kernel, target.name, kernel, target.name))
    results = local_results_path(root, target.name, kernel).resolve()
    argv = [transport.python] + agent_args(str(bundle), str(results), options, None)
    _follow(transport, argv, cwd=str(LocalTransport.agent_root()), env=None, label=target.name)
    return results


def run_remote(target, kernel: str, options: RunOptions, transport) -> str:
    """One SSH command starts the agent in the remote workdir; its progress lines drive a bar."""
    argv = [transport.python] + agent_args(remote_bundle_dir(target.name, kernel),
                                           "%s/results.csv" % remote_results_dir(target.name, kernel),
                                           options, None)
    _follow(transport, argv, cwd=transport.workdir or None, env={"PYTHONPATH": "agent"}, label=target.name)
    return "%s/results.csv" % remote_results_dir(target.name, kernel)


def _follow(transport, argv, cwd, env, label):
    import os

    if env is None:
        env = dict(os.environ)
    with ui.progress() as bar:
        task = bar.add_task("run %s" % label, total=None, info="")
        counts = {}

        def on_line(line: str):
            if line.startswith(PROGRESS_PREFIX):
                info = json.loads(line[len(PROGRESS_PREFIX):])
                if info.get("status"):
                    counts[info["status"]] = counts.get(info["status"], 0) + 1
                bar.update(task, total=info["total"], completed=info["done"],
                           info=" ".join("%s %d" % kv for kv in sorted(counts.items())))
            else:
                ui.console.print(line, markup=False)

        rc, err = transport.run(argv, on_line=on_line, cwd=cwd, env=env)
    for line in err.splitlines():
        if line.startswith("agent: ") and "error" not in line:
            ui.console.print(line, markup=False)
    if rc != 0:
        last = [l for l in err.strip().splitlines() if l.strip()]
        message = last[-1] if last else "exit code %d" % rc
        if message.startswith("agent: error: "):
            message = message[len("agent: error: "):]
        raise HarnessError("the agent on %s stopped: %s" % (label, message))
