"""The kept compile workers (harness.compile.workers) with real processes: a stand-in compile
module written per test, which notes each import of itself (pid and whether a zygote imported
it) in a file, so that a test can tell forked workers (one import per key) from workers started
with Popen (one import each), and whose jobs echo, exit, crash or hang.
"""

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.compile import workers
from harness.compile.zygote import _zygote_supported

pytestmark = pytest.mark.skipif(not _zygote_supported(), reason="no fork, send_fds or pidfd_open here")

STANDIN = '''
import json, os, resource, signal, subprocess, sys, threading, time

ZYGOTE = os.path.basename(sys.argv[0]) == "zygote.py"  # python -m harness.compile.zygote
with open(os.environ["STANDIN_IMPORTS"], "a") as f:
    f.write("%d %s\\n" % (os.getpid(), "zygote" if ZYGOTE else "worker"))
if ZYGOTE and os.environ.get("STANDIN_IN_ZYGOTE") == "raise":
    raise ImportError("this module cannot be imported by a zygote")
if ZYGOTE and os.environ.get("STANDIN_IN_ZYGOTE") == "thread":
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()


def compile_job(job):
    if job["do"] == "exit":
        sys.stderr.write("exiting with 7 now\\n")
        sys.stderr.flush()
        os._exit(7)
    if job["do"] == "crash":
        sys.stderr.write("crashing now\\n")
        sys.stderr.flush()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), signal.SIGSEGV)
    if job["do"] == "hang":
        child = subprocess.Popen(["sleep", "60"])  # in the worker's process group
        with open(job["pids"], "w") as f:
            f.write("%d %d" % (os.getpid(), child.pid))
        time.sleep(60)
    time.sleep(job.get("sleep", 0))
    cache = os.environ["TRITON_CACHE_DIR"]
    return {"echo": job["value"], "pid": os.getpid(), "ppid": os.getppid(), "cache": cache,
            "cache_exists": os.path.isdir(cache), "pgid": os.getpgid(0), "sid": os.getsid(0), "nice": os.nice(0),
            "sockets": [fd for fd in os.listdir("/proc/self/fd") if _is_socket(fd)]}


def _is_socket(fd):
    try:
        return os.readlink("/proc/self/fd/" + fd).startswith("socket:")
    except OSError:
        return False
'''


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """(module name, env for run_job, a function giving the imports noted so far); every worker
    and zygote closed afterwards."""
    (tmp_path / "standin_compile.py").write_text(STANDIN)
    imports = tmp_path / "imports.txt"
    env = dict(os.environ, PYTHONPATH=str(tmp_path), STANDIN_IMPORTS=str(imports))

    def noted():
        return [line.split() for line in imports.read_text().splitlines()] if imports.exists() else []

    workers.close_all()
    yield "standin_compile", env, noted
    workers.close_all()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def _gone(pids, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _two_at_once(module, env, jobs, timeout=30):
    """Two jobs at the same time: two workers."""
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda job: workers.run_job(module, job, timeout, env), jobs))


def test_two_workers_answer_and_the_module_is_imported_once(standin):
    module, env, noted = standin
    done = _two_at_once(module, env, [{"do": "echo", "value": "a", "sleep": 0.5},
                                      {"do": "echo", "value": "b", "sleep": 0.5}])
    assert [d[0] for d in done] == [0, 0] and [d[1]["echo"] for d in done] == ["a", "b"]
    assert done[0][1]["pid"] != done[1][1]["pid"]
    assert noted() == [[noted()[0][0], "zygote"]]  # one import, by the zygote, for both workers
    zygote = int(noted()[0][0])
    for _, facts, _ in done:
        assert facts["ppid"] == zygote  # forked by it
        assert facts["pgid"] == facts["sid"] == facts["pid"]  # in a session of its own
        assert facts["sockets"] == []  # the zygote's socket not inherited
    again = workers.run_job(module, {"do": "echo", "value": "c"}, 30, env)
    assert again[1]["echo"] == "c" and again[1]["pid"] in {d[1]["pid"] for d in done}  # kept
    assert len(noted()) == 1


def test_each_worker_has_its_own_triton_cache(standin):
    module, env, _ = standin
    env = dict(env, TRITON_CACHE_DIR="/nonexistent-shared-cache")
    done = _two_at_once(module, env, [{"do": "echo", "value": i, "sleep": 0.3} for i in range(2)])
    caches = [d[1]["cache"] for d in done]
    assert len(set(caches)) == 2 and "/nonexistent-shared-cache" not in caches
    assert all(d[1]["cache_exists"] for d in done)


@pytest.mark.parametrize("job, code, said", [({"do": "exit"}, 7, "exiting with 7 now"),
                                             ({"do": "crash"}, -signal.SIGSEGV, "crashing now")])
def test_a_worker_that_dies_gives_its_exit_code_and_stderr_and_the_next_job_a_fresh_worker(standin, job, code, said):
    module, env, noted = standin
    first = workers.run_job(module, {"do": "echo", "value": 1}, 30, env)
    returncode, facts, err = workers.run_job(module, job, 30, env)
    assert (returncode, facts) == (code, None) and said in err
    after = workers.run_job(module, {"do": "echo", "value": 2}, 30, env)
    assert after[0] == 0 and after[1]["echo"] == 2 and after[1]["pid"] != first[1]["pid"]
    assert [kind for _, kind in noted()] == ["zygote"]


def test_a_job_past_its_timeout_returns_none_and_its_process_group_is_killed(standin, tmp_path):
    module, env, _ = standin
    pids = tmp_path / "pids.txt"
    start = time.monotonic()
    assert workers.run_job(module, {"do": "hang", "pids": str(pids)}, 1.0, env) is None
    assert time.monotonic() - start < 10
    worker, sleeper = map(int, pids.read_text().split())
    assert _gone([worker, sleeper])
    assert workers.run_job(module, {"do": "echo", "value": 3}, 30, env)[1]["echo"] == 3


@pytest.mark.parametrize("fault", ["raise", "thread"])
def test_a_zygote_that_cannot_start_is_started_again_once_then_workers_use_popen(standin, fault):
    module, env, noted = standin
    env = dict(env, STANDIN_IN_ZYGOTE=fault)
    for value in range(3):  # each job's worker dies: three worker starts
        assert workers.run_job(module, {"do": "echo", "value": value}, 30, env)[1]["echo"] == value
        assert workers.run_job(module, {"do": "exit"}, 30, env)[0] == 7
    kinds = [kind for _, kind in noted()]
    assert kinds.count("zygote") == 2 and kinds.count("worker") == 3


def test_a_zygote_killed_between_jobs_is_started_again(standin):
    module, env, noted = standin
    workers.run_job(module, {"do": "echo", "value": 0}, 30, env)
    os.kill(int(noted()[0][0]), signal.SIGKILL)
    done = _two_at_once(module, env, [{"do": "echo", "value": i, "sleep": 0.3} for i in range(2)])
    assert [d[1]["echo"] for d in done] == [0, 1]
    assert [kind for _, kind in noted()] == ["zygote", "zygote"]
    assert any(d[1]["ppid"] == int(noted()[1][0]) for d in done)  # a new worker, from the new zygote


def test_the_off_switch_starts_every_worker_with_popen(standin, monkeypatch):
    module, env, noted = standin
    monkeypatch.setenv("HARNESS_COMPILE_ZYGOTE", "0")
    done = _two_at_once(module, env, [{"do": "echo", "value": i, "sleep": 0.3} for i in range(2)])
    assert [d[1]["echo"] for d in done] == [0, 1]
    assert sorted(int(pid) for pid, kind in noted() if kind == "worker") == sorted(d[1]["pid"] for d in done)
    assert len(noted()) == 2
    assert workers.run_job(module, {"do": "exit"}, 30, env)[0] == 7


def test_prestart_forks_its_workers_and_close_all_leaves_no_process(standin):
    module, env, noted = standin
    workers.prestart(module, env, 2)
    deadline = time.monotonic() + 20
    while len(workers._idle.get(workers._key(module, env), [])) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    done = _two_at_once(module, env, [{"do": "echo", "value": i, "sleep": 0.2} for i in range(2)])
    assert [kind for _, kind in noted()] == ["zygote"]
    zygote = int(noted()[0][0])
    forked = [d[1]["pid"] for d in done]
    assert all(d[1]["ppid"] == zygote for d in done)
    workers.close_all()
    assert _gone([zygote] + forked)
    assert not [t for t in threading.enumerate() if t.name == "harness-prestart-workers"]


def _nice(pid: int) -> int:
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def test_the_zygote_keeps_the_tune_s_priority_its_forked_workers_run_lower_and_prestart_forks_a_pool(standin):
    """A tune's first compiles wait for the zygote's import and then for each fork: the zygote
    runs at the tune's priority, each worker lowers its own once forked; ``forked`` workers are
    forked ahead where a zygote forks them (``count`` where each would import the module)."""
    from harness.compile.worker_loop import NICE

    module, env, noted = standin
    workers.prestart(module, env, 1, forked=3)
    key = workers._key(module, env)
    deadline = time.monotonic() + 20
    while len(workers._idle.get(key, [])) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(workers._idle.get(key, [])) == 3
    zygote = int(noted()[0][0])
    assert _nice(zygote) == os.nice(0)
    done = workers.run_job(module, {"do": "echo", "value": 1}, 30, env)
    assert done[1]["ppid"] == zygote and done[1]["nice"] == min(19, os.nice(0) + NICE)
