"""The host's side of the long-lived agent (``remote_agent/serve.py``) during ``harness tune``.

One serving agent per machine of the target (this machine for a target without ``ssh:``, every
host of a fleet) is started once and stays up across rounds; its GPU workers keep their
contexts, modules and device test data. On a remote, the first round pushes the agent's code
and the bundle (one tar stream); then one SSH channel stays open for the whole tune (a
``Bridge`` to ``remote_agent bridge``), and a round costs no SSH command: its new files and the
round go in as JSON lines, its rows come back when it is done. Here, rounds are files in the
agent's queue folder. A round is ``submit``-ted, and later ``collect``-ed; between the two the
host may build and submit the next round: the agent takes rounds in order, so the next is
measured as soon as this one ends.

A fleet's round is split over its hosts (job i to host i mod n); a pinned round (a winners'
re-measure) runs on the first host only: on its first device, or with each shape's jobs on one
device of it (``pin``: {shape id: slot}). A dead agent is restarted and resumes
the round it was in: jobs with rows stay measured, the others run (``serve.py``).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from remote_agent.contract import OK

from .errors import HarnessError
from .run import ConnectionLost
from .threads import in_threads

MAX_RESTARTS = 3  # per round and host


@dataclass
class Stats:
    """Where a tune's time went, for the progress line and the throughput benches."""

    agent_starts: int = 0
    start_seconds: float = 0.0  # starting serving agents (and the first push to each machine)
    push_seconds: float = 0.0  # sending rounds
    wait_seconds: float = 0.0  # the host blocked on the agents' results
    measure_seconds: float = 0.0  # rounds' wall time on the agents (summed over hosts)
    measure_wall: float = 0.0  # rounds' wall time on the agents (the slowest host of each round)
    busy_seconds: dict = field(default_factory=dict)  # device -> seconds a job ran there (every device listed)
    restarts: int = 0
    devices: dict = field(default_factory=dict)  # machine -> devices its agent measures on (known after a round)


@dataclass
class Ticket:
    """A submitted round: (lane, round name) per host it went to."""

    parts: list


class Bridge:
    """One SSH channel to ``python -m remote_agent bridge`` for the whole tune: requests go in
    as JSON lines, replies come back tagged with the request's id (a round's rows when done)."""

    def __init__(self, transport, workdir: str, idle_timeout: float):
        t = transport
        from .run import AGENT_ENV, AGENT_PYTHON_FLAGS

        command = t.shell_command([t.python] + AGENT_PYTHON_FLAGS + ["-m", "remote_agent", "bridge", "--workdir",
                                   workdir, "--idle-timeout", str(idle_timeout)], cwd=t.workdir or None,
                                  env=AGENT_ENV)
        self.label = t.label
        self.chan = t._channel(command)
        self.out = self.chan.makefile("rb")
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()  # a round is sent from its build's thread while others wait
        self.replies, self.events = {}, {}
        self.next_id = 0
        self.closed = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for raw in self.out:
                reply = json.loads(raw.decode("utf-8", "replace"))
                with self.lock:
                    self.replies[reply.get("id")] = reply
                    event = self.events.get(reply.get("id"))
                if event is not None:
                    event.set()
        except Exception as exc:  # the channel broke
            self.closed = str(exc)
        self.closed = self.closed or "the channel closed"
        with self.lock:
            for event in self.events.values():
                event.set()

    def call(self, request: dict) -> dict:
        with self.lock:
            self.next_id += 1
            rid = self.next_id
            event = self.events[rid] = threading.Event()
        try:
            with self.send_lock:  # one request's line at a time: a big one goes out in several packets
                self.chan.sendall((json.dumps(dict(request, id=rid)) + "\n").encode())
        except Exception as exc:
            raise ConnectionLost("lost the connection to %s (%s)" % (self.label, exc))
        event.wait()
        with self.lock:
            del self.events[rid]
            reply = self.replies.pop(rid, None)
        if reply is None:
            stderr = b""
            if self.chan.recv_stderr_ready():
                stderr = self.chan.recv_stderr(4096)
            raise ConnectionLost("lost the connection to %s (%s)%s" % (
                self.label, self.closed, ": " + stderr.decode(errors="replace").strip()[-200:] if stderr else ""))
        if reply.get("error"):
            raise HarnessError("the agent on %s: %s" % (self.label, reply["error"]))
        return reply

    def close(self):
        try:
            self.chan.close()
        except Exception:
            pass


class Lane:
    """One machine's serving agent: here, through its files; on a remote, through a Bridge."""

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
        self.bridge: Optional[Bridge] = None
        self.started = False
        self.restart_lock = threading.Lock()  # several rounds wait at once (streams): one restart

    def install(self, bundle: Path, manifest) -> None:
        """The first time on a remote: the agent's code and the bundle files it lacks (one tar
        stream), then the bridge."""
        if self.remote and self.have is None:
            from .bundle import pushed_files
            from .push import push

            push(bundle, manifest, self.transport)
            self.have = set(pushed_files(bundle, manifest))
        if self.remote and self.bridge is None:
            self.bridge = Bridge(self.transport, self.workdir, self.session.idle_timeout)

    def start(self, clear: bool = False) -> None:
        """Start the serving agent (``clear``: this session's first start drops earlier rounds)."""
        if self.remote:
            self.bridge.call({"op": "start", "clear": clear, "standby": self.session.standby})
        else:
            import subprocess

            from .transport.local import LocalTransport

            standby = ["--standby", self.session.standby] if self.session.standby else []
            proc = subprocess.run([self.transport.python, "-m", "remote_agent", "serve", "--workdir", self.workdir,
                                   "--detach", "--idle-timeout", str(self.session.idle_timeout)]
                                  + (["--clear"] if clear else []) + standby,
                                  capture_output=True, text=True, cwd=str(LocalTransport.agent_root()))
            if proc.returncode != 0:
                raise HarnessError("cannot start the agent here: %s" % (proc.stderr or proc.stdout).strip()[-300:])
        self.started = True
        self.session.stats.agent_starts += 1

    def stop(self) -> None:
        if self.started:
            if self.remote:
                try:
                    self.bridge.call({"op": "stop"})
                except HarnessError:
                    pass  # the agent stops on its own when idle
            else:
                Path(self.workdir, "stop").touch()
            self.started = False
        if self.bridge is not None:
            self.bridge.close()
            self.bridge = None

    def send(self, name: str, bundle: Path, manifest, options: dict, pin: bool) -> None:
        """The round's new files (before the round, so that the agent never sees a round whose
        files are still on their way) and the round."""
        import base64

        from .bundle import pushed_files

        spec = {"bundle": self.bundle, "results": self.results, "manifest": json.loads(manifest.to_json()),
                "options": options, "pin": dict(pin) if isinstance(pin, dict) else bool(pin)}
        if not self.remote:
            from remote_agent.serve import round_files, write_json

            Path(self.workdir, "queue").mkdir(parents=True, exist_ok=True)
            write_json(round_files(str(Path(self.workdir, "queue")), name)["json"], spec)
            return
        missing = [f for f in pushed_files(bundle, manifest) if f not in self.have]
        files = {"%s/%s" % (self.bundle, f): [base64.b64encode((bundle / f).read_bytes()).decode(),
                                              (bundle / f).stat().st_mode & 0o755] for f in missing}
        # what a GPU worker started later reads (tolerances, support kernels)
        files["%s/manifest.json" % self.bundle] = [base64.b64encode(manifest.to_json().encode()).decode(), 0o644]
        self.bridge.call({"op": "files", "files": files})
        self.have.update(missing)
        self.bridge.call({"op": "round", "name": name, "spec": spec})

    def wait(self, name: str) -> dict:
        """Block until round ``name`` is done there; restart a dead agent (it resumes the
        round). Returns {"done", "header", "rows"}."""
        from remote_agent.serve import wait_round

        for attempt in range(MAX_RESTARTS + 1):
            reply = self.bridge.call({"op": "wait", "name": name}) if self.remote else wait_round(self.workdir, name)
            if "done" in reply:
                return reply
            if attempt < MAX_RESTARTS and self.started:  # (not one this tune stopped)
                from . import ui

                with self.restart_lock:  # a start is a no-op where an agent serves already
                    ui.console.print("[yellow]the agent on %s is gone (%s); restarting it, it resumes round %s[/]"
                                     % (self.label, reply.get("gone"), name))
                    self.session.stats.restarts += 1
                    self.start()
        raise HarnessError("the agent on %s died %d times in round %s: %s" % (
            self.label, MAX_RESTARTS + 1, name, reply.get("gone")))


class AgentSession:
    """Long-lived agents for one (target, kernel) during a tune: ``submit`` then ``collect``."""

    def __init__(self, root: Path, target, kernel: str, transports: list, idle_timeout: float = 600.0,
                 standby: Optional[str] = None):
        self.root = Path(root)
        self.target = target
        self.kernel = kernel
        self.idle_timeout = idle_timeout
        self.standby = standby  # "cuda:0,1": the agents start their GPU workers at once (serve --standby)
        self.stats = Stats()
        self.lanes = [Lane(self, t, target, kernel) for t in transports]
        self.number = 0
        self.token = "%013d" % int(time.time() * 1000)  # round names sort by session, then number

    def submit(self, bundle: Path, manifest, options: dict, pin: bool = False) -> Ticket:
        """Queue the round ``manifest`` (its jobs split over the hosts, or all on the first host
        when ``pin``: on its first device, or each shape's on device ``pin[shape]``); returns at
        once."""
        lanes = self.lanes[:1] if pin else self.lanes
        self._setup([lane for lane in lanes if not lane.started], bundle, manifest)
        began = time.monotonic()
        parts = []
        for i, (lane, part) in enumerate(zip(lanes, split(manifest, len(lanes)))):
            if not part.jobs and i and not any(v.status != OK for v in part.variants):
                continue
            self.number += 1
            name = "%s-%06d" % (self.token, self.number)
            lane.send(name, bundle, part, options, pin)
            parts.append((lane, name))
        self.stats.push_seconds += time.monotonic() - began
        return Ticket(parts)

    def start_here(self) -> None:
        """Start the agent of this machine now, before any round is built (a remote's waits for
        the first push), so that its GPU workers start while the host prunes and compiles."""
        lanes = [lane for lane in self.lanes if not lane.remote and not lane.started]
        if lanes:
            self._setup(lanes, None, None)

    def _setup(self, lanes: list, bundle: Path, manifest) -> None:
        """The first push and the agent's start on every machine at once."""
        began = time.monotonic()

        def setup(lane):
            lane.install(bundle, manifest)
            lane.start(clear=True)

        errors = in_threads(setup, lanes)
        if errors:
            raise errors[0]
        if lanes:
            self.stats.start_seconds += time.monotonic() - began

    def collect(self, ticket: Ticket, local_results: Path) -> List[dict]:
        """The rows of a submitted round, in the order the hosts wrote them; rows measured on a
        remote are merged into ``local_results``."""
        return self.take(ticket, self.wait(ticket), local_results)

    def wait(self, ticket: Ticket, count: bool = True) -> list:
        """Block until every host has done its part of the round (any thread may wait);
        ``count``: the wait counts as the host blocked on results. The replies, for ``take``."""
        began = time.monotonic()
        replies = [None] * len(ticket.parts)

        def wait(i):
            lane, number = ticket.parts[i]
            replies[i] = lane.wait(number)

        errors = in_threads(wait, range(len(ticket.parts)))
        if count:
            self.stats.wait_seconds += time.monotonic() - began
        if errors:
            raise errors[0]
        return replies

    def take(self, ticket: Ticket, replies: list, local_results: Path) -> List[dict]:
        """The rows of a round ``wait`` returned, its seconds and busy seconds counted (one thread
        at a time)."""
        rows = []
        self.stats.measure_wall += max(float(r["done"].get("seconds") or 0.0) for r in replies)
        for (lane, _), reply in zip(ticket.parts, replies):
            done = reply["done"]
            self.stats.measure_seconds += float(done.get("seconds") or 0.0)
            self.stats.devices[lane.label] = len(done.get("devices") or []) or 1
            busy = done.get("busy") or {}
            for device in (set(busy) | set(done.get("devices") or [])) if busy else ():  # GPU workers only
                key = "%s %s" % (lane.label, device) if len(self.lanes) > 1 else device
                self.stats.busy_seconds[key] = self.stats.busy_seconds.get(key, 0.0) + busy.get(device, 0.0)
            header = reply["header"]
            body = reply["rows"]
            if lane.remote and body:
                merge_rows(header, body, local_results)
            rows += [dict(zip(header, r)) for r in body]
        return rows

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
                                       library=manifest.library if i == 0 else {},
                                       failed=manifest.failed if i == 0 else []))
    return out


def merge_rows(header: list, rows: list, local: Path) -> int:
    """Merge rows brought back by ``wait`` into the local results file (transport.fetch's rules)."""
    from .transport.fetch import merge_results

    with tempfile.TemporaryDirectory(prefix="harness-rows-") as tmp:
        path = Path(tmp) / "results.csv"
        with open(path, "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)
        return merge_results(path, Path(local))
