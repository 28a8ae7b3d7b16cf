"""The long-lived agent of a tune: ``python3 -m remote_agent serve --workdir W`` stays up across
rounds and takes each round from a queue folder, so a round pays neither a new agent process
nor new GPU workers (their contexts, loaded modules and device test data stay).

Files under W (the host writes ``queue/*.json``; everything else is the agent's):
  queue/NAME.json     a round: {"bundle", "results", "manifest", "options", "pin"}; the manifest
                      holds only the round's variants and jobs. Rounds run one at a time in name
                      order (the host names them <session>-<number>, both zero-padded); paths are
                      relative to the agent's folder or absolute. A file that does not parse yet
                      is still being written: it is read again. "pin": false, true (every
                      job on the first device) or {shape id: slot} (each shape's jobs on
                      device slot modulo the devices: a winners' re-measure spread over them).
  queue/NAME.start    {"offset"}: the size of the results file when the round began. An agent
                      restarted mid-round resumes it and skips the jobs whose rows lie past it
                      (a round of a stream: the jobs whose rows NAME.rows lists).
  queue/NAME.rows     a round of a stream: "start end" per line, the byte range of each row it
                      wrote, appended as they are written (so that a resumed round knows its own).
  queue/NAME.done     {"offset", "end", "rows", "seconds", "busy": {device: s}, "devices"}:
                      the round's rows are the results file's bytes [offset, end); a GPU
                      round measured in a stream (below) adds "spans": [[start, end], ...],
                      the byte ranges of its own rows (rows of other rounds lie in between).
  stop                the agent finishes the round in progress and exits.
  serve.lock          held (flock) while an agent serves W; serve.pid, serve.log.

GPU rounds run as a stream: the round and every round queued after it with the same bundle,
results, devices and profiler go to the same GPU workers as one run, the next round's jobs taken by
a device as soon as it has nothing left of the earlier ones (no device waits for the slowest job of
a round), each round done when its own jobs are. Each job carries its round's timing options, and
a pinned round's jobs their device: a winners' re-measure joins the stream on its device while the
other devices go on with the search's rounds.

Rows are appended and flushed per job as in ``run``: killing the agent loses no finished row.
``--detach`` starts it in its own session (so a closed SSH channel does not stop it) and returns
once it serves; ``bridge`` is the host's one SSH channel for a tune: it starts the agent, writes
new files and rounds, and answers each round with its rows when done.
Standard library only.
"""

import csv
import fcntl
import io
import json
import os
import subprocess
import sys
import time
import types

from . import bundlecheck, contract, limits
from .agent import Agent, AgentError, make_runner
from .results import ResultsWriteError, ResultsWriter, SchemaMismatch, _drop_torn_tail

RUN_DEFAULTS = {"warmup": 2, "iters": 10, "timeout": 60.0, "rerun_all": True, "profiler": None,
                "run_under": None, "devices": None, "min_time_ms": 100.0, "select": None}


def paths(workdir):
    return {name: os.path.join(workdir, name) for name in ("queue", "stop", "serve.lock", "serve.pid", "serve.log")}


def round_files(queue, name):
    base = os.path.join(queue, name)
    return {ext: base + "." + ext for ext in ("json", "start", "done", "rows")}


def _log_line(msg):
    """A line of serve.log, with the wall-clock time to the millisecond (when workers became ready,
    rounds began and ended: where a tune's first seconds went)."""
    now = time.time()
    print("agent %s.%03d: %s" % (time.strftime("%H:%M:%S", time.localtime(now)), int(now * 1000) % 1000, msg),
          file=sys.stderr, flush=True)


def write_json(path, data):
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(json.dumps(data))  # one write (json.dump writes piece by piece)
    os.replace(tmp, path)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def read_spans(path):
    """The [start, end] byte ranges a round's ``.rows`` lists ([] when it has none); a torn last
    line (the agent killed mid-write) is left out: its row is then measured again."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")[:-1]
    except OSError:
        return []
    return [[int(a), int(b)] for a, b in (line.split() for line in lines if len(line.split()) == 2)]


def _job_keys(header, rows):
    idx = {n: i for i, n in enumerate(header)}
    return {contract.job_key(r[idx["variant_id"]], r[idx["shape_id"]], r[idx["device"]]) for r in rows}


def pending_rounds(queue):
    """Names of rounds with a round file and no done marker, oldest first."""
    try:
        names = os.listdir(queue)
    except OSError:
        return []
    rounds = sorted(n[:-5] for n in names if n.endswith(".json") and ".tmp" not in n)
    return [n for n in rounds if not os.path.exists(round_files(queue, n)["done"])]


def serving_pid(workdir):
    """The pid of the agent serving ``workdir``, or None (its lock is free)."""
    p = paths(workdir)
    try:
        fd = os.open(p["serve.lock"], os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        try:
            with open(p["serve.pid"]) as f:
                return int(f.read().strip() or 0) or -1
        except (OSError, ValueError):
            return -1
    finally:
        os.close(fd)
    return None


def rows_between(results, start, end=None):
    """(header, rows) of the results file's whole rows in bytes [start, end)."""
    try:
        with open(results, "rb") as f:
            header = next(csv.reader(io.StringIO(f.readline().decode())), [])
            start = max(start, f.tell())  # a round that began on an empty file: no header row
            f.seek(start)
            data = f.read() if end is None else f.read(max(0, end - start))
    except OSError:
        return [], []
    return header, _whole_rows(data, header)


def rows_in_spans(results, spans):
    """(header, rows) of the results file's rows in the byte ranges ``spans`` ([[start, end],
    ...]: a round of a stream, whose rows lie between other rounds')."""
    try:
        with open(results, "rb") as f:
            header = next(csv.reader(io.StringIO(f.readline().decode())), [])
            rows = []
            for start, end in spans:
                f.seek(start)
                rows += _whole_rows(f.read(max(0, end - start)), header)
    except OSError:
        return [], []
    return header, rows


def _whole_rows(data, header):
    text = data.decode(errors="replace")
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]  # a torn last line is no row
    return [r for r in csv.reader(io.StringIO(text)) if len(r) == len(header)]


class RoundAgent(Agent):
    """The Agent's job loop on a round's manifest (not the bundle's manifest.json)."""

    def __init__(self, bundle, results_path, manifest, options, out, log):
        self.bundle = os.path.abspath(bundle)
        self.results_path = results_path
        self.options = options
        self.out = out
        self.log = log
        bundlecheck.check_manifest_paths(self.bundle, manifest)
        self.manifest = manifest
        import socket

        self.host = socket.gethostname()
        self.selected = None
        self.round = None
        options.scratch_dir = os.path.dirname(os.path.abspath(results_path))

    def _progress(self, done, total, status, variant=None, shape=None):
        info = {"round": self.round, "done": done, "total": total, "status": status, "variant": variant,
                "shape": shape}
        self.out.write(contract.PROGRESS_PREFIX + json.dumps(info) + "\n")
        self.out.flush()


class Server(object):
    def __init__(self, workdir, idle_timeout=600.0, poll=0.02, out=sys.stdout, log=None, standby=None):
        self.workdir = workdir
        self.standby = standby  # "cuda[:0,1]": start the GPU workers before the first round
        self.standbys = None
        self.p = paths(workdir)
        self.idle_timeout = idle_timeout
        self.poll = poll
        self.out = out
        self.log = log or _log_line
        self.runners = {}  # (bundle, results, devices, profiler) -> GPU runner
        self.locks = {}  # results path -> the results lock, held while serving

    def serve(self):
        os.makedirs(self.p["queue"], exist_ok=True)
        lock = open(self.p["serve.lock"], "a")
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise AgentError("an agent already serves %s" % self.workdir)
        write_json(self.p["serve.pid"], os.getpid())
        self.log("serving %s (pid %d)" % (self.workdir, os.getpid()))
        if self.standby:
            from .runners.gpu_standby import Standbys, parse_spec

            self.standbys = Standbys(*parse_spec(self.standby), log=self.log)
        last = time.monotonic()
        try:
            while not os.path.exists(self.p["stop"]):
                todo = pending_rounds(self.p["queue"])
                if not todo:
                    if time.monotonic() - last > self.idle_timeout:
                        self.log("idle for %gs; stopping" % self.idle_timeout)
                        break
                    time.sleep(self.poll)
                    continue
                if self.run_round(todo[0]):
                    last = time.monotonic()
                else:
                    time.sleep(self.poll)  # still being written
        finally:
            for runner in self.runners.values():
                runner.close()
            if self.standbys is not None:
                self.standbys.close()
            for f in self.locks.values():
                f.close()
            lock.close()
        return 0

    def run_round(self, name):
        """Run one round; False when its file is not whole yet."""
        files = round_files(self.p["queue"], name)
        try:
            spec = read_json(files["json"])
        except ValueError:
            return False
        options = types.SimpleNamespace(**dict(RUN_DEFAULTS, **spec.get("options", {})))
        bundle, results = spec["bundle"], spec["results"]
        manifest = spec["manifest"]
        if manifest.get("schema_version") != contract.MANIFEST_SCHEMA:
            raise AgentError("round %s: manifest schema %s, this agent reads %s"
                             % (name, manifest.get("schema_version"), contract.MANIFEST_SCHEMA))
        limits.check_manifest(manifest, "round %s" % name)  # sizes before anything runs
        self._lock_results(results)
        if os.path.exists(results) and not os.path.exists(files["start"]):
            _drop_torn_tail(results)
        if streams(spec):
            return self._run_stream(name, spec, options)
        offset, skip = self._begin(name, results)
        start = time.monotonic()
        agent = RoundAgent(bundle, results, manifest, options, self.out, self.log)
        agent.round = name
        runner = self._runner(agent, options)
        busy_before = dict(getattr(getattr(runner, "_supervisor", None), "busy", {}) or {})
        try:
            agent._run(runner, skip)
        except ResultsWriteError as exc:
            raise AgentError(str(exc))
        finally:
            if not getattr(runner, "keep_workers", False) and hasattr(runner, "close"):
                runner.close()
        sup = getattr(runner, "_supervisor", None)
        busy = {d: round(s - busy_before.get(d, 0.0), 4) for d, s in (getattr(sup, "busy", {}) or {}).items()}
        if sup is not None:  # every device of the runner, the idle ones too (a worker slow to start)
            busy = dict({d: 0.0 for d in runner.devices()}, **busy)
        end = os.path.getsize(results) if os.path.exists(results) else 0
        _, rows = rows_between(results, offset, end)
        write_json(files["done"], {"offset": offset, "end": end, "rows": len(rows),
                                   "seconds": round(time.monotonic() - start, 4), "busy": busy,
                                   "devices": runner.devices()})
        return True

    def _begin(self, name, results):
        """(offset, skip) of a round starting now, its ``.start`` written; a round restarted
        after a kill keeps its offset and skips the jobs that have rows past it."""
        files = round_files(self.p["queue"], name)
        if os.path.exists(files["start"]):  # resumed after a kill: its measured jobs stay measured
            offset = read_json(files["start"])["offset"]
            skip = _job_keys(*rows_between(results, offset))
            self.log("round %s resumed: %d jobs already have rows" % (name, len(skip)))
            return offset, skip
        offset = os.path.getsize(results) if os.path.exists(results) else 0
        write_json(files["start"], {"offset": offset})
        return offset, set()

    def _begin_in_stream(self, name, results):
        """(offset, skip, spans) of a round joining a stream: a resumed one skips the jobs whose
        rows its ``.rows`` lists (other rounds' rows lie past its offset too)."""
        files = round_files(self.p["queue"], name)
        if not os.path.exists(files["start"]):
            return self._begin(name, results) + ([],)
        offset = read_json(files["start"])["offset"]
        spans = read_spans(files["rows"])
        skip = _job_keys(*rows_in_spans(results, spans))
        self.log("round %s resumed: %d jobs already have rows" % (name, len(skip)))
        return offset, skip, spans

    def _run_stream(self, name, spec, options):
        """A GPU round and every round queued after it that can join (same bundle, results,
        devices and profiler), measured as one run of the workers: a device that finishes its
        jobs takes the next round's instead of waiting for the round's slowest job. Each
        round's ``.done`` is written when its own jobs are done."""
        agent = RoundAgent(spec["bundle"], spec["results"], spec["manifest"], options, self.out, self.log)
        agent.round = name
        agent._verify_data()
        runner = self._runner(agent, options)
        try:
            writer = ResultsWriter(spec["results"], agent.header(runner))
        except SchemaMismatch as exc:
            raise AgentError(str(exc))
        stream = Stream(self, runner, writer, spec)
        stream.first = stream.join(name, spec, agent)
        try:
            for job, device, result in runner.run_all([], {}, {}, {}, options, more=stream.more):
                stream.on_result(job, device, result)
        except ResultsWriteError as exc:
            raise AgentError(str(exc))
        finally:
            writer.close()
        return True

    def _lock_results(self, results):
        """Hold the results file's lock while serving: no ``run`` may write it meanwhile."""
        key = os.path.abspath(results)
        if key in self.locks:
            return
        os.makedirs(os.path.dirname(key), exist_ok=True)
        f = open(key + ".lock", "a")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise AgentError("another run is already writing %s; wait for it or stop it first" % results)
        self.locks[key] = f

    def _runner(self, agent, options):
        """GPU: one runner per bundle, devices and profiler whose workers stay up between rounds
        (each job carries its round's timing options); CPU: a fresh runner (one process per job
        anyway)."""
        manifest = agent.manifest
        if manifest["target"]["backend"] == "cpu":
            return make_runner(agent.bundle, manifest, options, self.log)
        key = (agent.bundle, os.path.abspath(agent.results_path), options.devices, options.profiler)
        runner = self.runners.get(key)
        if runner is None:
            runner = self.runners[key] = make_runner(agent.bundle, manifest, options, self.log)
            runner.keep_workers = True
            runner.standbys = self.standbys
        runner.manifest, runner.options = manifest, options
        return runner


def streams(spec):
    """Whether a round is measured as part of a stream of rounds (a GPU round)."""
    return spec["manifest"]["target"]["backend"] != "cpu"


# a round's options that may differ from the stream's: each job carries them to its worker
TIMING_OPTIONS = ("warmup", "iters", "min_time_ms", "max_noise", "max_time", "estimator")


class Stream(object):
    """Rounds measured together by one GPU runner (``Server._run_stream``): the rows of all go
    to one writer as they finish; a round is done when its own jobs are. Its ``.done`` tells the
    host which rows are its (``spans``: rows of other rounds lie in between, maybe of the same
    pairs, as a winners' re-measure's rounds), and the seconds and device busy seconds since the
    last ``.done`` of the stream (so that summed over the rounds they count each second once)."""

    def __init__(self, server, runner, writer, spec):
        self.server = server
        self.runner = runner
        self.writer = writer
        self.spec = spec  # the first round's: a round joins when its bundle, results, devices and profiler match
        self.rounds = {}  # name -> the state of a round in the stream
        self.owner = {}  # id(job) -> round name
        self.joined = []  # names, in order
        self.first = []
        self.closed = False
        self.mark = (time.monotonic(), self._busy())
        self.polled = 0.0

    def _busy(self):
        return dict(getattr(getattr(self.runner, "_supervisor", None), "busy", {}) or {})

    def join(self, name, spec, agent):
        """Add round ``name``: record its unrunnable rows; returns its requests for the workers
        (with its timing options, and its device where the round is pinned)."""
        offset, skip, spans = self.server._begin_in_stream(name, spec["results"])
        self.runner.manifest, self.runner.options = spec["manifest"], agent.options
        state = {"name": name, "agent": agent, "offset": offset, "spans": list(spans),
                 "rows_file": round_files(self.server.p["queue"], name)["rows"], "start": time.monotonic(),
                 "done": 0}
        before = self.writer.size()
        todo, variants, shapes, broken = agent.prepare(self.runner, self.writer, skip)
        self._wrote(state, before)  # the rows of pairs that cannot run (pruned, failed compiles)
        requests, unrunnable = self.runner.requests_for(todo, variants, shapes, broken)
        only, place = pinned_devices(self.runner.devices(), spec.get("pin"))
        for _, request in requests:  # a pinned round's jobs carry their device
            request["device"] = place.get(request["shape"]["id"]) if place else (only[0] if only else None)
        state.update(variants=variants, shapes=shapes, left=len(requests), total=len(requests) + len(unrunnable))
        self.rounds[name] = state
        self.joined.append(name)
        agent._progress(0, state["total"], None)
        for job, device, result in unrunnable:
            self._write(state, job, device, result)
        for job, _ in requests:
            self.owner[id(job)] = name
        if not state["left"]:
            self._finish(state)
        return requests

    def on_result(self, job, device, result):
        state = self.rounds[self.owner.pop(id(job))]
        state["left"] -= 1
        self._write(state, job, device, result)
        if not state["left"]:
            self._finish(state)

    def _write(self, state, job, device, result):
        before = self.writer.size()
        state["agent"].write_result(self.writer, self.runner, state["variants"], state["shapes"], job, device, result)
        self._wrote(state, before)
        state["done"] += 1
        state["agent"]._progress(state["done"], state["total"], result["status"], job["variant"], job["shape"])

    def _wrote(self, state, before):
        """Record the bytes written since ``before`` as the round's (in memory and in its
        ``.rows``, so that the round resumed after a kill knows them)."""
        after = self.writer.size()
        if after > before:
            state["spans"].append([before, after])
            with open(state["rows_file"], "a") as f:
                f.write("%d %d\n" % (before, after))

    def _finish(self, state):
        files = round_files(self.server.p["queue"], state["name"])
        now, busy = time.monotonic(), self._busy()
        since, busy_then = self.mark
        self.mark = (now, busy)
        results = self.spec["results"]
        end = os.path.getsize(results) if os.path.exists(results) else 0
        _, rows = rows_in_spans(results, state["spans"])
        spent = dict({d: 0.0 for d in self.runner.devices()},
                     **{d: round(b - busy_then.get(d, 0.0), 4) for d, b in busy.items()})
        write_json(files["done"], {"offset": state["offset"], "end": end, "rows": len(rows),
                                   "seconds": round(now - max(state["start"], since), 4), "busy": spent,
                                   "devices": self.runner.devices(), "spans": state["spans"]})
        del self.rounds[state["name"]]

    def more(self):
        """The requests of the next rounds queued that may join (in name order; one that may
        not ends the stream once its jobs are done, and is run on its own next)."""
        if self.first:
            first, self.first = self.first, []
            return first
        now = time.monotonic()
        if self.closed or now - self.polled < MORE_POLL:
            return []
        self.polled = now
        if os.path.exists(self.server.p["stop"]):
            return []
        out = []
        for name in pending_rounds(self.server.p["queue"]):
            if name in self.joined:
                continue
            try:
                spec = read_json(round_files(self.server.p["queue"], name)["json"])
            except ValueError:
                break  # still being written: asked again at the next poll
            if not self._may_join(spec):
                self.closed = True
                break
            options = types.SimpleNamespace(**dict(RUN_DEFAULTS, **spec.get("options", {})))
            try:
                agent = RoundAgent(spec["bundle"], spec["results"], spec["manifest"], options, self.server.out,
                                   self.server.log)
                agent._verify_data()
            except AgentError:  # run on its own next, where its error is reported as for any round
                self.closed = True
                break
            agent.round = name
            if agent.header(self.runner) != self.writer.header:
                self.closed = True
                break
            out += self.join(name, spec, agent)
        return out

    def _may_join(self, spec):
        first = self.spec
        return (streams(spec) and spec.get("manifest", {}).get("schema_version") == contract.MANIFEST_SCHEMA
                and os.path.abspath(spec["bundle"]) == os.path.abspath(first["bundle"])
                and os.path.abspath(spec["results"]) == os.path.abspath(first["results"])
                and _untimed(spec.get("options", {})) == _untimed(first.get("options", {})))


def _untimed(options):
    """A round's options less its timing (which its jobs carry): what the stream's runner is for."""
    return {k: v for k, v in options.items() if k not in TIMING_OPTIONS}


MORE_POLL = 0.02  # seconds between looks at the queue while a device waits for work


def pinned_devices(devices, pin):
    """(only, place) of a round on a GPU stream: ``pin`` false: any job on any device; true:
    every job on the first device; {shape id: slot}: each shape's jobs on device ``slot`` modulo
    the devices (a winners' re-measure spread over the devices, a shape's candidates on one)."""
    if isinstance(pin, dict) and pin and devices:
        return None, {sid: devices[int(slot) % len(devices)] for sid, slot in pin.items()}
    return (devices[:1] if pin else None), None


# ---- the host's side of the files ------------------------------------------------------------------
def start_detached(argv, workdir, clear=False, wait=30.0, out=sys.stdout):
    """Start ``serve`` in its own session (log: serve.log) unless one serves ``workdir``; return
    once it serves. ``clear``: drop the rounds of earlier sessions first (when none serves)."""
    p = paths(workdir)
    os.makedirs(workdir, exist_ok=True)
    pid = serving_pid(workdir)
    if pid:
        out.write("agent: serving %s already (pid %d)\n" % (workdir, pid))
        return 0
    if os.path.exists(p["stop"]):
        os.unlink(p["stop"])
    if clear and os.path.isdir(p["queue"]):
        for n in os.listdir(p["queue"]):
            os.unlink(os.path.join(p["queue"], n))
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            log_fd = os.open(p["serve.log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            devnull = os.open(os.devnull, os.O_RDONLY)
            subprocess.Popen([sys.executable, "-B", "-u", "-m", "remote_agent", "serve"] + list(argv),
                             stdin=devnull, stdout=log_fd, stderr=log_fd, close_fds=True)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        pid = serving_pid(workdir)
        if pid and pid > 0:
            out.write("agent: serving %s (pid %d)\n" % (workdir, pid))
            return 0
        time.sleep(0.02)
    raise AgentError("the serving agent did not start within %gs; see %s" % (wait, p["serve.log"]))


ALIVE_EVERY = 0.25  # seconds between a round's waiter's looks at whether an agent still serves


def wait_round(workdir, name, timeout=None, poll=0.02):
    """Wait for round ``name``: {"done", "header", "rows"} (its rows), or {"gone": log tail} when
    no agent serves and the round is not done (the host restarts it), or {"timeout": true}."""
    p = paths(workdir)
    files = round_files(p["queue"], name)
    deadline = None if timeout is None else time.monotonic() + timeout
    alive_until = 0.0  # the agent's lock is looked at this often, not at every poll: a tune waits on
    # up to forty rounds at once, each in a thread of the host's one interpreter
    while not os.path.exists(files["done"]):
        now = time.monotonic()
        if now >= alive_until:
            if serving_pid(workdir) is None and not os.path.exists(files["done"]):
                return {"gone": _tail(p["serve.log"]) or "no log"}
            alive_until = now + ALIVE_EVERY
        if deadline is not None and now > deadline:
            return {"timeout": True}
        time.sleep(poll)
    done = read_json(files["done"])
    spec = read_json(files["json"])
    if "spans" in done:
        header, rows = rows_in_spans(spec["results"], done["spans"])
    else:
        header, rows = rows_between(spec["results"], done["offset"], done["end"])
    return {"done": done, "header": header, "rows": rows}


def bridge(workdir, idle_timeout, infile=sys.stdin, outfile=sys.stdout):
    """The host's one SSH channel to a serving agent for a whole tune (so that a round costs no
    SSH command): JSON requests in, one JSON reply per request out, each with the request's id.
      {"op": "start", "clear", "standby"}   start the serving agent unless one serves -> {"pid"}
      {"op": "files", "files": {path: [base64, mode]}}   write files (relative, no '..')
      {"op": "round", "name", "spec"}            queue a round
      {"op": "wait", "name"}       -> wait_round's reply, when the round is done (requests
                                      that follow are served meanwhile)
      {"op": "stop"}               the agent finishes its round and exits
    The serving agent is a process of its own: a dropped channel ends only the bridge."""
    import base64
    import threading

    lock = threading.Lock()

    def reply(message):
        with lock:
            outfile.write(json.dumps(message) + "\n")
            outfile.flush()

    def waiter(rid, name):
        reply(dict(wait_round(workdir, name), id=rid))

    for line in infile:
        if not line.strip():
            continue
        request = json.loads(line)
        rid, op = request.get("id"), request.get("op")
        try:
            if op == "start":
                argv = ["--workdir", workdir, "--idle-timeout", str(idle_timeout)] + \
                    (["--standby", str(request["standby"])] if request.get("standby") else [])
                start_detached(argv, workdir, clear=request.get("clear"), out=io.StringIO())
                reply({"id": rid, "pid": serving_pid(workdir)})
            elif op == "files":
                for rel, (data, mode) in request["files"].items():
                    _write_file(rel, base64.b64decode(data), mode)
                reply({"id": rid})
            elif op == "round":
                os.makedirs(paths(workdir)["queue"], exist_ok=True)
                write_json(round_files(paths(workdir)["queue"], request["name"])["json"], request["spec"])
                reply({"id": rid})
            elif op == "wait":
                threading.Thread(target=waiter, args=(rid, request["name"]), daemon=True).start()
            elif op == "stop":
                open(paths(workdir)["stop"], "a").close()
                reply({"id": rid})
            else:
                reply({"id": rid, "error": "unknown op %r" % op})
        except (AgentError, OSError, ValueError, KeyError) as exc:
            reply({"id": rid, "error": str(exc)})
    return 0


def _write_file(rel, data, mode):
    if os.path.isabs(rel) or ".." in rel.split("/"):
        raise ValueError("refusing to write %r: absolute or '..' path" % rel)
    parent = os.path.dirname(rel)
    if parent:
        os.makedirs(parent, exist_ok=True)
    tmp = "%s.part%d" % (rel, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, int(mode) & 0o755)
    os.replace(tmp, rel)


def _tail(path, lines=3):
    try:
        with open(path) as f:
            text = f.read()[-4000:]
    except OSError:
        return ""
    return " | ".join(l for l in text.splitlines()[-lines:] if l.strip())


def main(args):
    if args.command == "bridge":
        return bridge(args.workdir, args.idle_timeout)
    argv = ["--workdir", args.workdir, "--idle-timeout", str(args.idle_timeout)] + \
        (["--standby", args.standby] if args.standby else [])
    if args.standby:
        from .runners.gpu_standby import parse_spec

        try:
            parse_spec(args.standby)
        except ValueError as exc:
            raise AgentError(str(exc))
    if args.detach:
        return start_detached(argv, args.workdir, clear=args.clear)
    return Server(args.workdir, args.idle_timeout, standby=args.standby).serve()


def add_arguments(sub):
    serve = sub.add_parser("serve", help="stay up across rounds, taking them from WORKDIR/queue/")
    serve.add_argument("--workdir", required=True, help="folder with queue/ (created)")
    serve.add_argument("--idle-timeout", type=float, default=600.0, help="exit after this many idle seconds")
    serve.add_argument("--detach", action="store_true", help="start in its own session and return")
    serve.add_argument("--clear", action="store_true", help="with --detach: drop earlier rounds when none serves")
    serve.add_argument("--standby", help="cuda or hip[:INDICES]: start a GPU worker per device now, before the "
                                         "first round (its driver and torch loaded while the host builds)")
    bridge = sub.add_parser("bridge", help="JSON requests on stdin for a serving agent (the host's channel)")
    bridge.add_argument("--workdir", required=True)
    bridge.add_argument("--idle-timeout", type=float, default=600.0, help="for the agent it starts")
