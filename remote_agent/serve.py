"""The long-lived agent of a tune: ``python3 -m remote_agent serve --workdir W`` stays up across
rounds and takes each round from a queue folder, so a round pays neither a new agent process
nor new GPU workers (their contexts, loaded modules and device test data stay).

Files under W (the host writes ``queue/*.json``; everything else is the agent's):
  queue/NAME.json     a round: {"bundle", "results", "manifest", "options", "pin"}; the manifest
                      holds only the round's variants and jobs. Rounds run one at a time in name
                      order (the host names them <session>-<number>, both zero-padded); paths are
                      relative to the agent's folder or absolute. A file that does not parse yet
                      is still being written: it is read again.
  queue/NAME.start    {"offset"}: the size of the results file when the round began. An agent
                      restarted mid-round resumes it and skips the jobs whose rows lie past it.
  queue/NAME.done     {"offset", "end", "rows", "seconds", "busy": {device: s}, "devices"}:
                      the round's rows are the results file's bytes [offset, end).
  stop                the agent finishes the round in progress and exits.
  serve.lock          held (flock) while an agent serves W; serve.pid, serve.log.

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

from . import bundlecheck, contract
from .agent import Agent, AgentError, make_runner
from .results import ResultsWriteError, _drop_torn_tail

RUN_DEFAULTS = {"warmup": 2, "iters": 10, "timeout": 60.0, "rerun_all": True, "profiler": None,
                "run_under": None, "devices": None, "min_time_ms": 100.0, "select": None}


def paths(workdir):
    return {name: os.path.join(workdir, name) for name in ("queue", "stop", "serve.lock", "serve.pid", "serve.log")}


def round_files(queue, name):
    base = os.path.join(queue, name)
    return {ext: base + "." + ext for ext in ("json", "start", "done")}


def write_json(path, data):
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def read_json(path):
    with open(path) as f:
        return json.load(f)


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
    text = data.decode(errors="replace")
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]  # a torn last line is no row
    rows = [r for r in csv.reader(io.StringIO(text)) if len(r) == len(header)]
    return header, rows


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
    def __init__(self, workdir, idle_timeout=600.0, poll=0.02, out=sys.stdout, log=None):
        self.workdir = workdir
        self.p = paths(workdir)
        self.idle_timeout = idle_timeout
        self.poll = poll
        self.out = out
        self.log = log or (lambda msg: print("agent: " + msg, file=sys.stderr, flush=True))
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
        self._lock_results(results)
        if os.path.exists(files["start"]):  # resumed after a kill: its measured jobs stay measured
            offset = read_json(files["start"])["offset"]
            header, rows = rows_between(results, offset)
            idx = {name: i for i, name in enumerate(header)}
            skip = {contract.job_key(r[idx["variant_id"]], r[idx["shape_id"]], r[idx["device"]]) for r in rows}
            self.log("round %s resumed: %d jobs already have rows" % (name, len(skip)))
        else:
            if os.path.exists(results):
                _drop_torn_tail(results)
            offset = os.path.getsize(results) if os.path.exists(results) else 0
            write_json(files["start"], {"offset": offset})
            skip = set()
        start = time.monotonic()
        agent = RoundAgent(bundle, results, manifest, options, self.out, self.log)
        agent.round = name
        runner = self._runner(agent, options, spec.get("pin"))
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
        end = os.path.getsize(results) if os.path.exists(results) else 0
        _, rows = rows_between(results, offset, end)
        write_json(files["done"], {"offset": offset, "end": end, "rows": len(rows),
                                   "seconds": round(time.monotonic() - start, 4), "busy": busy,
                                   "devices": runner.devices()})
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

    def _runner(self, agent, options, pin):
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
        runner.manifest, runner.options = manifest, options
        runner.only = runner.devices()[:1] if pin else None
        return runner


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


def wait_round(workdir, name, timeout=None, poll=0.02):
    """Wait for round ``name``: {"done", "header", "rows"} (its rows), or {"gone": log tail} when
    no agent serves and the round is not done (the host restarts it), or {"timeout": true}."""
    p = paths(workdir)
    files = round_files(p["queue"], name)
    deadline = None if timeout is None else time.monotonic() + timeout
    while not os.path.exists(files["done"]):
        if serving_pid(workdir) is None and not os.path.exists(files["done"]):
            return {"gone": _tail(p["serve.log"]) or "no log"}
        if deadline is not None and time.monotonic() > deadline:
            return {"timeout": True}
        time.sleep(poll)
    done = read_json(files["done"])
    spec = read_json(files["json"])
    header, rows = rows_between(spec["results"], done["offset"], done["end"])
    return {"done": done, "header": header, "rows": rows}


def bridge(workdir, idle_timeout, infile=sys.stdin, outfile=sys.stdout):
    """The host's one SSH channel to a serving agent for a whole tune (so that a round costs no
    SSH command): JSON requests in, one JSON reply per request out, each with the request's id.
      {"op": "start", "clear"}     start the serving agent unless one serves -> {"pid"}
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
                argv = ["--workdir", workdir, "--idle-timeout", str(idle_timeout)]
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
    argv = ["--workdir", args.workdir, "--idle-timeout", str(args.idle_timeout)]
    if args.detach:
        return start_detached(argv, args.workdir, clear=args.clear)
    return Server(args.workdir, args.idle_timeout).serve()


def add_arguments(sub):
    serve = sub.add_parser("serve", help="stay up across rounds, taking them from WORKDIR/queue/")
    serve.add_argument("--workdir", required=True, help="folder with queue/ (created)")
    serve.add_argument("--idle-timeout", type=float, default=600.0, help="exit after this many idle seconds")
    serve.add_argument("--detach", action="store_true", help="start in its own session and return")
    serve.add_argument("--clear", action="store_true", help="with --detach: drop earlier rounds when none serves")
    bridge = sub.add_parser("bridge", help="JSON requests on stdin for a serving agent (the host's channel)")
    bridge.add_argument("--workdir", required=True)
    bridge.add_argument("--idle-timeout", type=float, default=600.0, help="for the agent it starts")
