"""Fleets: a target with several identical hosts. Jobs are spread over the hosts, each host's
agent runs its share (``--select``) detached; a host that drops out has its unfinished jobs
moved to the others. Push goes to every host at once through Fabric's ThreadingGroup."""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import ui
from .bundle import Manifest
from .errors import HarnessError
from .run import ConnectionLost, RunOptions, run_remote
from .threads import in_threads


@dataclass
class FleetSummary:
    done: dict = field(default_factory=dict)  # host label -> jobs finished there
    dropped: list = field(default_factory=list)  # host labels that dropped out
    moved: int = 0  # jobs moved off dropped hosts
    chunks: int = 0


def compact(indices) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the agent's --select)."""
    out, run = [], []
    for i in sorted(indices) + [None]:
        if run and i is not None and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append("%d-%d" % (run[0], run[-1]) if len(run) > 1 else str(run[0]))
        run = [i]
    return ",".join(out)


def chunks_of(indices: list, hosts: int, per_host: int = 2) -> list:
    """Round-robin chunks, ``per_host`` per host: hosts that finish early take more, and a
    dropped host loses only the chunk it was running."""
    parts = max(1, min(len(indices), hosts * per_host))
    return [indices[i::parts] for i in range(parts)]


def run_fleet(target, kernel: str, manifest: Manifest, transports: list, options: RunOptions,
              per_host: int = 2) -> FleetSummary:
    """Hosts pull chunks of jobs from one queue; a host that drops out has the unfinished
    jobs of its chunk put back for the others."""
    keys = {"%s|%s" % (j.variant, j.shape): i for i, j in enumerate(manifest.jobs)}
    work = queue.Queue()
    for chunk in chunks_of(list(range(len(keys))), len(transports), per_host):
        work.put(chunk)
    summary = FleetSummary()
    finished, lock = set(), threading.Lock()
    busy = {t.label: False for t in transports}  # running a chunk now
    errors = []

    with ui.progress() as bar:
        task = bar.add_task("run %s x%d" % (target.name, len(transports)), total=len(keys), info="")

        def worker(transport):
            done_here = 0
            measured_here = set()  # rows that live on this host until a report fetches them
            while True:
                with lock:
                    try:
                        chunk = work.get_nowait()
                        busy[transport.label] = True
                    except queue.Empty:
                        chunk = None
                if chunk is None:
                    if any(busy.values()):
                        time.sleep(0.2)  # a host still running may drop out and hand work back
                        continue
                    break
                done_chunk = set()

                def on_progress(info):
                    idx = keys.get("%s|%s" % (info.get("variant"), info.get("shape")))
                    if idx is not None:
                        done_chunk.add(idx)
                        measured_here.add(idx)
                        with lock:
                            finished.add(idx)
                            bar.update(task, completed=len(finished))

                opts = RunOptions(**{**options.__dict__, "select": compact(chunk)})
                try:
                    if not transport.conn.is_connected:
                        try:
                            transport.open()
                        except HarnessError as exc:  # it died between two chunks
                            raise ConnectionLost(str(exc))
                    run_remote(target, kernel, opts, transport, on_progress=on_progress)
                    done_here += len(chunk)
                    summary.chunks += 1
                except ConnectionLost:
                    # Its unfinished jobs, and the rows it measured that only it holds, go to the others.
                    left = [i for i in chunk if i not in done_chunk]
                    stranded = sorted(measured_here)
                    with lock:
                        summary.dropped.append(transport.label)
                        summary.moved += len(left) + len(stranded)
                        finished.difference_update(stranded)
                        if left or stranded:
                            work.put(sorted(set(left) | set(stranded)))
                        busy[transport.label] = False
                    ui.console.print("[yellow]%s dropped out; %d unfinished jobs and %d rows measured there go "
                                     "to the other hosts[/]" % (transport.label, len(left), len(stranded)))
                    done_here = 0
                    break
                except HarnessError as exc:
                    errors.append(exc)
                    with lock:
                        busy[transport.label] = False
                    break
                with lock:
                    busy[transport.label] = False
            summary.done[transport.label] = done_here
            try:
                transport.close()
            except Exception:
                pass

        errors += in_threads(worker, transports)
    if errors:
        raise errors[0]
    if not work.empty():
        raise HarnessError("every host of %s dropped out with jobs left; run again to resume" % target.name)
    return summary


def push_fleet(bundle: Path, manifest: Manifest, target, transports: list) -> list:
    """Push to every host in parallel (ThreadingGroup of the hosts' Fabric connections)."""
    from fabric import ThreadingGroup

    from .push import push

    for t in transports:
        t.open()
    group = ThreadingGroup.from_connections([t.conn for t in transports])
    try:
        group.run("true", hide=True, in_stream=False)  # all hosts answer before anything is sent
    except Exception as exc:  # fabric.exceptions.GroupException
        failed = [str(getattr(c, "host", c)) for c in getattr(exc, "result", {})]
        raise HarnessError("cannot reach every host of %s: %s" % (target.name, ", ".join(failed) or exc))
    with ThreadPoolExecutor(max_workers=len(transports)) as pool:
        results = list(pool.map(lambda t: push(bundle, manifest, t), transports))
    for t in transports:
        t.close()
    return results
