"""The compile workers' zygote: one process per worker key that imports the compile module once
and forks the workers (harness/compile/workers.py asks it for each new worker).

On a busy 64-core node a worker's Triton import took 2 to 3 s, and a tune starts up to 64
workers at once, so its first compiles waited seconds on imports. So each worker key (module and
environment) has one zygote, ``python -m harness.compile.zygote MODULE FD``: it imports MODULE,
calls ``MODULE.preload()`` where MODULE has one (Triton's lazy imports and cached work), checks
that it has no thread (a fork copies only the forking thread), then forks a worker per request
on a Unix socket pair. A request carries the worker's Triton cache folder and three descriptors
(its stdin pipe, its stdout pipe, its stderr file); the child makes its own session, puts them
on 0, 1 and 2, closes every other descriptor and runs ``serve`` as a worker started by ``Popen``
does. The zygote changes no signal disposition, so its children have a fresh interpreter's.

Exit status. The harness is not a forked worker's parent: ``ForkedProcess`` (the parts of
``Popen`` that ``Worker`` uses) sees the worker exit on a pidfd the zygote sends with the fork's
reply, then asks the zygote for its exit status (negative for a signal, as ``Popen`` gives it).
The zygote reaps a child only when asked, so a worker's pid is not reused while the harness may
still kill its process group, as with a child of its own.

Fallback. Where the zygote cannot start or answer (no ``fork``, ``socket.send_fds`` or
``os.pidfd_open``, a MODULE that fails to import or starts a thread, a zygote that died), the
worker is started with ``Popen`` as it was before the zygote. A zygote that died is started again
once, on the next worker start; after that its key's workers all use ``Popen``. A zygote's
failure never fails a compile. ``HARNESS_COMPILE_ZYGOTE=0`` turns the zygote off.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from .worker_loop import lower_priority, serve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_lock = threading.Lock()
_zygotes: dict = {}  # worker key -> Zygote (None where it could not start)
_zygote_starts: dict = {}  # worker key -> zygotes started (a dead one is started again once)
ZYGOTE_STARTS = 2  # the first zygote and one restart
ZYGOTE_IMPORT_TIMEOUT = 60.0  # s: its first answer waits for MODULE's import (2-3 s on a busy node)
ZYGOTE_REPLY_TIMEOUT = 20.0  # s: a later answer (a fork or an exit status)
LOST_STATUS = 255  # a forked worker's exit status once its zygote is gone (it alone could reap it)


def with_root(env: dict) -> dict:
    """``env`` with this checkout first on PYTHONPATH (a worker imports harness from it)."""
    env = dict(env)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _zygote_supported() -> bool:
    """Whether this platform has what a zygote needs (a kernel without pidfds: the zygote says so)."""
    return (hasattr(os, "fork") and hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")
            and hasattr(socket, "SOCK_SEQPACKET"))


def _zygote_possible() -> bool:
    """Whether zygotes are on (``HARNESS_COMPILE_ZYGOTE=0``: off) and the platform allows them."""
    return os.environ.get("HARNESS_COMPILE_ZYGOTE", "1") != "0" and _zygote_supported()


def zygote_for(key: tuple):
    """The key's running zygote, started (or started again, once) where it has none; None where
    zygotes are off or it cannot start."""
    if not _zygote_possible():
        return None
    module, env = key[0], dict(key[1])
    with _lock:
        old = _zygotes.get(key)
        if old is not None and old.alive():
            return old
        if _zygote_starts.get(key, 0) >= ZYGOTE_STARTS:
            return None
        _zygote_starts[key] = _zygote_starts.get(key, 0) + 1
        try:
            zygote = Zygote(module, env)
        except OSError:
            zygote = None
        _zygotes[key] = zygote
    if old is not None:
        old.close()
    return zygote


class Zygote:
    """The harness's end of one zygote: its process and the socket its requests go through, one
    request and reply at a time (``run_job`` runs in many threads). A request it does not answer
    in time, or answers with an end of file, stops it for good (the key may start another)."""

    def __init__(self, module: str, env: dict):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.errors = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.compile.zygote", module, str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.errors, env=with_root(env),
                pass_fds=(theirs.fileno(),), start_new_session=True)
        except OSError:
            self.sock.close()
            self.errors.close()
            raise
        finally:
            theirs.close()
        self.lock = threading.Lock()
        self.ready = False  # answered once: MODULE imported
        self.stopped = False

    def alive(self) -> bool:
        return not self.stopped and self.proc.poll() is None

    def fork(self, cache: str, stderr):
        """A new worker (``ForkedProcess``) with Triton cache folder ``cache`` and stderr file
        ``stderr``; None where the zygote could not make one."""
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            reply = self._ask({"op": "fork", "cache": cache}, (stdin_r, stdout_w, stderr.fileno()))
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        if reply is None or "pid" not in reply[0] or len(reply[1]) != 1:
            for fd in [stdin_w, stdout_r] + (reply[1] if reply else []):
                os.close(fd)
            return None
        return ForkedProcess(reply[0]["pid"], reply[1][0], os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb"), self)

    def exit_code(self, pid: int):
        """The exit status of forked worker ``pid`` (which the zygote reaps now), None while it
        runs, ``LOST_STATUS`` where the zygote is gone."""
        reply = self._ask({"op": "status", "pid": pid})
        if reply is None:
            return LOST_STATUS
        for fd in reply[1]:
            os.close(fd)
        return reply[0].get("code")

    def _ask(self, request: dict, fds=()):
        """One request and its reply: (JSON, descriptors it carried), or None where the zygote did
        not answer (it is then stopped)."""
        with self.lock:
            if self.stopped:
                return None
            try:
                self.sock.settimeout(ZYGOTE_REPLY_TIMEOUT if self.ready else ZYGOTE_IMPORT_TIMEOUT)
                socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
                data, got, _, _ = socket.recv_fds(self.sock, 1 << 16, 4)
            except OSError:  # a timeout too
                data, got = b"", []
            if not data:
                for fd in got:
                    os.close(fd)
                self._stop()
                return None
            self.ready = True
            return json.loads(data.decode()), got

    def _stop(self) -> None:
        """Stop it now (called with its lock held)."""
        self.stopped = True
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.errors.close()

    def close(self) -> None:
        """Stop it: an end of file on its socket ends it (a request in flight is answered with an
        end of file too)."""
        self.stopped = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        with self.lock:
            self.sock.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.errors.close()


class ForkedProcess:
    """The parts of ``Popen`` a ``Worker`` uses, for a worker its zygote forked: ``pid``,
    ``stdin``, ``stdout``, ``returncode``, ``poll()`` and ``wait(timeout)``. Its exit is seen on
    ``pidfd``; its exit status comes from the zygote, its parent."""

    def __init__(self, pid: int, pidfd: int, stdin, stdout, zygote: Zygote):
        self.pid, self.pidfd, self.stdin, self.stdout, self.zygote = pid, pidfd, stdin, stdout, zygote
        self.args = ["harness.compile.workers", "(forked)"]
        self.returncode = None

    def poll(self):
        if self.returncode is None and _readable(self.pidfd, 0):
            self._collect()
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            if _readable(self.pidfd, left):
                self._collect()
        return self.returncode

    def _collect(self) -> None:
        """Its exit status, once it exited (the pidfd said so); the zygote may not have seen
        the exit yet for a moment."""
        code = self.zygote.exit_code(self.pid)
        if code is None:
            time.sleep(0.005)
            return
        self.returncode = code
        os.close(self.pidfd)


def _readable(fd: int, timeout) -> bool:
    """Whether ``fd`` is readable within ``timeout`` seconds (None: wait)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else max(0, int(timeout * 1000))))


def close_zygotes() -> None:
    """Stop every zygote (after their workers: a zygote gives its workers' exit status)."""
    with _lock:
        zygotes = [z for z in _zygotes.values() if z is not None]
        _zygotes.clear()
        _zygote_starts.clear()
    for z in zygotes:
        z.close()


# ---- the zygote, in its process -----------------------------------------------------------------
def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))  # threads started by native code too
    except OSError:
        return threading.active_count()


def zygote_main(module_name: str, fd: int) -> int:
    """The zygote: import ``module_name`` (and its ``preload()``), then answer requests on socket
    ``fd`` until the harness closes it: ``fork`` (a worker; the reply carries its pidfd) and
    ``status`` (a worker's exit status, reaped now; None while it runs)."""
    sock = socket.socket(fileno=fd)
    # at the tune's priority, its workers below it (each lowers its own once forked): a tune's
    # first compiles wait for this import and for the forks, one at a time, while the pruning,
    # the GPU workers' torch imports and the other workers keep the cores busy (a four-GPU tune's
    # compile workers took two seconds to reach 64 with the zygote at the workers' priority)
    module = importlib.import_module(module_name)
    preload = getattr(module, "preload", None)
    if callable(preload):
        preload()
    if _thread_count() != 1:
        sys.stderr.write("zygote: %d threads after importing %s; a fork would copy one\n"
                         % (_thread_count(), module_name))
        return 3
    os.close(os.pidfd_open(os.getpid()))  # a kernel without pidfds: stop here, the harness uses Popen
    codes: dict = {}
    while True:
        data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
        if not data:
            return 0
        request = json.loads(data.decode())
        if request["op"] == "fork":
            _answer_fork(sock, module_name, request["cache"], fds)
        else:
            _answer(sock, {"code": _reap(request["pid"], codes)})


def _answer(sock, reply: dict, fds=()) -> None:
    socket.send_fds(sock, [json.dumps(reply).encode()], list(fds))


def _answer_fork(sock, module_name: str, cache: str, fds: list) -> None:
    """Fork a worker on the request's three descriptors and answer its pid and pidfd (or the error)."""
    try:
        pid = _fork_worker(module_name, cache, fds)
    except OSError as exc:
        _answer(sock, {"error": str(exc)})
        return
    finally:
        for fd in fds:
            os.close(fd)
    pidfd = os.pidfd_open(pid)
    try:
        _answer(sock, {"pid": pid}, [pidfd])
    finally:
        os.close(pidfd)


def _fork_worker(module_name: str, cache: str, fds: list) -> int:
    """The child's pid, once it is in a session of its own (a kill of its group reaches it)."""
    if len(fds) != 3:
        raise OSError("a fork request carries 3 descriptors, not %d" % len(fds))
    ready_r, ready_w = os.pipe()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_forked_worker(module_name, cache, fds, ready_w)  # does not return
        os.close(ready_w)
        ready_w = None
        os.read(ready_r, 1)  # or an end of file: the child died first
        return pid
    finally:
        os.close(ready_r)
        if ready_w is not None:
            os.close(ready_w)


def _run_forked_worker(module_name: str, cache: str, fds: list, ready_w: int) -> None:
    """In the forked child: its own session, the three descriptors on 0, 1 and 2 and no other
    (the zygote's socket least of all), its Triton cache folder, then the worker's loop."""
    code = 1
    try:
        os.setsid()
        os.write(ready_w, b"+")
        lower_priority()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, _max_fd())
        os.environ["TRITON_CACHE_DIR"] = cache
        code = serve(module_name)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        return 1 << 16


def _reap(pid: int, codes: dict):
    """Forked worker ``pid``'s exit status as ``Popen`` gives it (negative: the signal), None
    while it runs, ``LOST_STATUS`` where it is not this zygote's child."""
    if pid not in codes:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return LOST_STATUS
        if done == 0:
            return None
        codes[pid] = os.waitstatus_to_exitcode(status)
    return codes[pid]


if __name__ == "__main__":
    sys.exit(zygote_main(sys.argv[1], int(sys.argv[2])))
