"""Detached runs: the agent runs in its own session with a pid file and a log, so a dropped
SSH connection does not stop it. ``start`` launches it (or attaches to the one running) and
follows its log; ``follow`` re-attaches; ``status`` says how far it is.

Files beside the results CSV: ``agent.pid``, ``agent.log`` (progress lines and messages),
``agent.exit`` (the exit code, written when the run ends).
"""

import json
import os
import subprocess
import sys
import time

from . import bundlecheck, contract


def paths(results):
    base = os.path.dirname(os.path.abspath(results))
    return {name: os.path.join(base, "agent." + name) for name in ("pid", "log", "exit")}


def running_pid(results):
    """The pid of a live agent writing these results, or None."""
    p = paths(results)
    try:
        with open(p["pid"]) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return None
    if pid <= 0 or os.path.exists(p["exit"]):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def start(run_argv, results, out=sys.stdout):
    """Start ``python -m remote_agent run ...`` detached unless one runs; then follow it."""
    pid = running_pid(results)
    if pid:
        out.write("agent: attaching to the run in progress (pid %d)\n" % pid)
        out.flush()
        return follow(results, out)
    p = paths(results)
    bundlecheck.require_room(os.path.dirname(p["log"]), bundlecheck.START_ROOM)  # before any file is written
    for name in ("exit",):
        if os.path.exists(p[name]):
            os.unlink(p[name])
    log = open(p["log"], "w")
    log.close()
    child = os.fork()
    if child == 0:  # first child: new session, start the agent, exit (the agent is orphaned)
        try:
            os.setsid()
            log_fd = os.open(p["log"], os.O_WRONLY | os.O_APPEND)
            devnull = os.open(os.devnull, os.O_RDONLY)
            # the wrapper records the agent's exit code, unless another run took the pid file
            wrapper = ("import os, subprocess, sys\n"
                       "rc = subprocess.call(sys.argv[3:])\n"
                       "mine = open(sys.argv[2]).read().strip() == str(os.getpid())\n"
                       "if mine:\n"
                       "    open(sys.argv[1] + '.tmp', 'w').write(str(rc))\n"
                       "    os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n")
            # -B: no .pyc is written (one cut short by a full disk would stop every later run)
            proc = subprocess.Popen([sys.executable, "-B", "-c", wrapper, p["exit"], p["pid"], sys.executable, "-B",
                                     "-u", "-m", "remote_agent", "run"] + list(run_argv),
                                    stdin=devnull, stdout=log_fd, stderr=log_fd, close_fds=True)
            with open(p["pid"] + ".tmp", "w") as f:
                f.write(str(proc.pid))
            os.replace(p["pid"] + ".tmp", p["pid"])
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    return follow(results, out)


def follow(results, out=sys.stdout, poll=0.1):
    """Print the log as it grows until the run ends; returns the agent's exit code."""
    p = paths(results)
    position = 0
    while True:
        try:
            with open(p["log"]) as f:
                f.seek(position)
                chunk = f.read()
                position = f.tell()
        except OSError:
            chunk = ""
        if chunk:
            out.write(chunk)
            out.flush()
        if os.path.exists(p["exit"]):
            with open(p["log"]) as f:
                f.seek(position)
                rest = f.read()
            if rest:
                out.write(rest)
                out.flush()
            with open(p["exit"]) as f:
                return int(f.read().strip() or 1)
        if not chunk:
            if running_pid(results) is None and not os.path.exists(p["exit"]):
                time.sleep(poll)
                if running_pid(results) is None and not os.path.exists(p["exit"]):
                    out.write("agent: the run stopped without an exit code (killed?); run again to resume\n")
                    return 3
            time.sleep(poll)


def status(results):
    """A dict: running, pid, done, total, last status, rows in the results file."""
    p = paths(results)
    info = {"running": False, "pid": None, "done": None, "total": None, "exit": None, "rows": 0}
    pid = running_pid(results)
    info["running"], info["pid"] = pid is not None, pid
    try:
        with open(p["log"]) as f:
            for line in f:
                if line.startswith(contract.PROGRESS_PREFIX):
                    try:
                        last = json.loads(line[len(contract.PROGRESS_PREFIX):])
                        info["done"], info["total"] = last["done"], last["total"]
                    except (ValueError, KeyError, TypeError):
                        continue  # a line cut short (a full disk): the one before stands
    except OSError:
        pass
    if os.path.exists(p["exit"]):
        with open(p["exit"]) as f:
            info["exit"] = int(f.read().strip() or 1)
    if os.path.exists(results):
        with open(results) as f:
            info["rows"] = max(0, sum(1 for _ in f) - 1)
    return info
