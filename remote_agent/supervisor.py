"""One worker process per device; a worker that dies or hangs is replaced and the run goes on.

Protocol (JSON lines): a worker first writes ``{"ready": true, ...}`` (or ``{"fatal": msg}``:
the run cannot go on, e.g. the reference disagrees with the host). Then, for each request line
``{"id": n, ...}`` on its stdin, it writes ``{"id": n, "result": {...}}``. A worker may exit right
after replying (a CUDA context it cannot trust any more), saying so with ``"exiting": true``; it
gets no further job and is restarted.

The supervisor sends a job to each idle worker and, while it runs, the worker's next job
(``ahead``): that one waits in the worker's pipe, so the worker starts it as soon as it has
replied, without waiting for the supervisor to read the reply (a single agent serves every
device, and writes each row to disk before it reads the next reply). It waits on all the pipes
at once, and enforces a deadline per job (``job_timeout``, from the moment the worker can start
it) and per start (``start_timeout``). A job sent ahead to a worker that dies, hangs or leaves
is handed out again. When a worker's pipe closes while a job is in flight, that job is recorded
``crash`` (with the exit signal or code and the last lines of its stderr); when the deadline
passes, the worker's whole process group is killed and the job is recorded ``timeout``. Either
way a new worker takes the device's next job. A device whose worker fails to start
``max_start_failures`` times in a row is dropped; when no device is left, the remaining jobs
raise SupervisorError.

Standard library only.
"""

import collections
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

from . import contract


class SupervisorError(Exception):
    """The run cannot go on (no worker can start, or a worker reported a fatal problem)."""


def die_with_parent():
    """In a worker: exit when the agent that started it goes, even mid-kernel (the worker runs in
    its own session, so nothing else would stop it)."""
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    import threading

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def protocol_streams(infile=None, outfile=None, watched=False):
    """The worker's protocol channel: a private copy of stdout, with fd 1 pointed at stderr so a
    library that prints cannot corrupt the protocol. ``watched``: it dies with its parent already
    (a standby that became a worker)."""
    if infile is None:
        if not watched:
            die_with_parent()
        infile = sys.stdin
    if outfile is None:
        fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        outfile = os.fdopen(fd, "w", buffering=1)
    return infile, outfile


def send(outfile, message):
    outfile.write(json.dumps(message) + "\n")
    outfile.flush()


def start_process(argv, env):
    """(process, its stderr file): a worker's process, its pipes the protocol's, in a session of
    its own (a hung one is killed with its children)."""
    stderr = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            env=env, start_new_session=True, close_fds=True)
    return proc, stderr


class _Worker(object):
    def __init__(self, device, argv, env, spawn=None):
        self.device = device
        self.proc, self.stderr = (spawn and spawn(argv, env)) or start_process(argv, env)
        self.buf = b""
        self.state = "starting"
        self.job = None  # (key, request) in flight
        self.queued = None  # (key, request) sent ahead: it runs once ``job`` is replied to
        self.started = time.monotonic()
        self.deadline = None
        self.sent = None  # when the job in flight was sent (or, sent ahead, when the one before ended)
        self.facts = None

    def fileno(self):
        return self.proc.stdout.fileno()

    def send(self, message):
        data = (json.dumps(message) + "\n").encode()
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read_lines(self):
        """Complete lines now readable; None at end of file."""
        chunk = os.read(self.fileno(), 1 << 16)
        if not chunk:
            return None
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        return [l for l in lines if l.strip()]

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                self.proc.kill()
            except OSError:
                pass
        self.reap()

    def reap(self, timeout=5.0):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def stderr_tail(self, lines=4):
        try:
            self.stderr.seek(0)
            text = self.stderr.read().decode(errors="replace")
        except OSError:
            return ""
        useful = [l.strip() for l in text.splitlines() if l.strip()]
        return " | ".join(useful[-lines:])[-400:]

    def exit_text(self):
        rc = self.proc.poll()
        if rc is None:
            return "worker stopped answering"
        if rc < 0:
            try:
                return "worker killed by %s" % signal.Signals(-rc).name
            except ValueError:
                return "worker killed by signal %d" % -rc
        return "worker exited %d" % rc


class Supervisor(object):
    def __init__(self, devices, command_for, env_for=None, job_timeout=60.0, start_timeout=300.0,
                 max_start_failures=3, log=None, spawn=None, loaded=None, kind_of=None, ahead=True):
        self.devices = list(devices)
        self.ahead = ahead  # each busy worker gets its next job too (not a bridge: it is handed over when idle)
        self.command_for = command_for
        self.spawn = spawn  # (argv, env) -> (process, stderr) started already, or None
        self.loaded = loaded  # (argv, env) -> whether spawn now has a worker to replace a bridge with
        self.kind_of = kind_of  # request -> its kind (a GPU job's shape): the costliest kinds' jobs go first
        self.kind_seconds = {}  # kind -> [seconds its jobs took, jobs]
        self.env_for = env_for or (lambda device: dict(os.environ))
        self.job_timeout = float(job_timeout)
        self.start_timeout = float(start_timeout)
        self.max_start_failures = max_start_failures
        self.log = log or (lambda msg: print("supervisor: " + msg, file=sys.stderr))
        self.ready_facts = {}
        self.restarts = collections.Counter()
        self.start_failure = {}  # device: why its last worker failed to start
        self.busy = collections.Counter()  # device -> seconds a job ran there (one sent ahead: since the reply before)
        self._announced = set()
        self._kept = None  # workers kept alive between run() calls (run(keep=True))

    def _start(self, device):
        return _Worker(device, self.command_for(device), self.env_for(device), self.spawn)

    def run(self, jobs, keep=False, device_of=None, more=None):
        """jobs: [(key, request dict)]. Yields (key, device, result dict) as they finish.
        ``keep``: the workers stay up after the last job (with their contexts, modules and
        data) for the next call, until ``close()``. ``device_of(request)``: the device a job must
        run on (None: any); a free worker takes the first pending job meant for it, else the
        first of the costliest kind (``kind_of``) any device may run, so a device's own jobs keep
        their order (a job meant for a
        device that was dropped goes to any). ``more()``: jobs to add, asked whenever fewer jobs
        any device may run are pending than there are workers (rounds queued meanwhile
        join while the devices still measure: no device waits for the slowest job of a round, nor
        for the next round's setup); the run ends when it gives none and no job is in flight."""
        pending = collections.deque(jobs)
        workers, self._kept = self._kept, None
        if workers is None:
            workers = {d: self._start(d) for d in self.devices}
        start_failures = collections.Counter()
        next_id = 0
        finished = False
        try:
            while workers and (pending or any(w.job for w in workers.values()) or _more(more, pending)):
                # before a device runs dry (jobs meant for one device count for none: they do not
                # keep the others fed)
                if more is not None and _free(pending, device_of, workers) < self._wanted(workers):
                    _more(more, pending)
                for device in list(workers):  # hand out work
                    w = workers[device]
                    if w.state == "idle" and w.job is None and self._replaceable(w):
                        w = workers[device] = self._hand_over(w)
                    if w.state == "idle" and w.job is None and pending:
                        taken = _take(pending, w.device, device_of, workers, self._cost)
                        if taken is None:
                            continue
                        w.job = taken
                        w.sent = time.monotonic()
                        w.deadline = w.sent + self.job_timeout
                        next_id += 1
                        _send(w, taken, next_id)
                    if w.state == "idle" and w.job is not None and w.queued is None and pending and self._ahead(w):
                        taken = _take(pending, w.device, device_of, workers, self._cost)
                        if taken is not None:
                            w.queued = taken
                            next_id += 1
                            _send(w, taken, next_id)
                now = time.monotonic()
                deadlines = [w.deadline if w.job else w.started + self.start_timeout
                             for w in workers.values() if w.job or w.state == "starting"]
                wait = max(0.0, min(deadlines) - now) if deadlines else 1.0
                if more is not None and _free(pending, device_of, workers) < self._wanted(workers):
                    wait = min(wait, MORE_POLL)  # the queue is looked at this often while it runs low
                readable, _, _ = select.select(list(workers.values()), [], [], min(wait, 5.0))
                for w in readable:
                    lines = w.read_lines()
                    if lines is None:  # the worker is gone
                        for item in self._lost(w, workers, start_failures, "crash", pending):
                            yield item
                        continue
                    for line in lines:
                        try:
                            message = json.loads(line.decode(errors="replace"))
                        except ValueError:
                            continue
                        if "fatal" in message:
                            raise SupervisorError("%s: %s" % (w.device, message["fatal"]))
                        if message.get("ready"):
                            w.state = "idle"
                            w.facts = message
                            start_failures[w.device] = 0
                            self.ready_facts[w.device] = message
                            if w.device not in self._announced:
                                self._announced.add(w.device)
                                self.log("worker for %s ready after %.2f s: %s" % (
                                    w.device, time.monotonic() - w.started, _facts_text(message)))
                        elif "result" in message and w.job is not None:
                            key, request = w.job
                            now = time.monotonic()
                            self.busy[w.device] += now - w.sent
                            self._count(request, now - w.sent)
                            w.job, w.deadline = None, None
                            if message.get("exiting"):  # it replied, then leaves: replace it, send it nothing
                                w.state = "exiting"
                                _requeue(w, pending)
                            elif w.queued is not None:  # it runs the job sent ahead from now on
                                w.job, w.queued = w.queued, None
                                w.sent, w.deadline = now, now + self.job_timeout
                            result = dict(message["result"])
                            yield key, w.device, result
                now = time.monotonic()
                for w in list(workers.values()):
                    if w.job and now > w.deadline:
                        for item in self._lost(w, workers, start_failures, "timeout", pending):
                            yield item
                    elif w.state == "starting" and now > w.started + self.start_timeout:
                        for item in self._lost(w, workers, start_failures, "timeout", pending):
                            yield item
            if pending:
                raise SupervisorError("no worker could start on any device; %d jobs not run (%s)" % (
                    len(pending), "; ".join("%s: %s" % kv for kv in sorted(self.start_failure.items()))))
            finished = True
        finally:
            if keep and finished:
                self._kept = workers
            else:
                for w in workers.values():
                    self._stop(w)

    def close(self):
        """Stop the workers kept by ``run(keep=True)``."""
        workers, self._kept = self._kept, None
        for w in (workers or {}).values():
            self._stop(w)

    def _count(self, request, seconds):
        if self.kind_of is not None:
            spent = self.kind_seconds.setdefault(self.kind_of(request), [0.0, 0])
            spent[0] += seconds
            spent[1] += 1

    def _cost(self, request):
        """The mean seconds of the jobs of ``request``'s kind so far (None: none yet, or no kinds)."""
        if self.kind_of is None:
            return None
        spent = self.kind_seconds.get(self.kind_of(request))
        return spent[0] / spent[1] if spent else None

    def _ahead(self, w):
        """Whether busy ``w`` gets its next job now (not a bridge: that one is handed over idle)."""
        return self.ahead and not (w.facts or {}).get("bridge")

    def _wanted(self, workers):
        """Jobs any device may run that keep every worker fed: one each, and one sent ahead."""
        return len(workers) * (2 if self.ahead else 1)

    def _replaceable(self, w):
        """Whether ``w`` is a bridge (a worker that measures before its device's torch standby is
        loaded, gpu_standby.py) whose standby is loaded now."""
        return bool(self.loaded and (w.facts or {}).get("bridge") and
                    self.loaded(self.command_for(w.device), self.env_for(w.device)))

    def _hand_over(self, bridge):
        """The device of an idle bridge to its loaded standby: that one starts (it has its jobs
        once ready), the bridge stops."""
        successor = self._start(bridge.device)
        # it exits on its own once told to; reaped aside, so the other devices' jobs go on meanwhile
        threading.Thread(target=self._stop, args=(bridge,), daemon=True, name="bridge-stop").start()
        self._announced.discard(bridge.device)  # its successor's ready line is logged too
        self.log("%s: torch is loaded; its standby takes over from the worker that measured without it" % (
            bridge.device))
        return successor

    def _lost(self, w, workers, start_failures, why, pending):
        """A worker died (``crash``) or ran past its deadline (``timeout``): record its job, hand
        out again the job sent ahead to it, replace it (or drop the device when it cannot even start)."""
        _requeue(w, pending)
        if why == "timeout":
            w.kill()
            text = ("no answer within %gs; worker killed" % self.job_timeout) if w.job else \
                "worker did not start within %gs" % self.start_timeout
        else:
            w.reap()
            text = w.exit_text()
        tail = w.stderr_tail()
        if w.job is not None:
            key = w.job[0]
            status = contract.TIMEOUT if why == "timeout" else contract.CRASH
            message = text + ("; " + tail if tail and why != "timeout" else "")
            self.log("%s on %s: %s" % (status, w.device, message))
            yield key, w.device, {"status": status, "message": message[:400]}
        elif w.state == "starting":
            start_failures[w.device] += 1
            self.start_failure[w.device] = "%s: %s" % (text, tail) if tail else text
            self.log("worker for %s failed to start (%s): %s" % (w.device, text, tail))
        self.restarts[w.device] += 1
        if start_failures[w.device] >= self.max_start_failures:
            self.log("giving up on %s after %d failed starts" % (w.device, start_failures[w.device]))
            del workers[w.device]
            return
        workers[w.device] = self._start(w.device)

    def _stop(self, w):
        if w.proc.poll() is None:
            try:
                w.send({"op": "exit"})
                w.proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
            try:
                w.proc.wait(10)
            except subprocess.TimeoutExpired:
                w.kill()
                return
        w.reap()


MORE_POLL = 0.02  # seconds between asks for more jobs while a worker is idle


def _send(w, job, number):
    try:
        w.send(dict(job[1], id=number))
    except (BrokenPipeError, OSError):
        pass  # its death shows as end of file


def _requeue(w, pending):
    """A job sent ahead to ``w``, which will not run it (it died, hangs or leaves), goes first again."""
    if w.queued is not None:
        pending.appendleft(w.queued)
        w.queued = None


def _more(more, pending):
    """Add ``more()``'s jobs to ``pending``; whether there were any."""
    if more is None:
        return False
    jobs = list(more() or [])
    pending.extend(jobs)
    return bool(jobs)


def _free(pending, device_of, workers):
    """Pending jobs any device may run."""
    if device_of is None:
        return len(pending)
    return sum(1 for _, request in pending if device_of(request) not in workers)  # (None: any)


def _take(pending, device, device_of, workers, cost_of=None):
    """The job ``device`` runs next (every job in order without ``device_of``): the first pending
    job meant for this device, else, of those any device may run, the first of the costliest
    (``cost_of(request)``: the seconds a job of its kind took so far, None where none ran yet,
    which counts as costliest); None if none. A job meant for one device (a winners' re-measure
    beside the search: all of a shape's candidates on one device) can run nowhere else, while any
    device may take the search's jobs: run first, the pinned work is spread over the search
    instead of left for the end, where one device would measure it while the others idle. The
    costliest first: the slowest shapes' searches end first, so their re-measure (and a noisy
    one's extra rounds) runs beside the others' search, not alone at the end."""
    if device_of is None:
        return pending.popleft()
    free, best = None, None
    for i, (key, request) in enumerate(pending):
        want = device_of(request)
        if want == device:
            del pending[i]
            return key, request
        if want is None or want not in workers:
            cost = cost_of(request) if cost_of else None
            cost = float("inf") if cost is None else cost
            if free is None or cost > best:
                free, best = i, cost
    if free is None:
        return None
    job = pending[free]
    del pending[free]
    return job


def _facts_text(message):
    device = message.get("device") or {}
    parts = [str(device.get("name", "")) if device else ""]
    if message.get("reference"):
        parts.append("reference %s" % message["reference"])
    if message.get("self_check"):
        parts.append("reference kernel self-check %s" % ", ".join(
            "%s %.1e" % kv for kv in sorted(message["self_check"].items())))
    if message.get("flush"):
        parts.append("L2 flush: %s" % (message.get("flush_fallback") or message["flush"]))
    if message.get("started_ahead"):
        parts.append("started before the round (%s)" % (
            "bridge: measures until torch is loaded" if message.get("bridge") else "standby"))
    if message.get("start_seconds"):
        parts.append("start: %s" % ", ".join("%s %.2f s" % kv for kv in message["start_seconds"].items()))
    if message.get("standby_seconds"):  # before it was handed its device: its own start, then the wait
        parts.append("standby: %s" % ", ".join("%s %.2f s" % kv for kv in message["standby_seconds"].items()))
    return "; ".join(p for p in parts if p)
