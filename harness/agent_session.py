"""The host's side of the long-lived agent (``remote_agent/serve.py``) during ``harness tune``.

One serving agent per machine of the target (this machine for a target without ``ssh:``, every
host of a fleet) is started once and stays up across rounds; its GPU workers keep their
contexts, modules and device test data. A round is ``submit``-ted (the bundle's new files, its
manifest and a round file in one tar stream; here, the round file only) and later
``collect``-ed (one ``wait`` command per host that brings the round's rows back). Between the
two the host may build and submit the next round: the agent takes rounds in order, so the next
is measured as soon as this one ends.

A fleet's round is split over its hosts (job i to host i mod n); a pinned round (a winners'
re-measure) runs on the first host's first device only. A dead agent is restarted and resumes
the round it was in: jobs with rows stay measured, the others run (``serve.py``).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import shlex
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from remote_agent.contract import OK

from .errors import HarnessError

MAX_RESTARTS = 3  # per round and host


@dataclass
class Stats:
    """Where a tune's time went, for the progress line and bench/tune_throughput.py."""

    agent_starts: int = 0
    start_seconds: float = 0.0  # starting serving agents
    push_seconds: float = 0.0  # sending rounds
    wait_seconds: float = 0.0  # the host blocked on the agents' results
    measure_seconds: float = 0.0  # rounds' wall time on the agents (summed over hosts)
    busy_seconds: dict = field(default_factory=dict)  # device -> seconds a job ran there
    devices: dict = field(default_factory=dict)  # host label -> devices it measured on
    restarts: int = 0
    rounds: int = 0
    rows: int = 0


@dataclass
class Ticket:
    """A submitted round: (lane, round number) per host it went to."""

    parts: list
    submitted: float


class Lane:
    """One machine's serving agent."""

    def __init__(self, session, transport, target, kernel: str):
        from .push import remote_bundle_dir, remote_results_dir
        from .run import local_results_path

        self.session = session
        self.transport = transport
        self.remote = getattr(transport, "is_remote", False)
        self.label = getattr(transport, "label", None) or "local"
        if self.remote:
            self.bundle = remote_bundle_dir(target.name, kernel)
            self.results = "%s/results.csv" % remote_results_dir(target.name, kernel)
            self.workdir = "%s/serve" % remote_results_dir(target.name, kernel)
        else:
            from .bundle import bundle_dir

            self.bundle = str(bundle_dir(session.root, target.name, kernel).resolve())
            self.results = str(local_results_path(session.root, target.name, kernel).resolve())
            self.workdir = str(Path(self.results).parent / "serve")
        self.have: Optional[set] = None  # bundle files known to be on the remote
        self.started = False

    # -- commands -----------------------------------------------------------------------------
    def _command(self, args: list) -> tuple:
        """Run ``python -m remote_agent ARGS`` there; (rc, stdout text, stderr text). Here,
        ``wait`` runs in this process (no interpreter to start per round)."""
        t = self.transport
        if not self.remote and args[0] == "wait":
            import io

            from remote_agent.serve import wait_round

            buf = io.StringIO()
            return wait_round(args[2], args[4], out=buf), buf.getvalue(), ""
        if self.remote:
            command = t.shell_command([t.python, "-m", "remote_agent"] + args, cwd=t.workdir or None,
                                      env={"PYTHONPATH": "agent"})
            rc, out, err = t.run_capture(command)
            return rc, out.decode("utf-8", "replace"), err
        import subprocess

        from .transport.local import LocalTransport

        proc = subprocess.run([t.python, "-m", "remote_agent"] + args, capture_output=True, text=True,
                              cwd=str(LocalTransport.agent_root()))
        return proc.returncode, proc.stdout, proc.stderr

    def start(self, clear: bool = False) -> None:
        """Start the serving agent (``clear``: this session's first start drops earlier rounds)."""
        began = time.monotonic()
        rc, out, err = self._command(["serve", "--workdir", self.workdir, "--detach",
                                      "--idle-timeout", str(self.session.idle_timeout)] + (["--clear"] if clear else []))
        if rc != 0:
            raise HarnessError("cannot start the agent on %s: %s" % (self.label, (err or out).strip()[-300:]))
        self.started = True
        self.session.stats.agent_starts += 1
        self.session.stats.start_seconds += time.monotonic() - began

    def stop(self) -> None:
        if not self.started:
            return
        if self.remote:
            t = self.transport
            path = "%s/%s/stop" % (t.workdir, self.workdir) if t.workdir else "%s/stop" % self.workdir
            try:
                t.run_capture("touch %s" % shlex.quote(path))
            except Exception:
                pass  # the agent stops on its own when idle
        else:
            Path(self.workdir, "stop").touch()
        self.started = False

    # -- rounds -------------------------------------------------------------------------------
    def install(self, bundle: Path, manifest) -> None:
        """The first time: the agent's code and the bundle files the remote lacks."""
        if self.remote and self.have is None:
            from .bundle import pushed_files
            from .push import push

            push(bundle, manifest, self.transport)
            self.have = set(pushed_files(bundle, manifest))

    def send(self, name: str, bundle: Path, manifest, options: dict, pin: bool) -> None:
        """The round's new files, its manifest and the round file (last, so that the agent never
        sees a round whose files are still on their way)."""
        from .bundle import pushed_files

        spec = {"bundle": self.bundle, "results": self.results, "manifest": json.loads(manifest.to_json()),
                "options": options, "pin": bool(pin)}
        name = "%s/queue/%s.json" % (self.workdir, name)
        if not self.remote:
            from remote_agent.serve import write_json

            Path(self.workdir, "queue").mkdir(parents=True, exist_ok=True)
            write_json(name, spec)
            return
        self.install(bundle, manifest)
        missing = [f for f in pushed_files(bundle, manifest) if f not in self.have]
        with tempfile.TemporaryDirectory(prefix="harness-round-") as tmp:
            round_file = Path(tmp) / "round.json"
            round_file.write_text(json.dumps(spec))
            pairs = [(bundle / f, "%s/%s" % (self.bundle, f)) for f in missing]
            pairs += [(bundle / "manifest.json", "%s/manifest.json" % self.bundle), (round_file, name)]
            self.transport.put_files(pairs)
        self.have.update(missing)

    def wait(self, name: str) -> dict:
        """Block until round ``name`` is done there; restart a dead agent (it resumes the
        round). Returns {"done", "header", "rows"}."""
        for attempt in range(MAX_RESTARTS + 1):
            rc, out, err = self._command(["wait", "--workdir", self.workdir, "--round", name])
            lines = [l for l in out.splitlines() if l.startswith("{")]
            reply = json.loads(lines[-1]) if lines else {}
            if rc == 0 and "done" in reply:
                return reply
            if rc == 3 and attempt < MAX_RESTARTS:
                from . import ui

                ui.console.print("[yellow]the agent on %s is gone (%s); restarting it, it resumes round %s[/]"
                                 % (self.label, reply.get("log") or "no log", name))
                self.session.stats.restarts += 1
                self.start()
                continue
            raise HarnessError("the agent on %s stopped: %s" % (self.label, reply.get("log") or (err or out).strip()[-300:]))
        raise HarnessError("the agent on %s died %d times in round %s" % (self.label, MAX_RESTARTS + 1, name))


class AgentSession:
    """Long-lived agents for one (target, kernel) during a tune: ``submit`` then ``collect``."""

    def __init__(self, root: Path, target, kernel: str, transports: list, idle_timeout: float = 600.0):
        self.root = Path(root)
        self.target = target
        self.kernel = kernel
        self.idle_timeout = idle_timeout
        self.stats = Stats()
        self.lanes = [Lane(self, t, target, kernel) for t in transports]
        self.number = 0
        self.token = "%013d" % int(time.time() * 1000)  # round names sort by session, then number

    def submit(self, bundle: Path, manifest, options: dict, pin: bool = False) -> Ticket:
        """Queue the round ``manifest`` (its jobs split over the hosts, or all on the first host
        and its first device when ``pin``); returns at once."""
        began = time.monotonic()
        lanes = self.lanes[:1] if pin else self.lanes
        parts = []
        for i, (lane, part) in enumerate(zip(lanes, split(manifest, len(lanes)))):
            if not part.jobs and i and not any(v.status != OK for v in part.variants):
                continue
            if not lane.started:
                lane.install(bundle, part)
                lane.start(clear=True)
            self.number += 1
            name = "%s-%06d" % (self.token, self.number)
            lane.send(name, bundle, part, options, pin)
            parts.append((lane, name))
        self.stats.push_seconds += time.monotonic() - began
        return Ticket(parts, began)

    def collect(self, ticket: Ticket, local_results: Path) -> List[dict]:
        """The rows of a submitted round, in the order the hosts wrote them; rows measured on a
        remote are merged into ``local_results``."""
        began = time.monotonic()
        replies = [None] * len(ticket.parts)
        errors = []

        def wait(i, lane, number):
            try:
                replies[i] = lane.wait(number)
            except Exception as exc:  # re-raised below, in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=wait, args=(i, lane, n), daemon=True)
                   for i, (lane, n) in enumerate(ticket.parts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.stats.wait_seconds += time.monotonic() - began
        if errors:
            raise errors[0]
        rows = []
        for (lane, _), reply in zip(ticket.parts, replies):
            done = reply["done"]
            self.stats.rounds += 1
            self.stats.measure_seconds += float(done.get("seconds") or 0.0)
            for device, seconds in (done.get("busy") or {}).items():
                key = "%s %s" % (lane.label, device) if len(self.lanes) > 1 else device
                self.stats.busy_seconds[key] = self.stats.busy_seconds.get(key, 0.0) + seconds
            self.stats.devices[lane.label] = done.get("devices") or []
            header = reply["header"]
            body = reply["rows"]
            if lane.remote and body:
                merge_rows(header, body, local_results)
            rows += [dict(zip(header, r)) for r in body]
        self.stats.rows += len(rows)
        return rows

    def device_count(self) -> int:
        return sum(max(1, len(d)) for d in self.stats.devices.values()) or len(self.lanes)

    def close(self) -> None:
        for lane in self.lanes:
            lane.stop()


def split(manifest, parts: int) -> list:
    """The round for each of ``parts`` hosts: job i goes to host i mod parts; the first host also
    records the failed compiles and measures the library."""
    if parts <= 1:
        return [manifest]
    out = []
    for i in range(parts):
        jobs = manifest.jobs[i::parts]
        used = {j.variant for j in jobs}
        variants = [v for v in manifest.variants if v.id in used or (i == 0 and v.status != OK)]
        out.append(dataclasses.replace(manifest, jobs=jobs, variants=variants, pruned=[],
                                       library=manifest.library if i == 0 else {}))
    return out


def merge_rows(header: list, rows: list, local: Path) -> int:
    """Merge rows brought back by ``wait`` into the local results file (report.fetch's rules)."""
    from .report.fetch import merge_results

    with tempfile.TemporaryDirectory(prefix="harness-rows-") as tmp:
        path = Path(tmp) / "results.csv"
        with open(path, "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)
        return merge_results(path, Path(local))
