"""ELF runner: one process per variant and shape, under the profiler and ``run_under``.

The program (rendered from templates/cpu/main.cpp.j2 and the kernel's declaration) takes its
operands' files and element counts and its scalar arguments in the manifest's order, checks its
answer and prints one line ``HARNESS_RESULT {json}`` (error figures, timer resolution); then it
times as many calls as this runner writes on its stdin, one count per line, answering
``HARNESS_SAMPLE <ns>`` each. The runner decides, with remote_agent/measure.py: one call to
estimate, a warm-up (the same rule for every variant: longer where the minimum decides), the
calls per sample, and samples until the noise of the deciding estimator (``estimator``: min by
default on CPUs) settles or the time cap is spent. Exit code 3 means the program could not load its
data. A signal, a missing result line or a timeout are statuses.

The process (and whatever wraps it: perf, qemu) is pinned to one core where the OS allows
(``pinned_cpu``; the OpenMP builds of targets with ``threads`` get that many cores). The core's
clock is read before and after (cpufreq, else /proc/cpuinfo); a job whose clock dropped by more
than 10 % is measured again, at most twice (``remeasured``, ``throttle``). Counter columns are
per call: the process's counts divided by the calls it made (check, warm-up and timed).
"""

import json
import os
import re
import select
import shlex
import signal
import subprocess
import tempfile
import time

from .. import contract
from .. import measure

RESULT_PREFIX = "HARNESS_RESULT "
SAMPLE_PREFIX = "HARNESS_SAMPLE "
MAX_REMEASURE = 2


class ElfRunner:
    def __init__(self, bundle_dir, manifest, profiler, run_under=None, timeout=60.0, scratch_dir=None,
                 max_noise=measure.DEFAULT_MAX_NOISE, max_time=None, pin_cpu="auto", estimator=measure.MIN):
        self.bundle = os.path.abspath(bundle_dir)
        self.manifest = manifest
        self.profiler = profiler
        self.run_under = shlex.split(run_under) if run_under else []
        self.timeout = timeout
        self.tolerances = manifest["tolerances"]
        self.scratch_dir = scratch_dir  # perf output goes here: the agent writes only in its workdir
        self.estimator = measure.check_estimator(estimator)
        self.max_noise, self.max_time = max_noise, max_time
        self.cpus = pick_cpus(pin_cpu, int(manifest["target"].get("threads") or 1))

    def devices(self):
        return ["cpu"]

    def command(self, variant, shape, grid, warmup, iters):
        """argv of the rendered main: warm-up, iterations, tolerances and grid; then per operand
        (declaration order) its data file ("-" for an output) and element count; then the scalars."""
        dtype = shape["dtype"]
        argv = [os.path.join(self.bundle, variant["artifact"]), str(warmup), str(iters),
                repr(self.tolerances["rtol"][dtype]), repr(self.tolerances["atol"][dtype])]
        argv += [str(g) for g in grid]
        for op in shape["operands"]:
            rel = shape["data"].get(op["name"])
            argv += [os.path.join(self.bundle, rel) if rel else "-", str(op["elements"])]
        argv += [str(v) for v in shape["scalars"].values()]
        return self.run_under + argv

    def run(self, variant, shape, grid, warmup, iters):
        """Returns a dict of result columns (status, times, errors, counters, message); measured
        again (at most MAX_REMEASURE times) when the core's clock dropped during the job."""
        remeasured = 0
        while True:
            before = cpu_clock_mhz(self.cpus)
            row = self.run_once(variant, shape, grid, warmup, iters)
            after = cpu_clock_mhz(self.cpus)
            dropped = measure.clock_changed(before, after)
            if dropped and row["status"] == contract.OK and remeasured < MAX_REMEASURE:
                remeasured += 1
                continue
            row.update(pinned_cpu=cpu_list(self.cpus), clock_mhz_before=before, clock_mhz_after=after,
                       remeasured=remeasured,
                       throttle=("clock dropped %.0f -> %.0f MHz" % (before, after)) if dropped else "")
            return row

    def run_once(self, variant, shape, grid, warmup, iters):
        fd, scratch = tempfile.mkstemp(prefix="perf-", suffix=".csv", dir=self.scratch_dir)
        os.close(fd)
        err_file = tempfile.TemporaryFile(mode="w+", dir=self.scratch_dir)
        cmd = self.profiler.wrap(self.command(variant, shape, grid, warmup, iters), scratch)
        cpus = self.cpus
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err_file,
                                preexec_fn=lambda: _child_setup(cpus), cwd=self.bundle)
        deadline = time.monotonic() + self.timeout
        lines = _Lines(proc.stdout, deadline)
        try:
            out, times, calls = self._converse(proc, lines, shape, warmup, iters)
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except (subprocess.TimeoutExpired, _Timeout):
            _kill_group(proc)
            proc.wait()
            _unlink(scratch)
            err_file.close()
            return {"status": contract.TIMEOUT, "message": "no answer within %gs; killed" % self.timeout}
        err_file.seek(0)
        err = err_file.read()
        err_file.close()
        counters = self.profiler.collect(scratch)
        _unlink(scratch)
        return self.classify(proc.returncode, out, err, shape, counters, times, calls)

    def _converse(self, proc, lines, shape, warmup, iters):
        """Read the check line, then ask for samples until measure.Stopper is done. Returns
        (text read, (per-call sample times, calls per sample) or None, calls made in all)."""
        out = []
        check = None
        for line in lines:
            out.append(line)
            if line.startswith(RESULT_PREFIX):
                check = _parse_result(line)
                break
        times, calls = None, 1
        if check is not None and self._answer_ok(check, shape):
            try:
                times, calls = self._sample_until_settled(proc, lines, check, warmup, iters)
            except _Ended:  # it died while timing: its exit status tells
                pass
        try:
            proc.stdin.close()
        except OSError:
            pass
        out.extend(lines)  # whatever else it prints, up to its exit
        return "".join(out), times, calls

    def _sample_until_settled(self, proc, lines, check, warmup, iters):
        """One call to estimate, the warm-up, then samples of ``batch`` calls until the
        Stopper is done. Returns ((per-call sample times, batch), calls made in all)."""
        first = _sample(proc, lines, 1)
        n_warm = measure.warmup_calls(first, warmup, measure.MIN_WARM_NS if self.estimator == measure.MIN
                                      else measure.WARM_NS)
        if n_warm:
            _sample(proc, lines, n_warm)
        batch = measure.batch_size(first, check.get("resolution_ns", 1))
        stopper = measure.Stopper(self.max_noise, self.max_time, iters, estimator=self.estimator)
        while not stopper.done():
            stopper.add(_sample(proc, lines, batch) / batch)
        return (stopper.samples, batch), 2 + n_warm + batch * len(stopper.samples)

    def _answer_ok(self, check, shape):
        return check.get("rel_err", float("nan")) <= self.tolerances["rel_err"][shape["dtype"]]

    def classify(self, returncode, out, err, shape, counters, times=None, calls=1):
        result = _parse_result(out)
        row = {"ctr:" + k: _per_call(v, calls) for k, v in counters.items()}
        if returncode == 3:
            row.update(status=contract.LOAD_ERROR, message=_last_line(err) or "could not load its data")
            return row
        if result is None or returncode != 0:
            row.update(status=contract.CRASH, message=_crash_message(returncode, err))
            return row
        if times:
            row.update(measure.summarize(times[0], times[1], self.estimator))
        row.update(rel_err=result["rel_err"], max_abs_err=result["max_abs_err"], err_ratio=result["err_ratio"])
        tol = self.tolerances["rel_err"][shape["dtype"]]
        if not (result["rel_err"] <= tol):  # NaN fails too
            row.update(status=contract.WRONG_ANSWER,
                       message="relative error %.3g over tolerance %.3g" % (result["rel_err"], tol))
        else:
            row["status"] = contract.OK
        return row


class _Timeout(Exception):
    pass


class _Lines(object):
    """Lines of a pipe, each read before ``deadline`` (else _Timeout); ends at end of file."""

    def __init__(self, pipe, deadline):
        self.fd = pipe.fileno()
        self.deadline = deadline
        self.buf = b""
        self.eof = False

    def __iter__(self):
        return self

    def __next__(self):
        while b"\n" not in self.buf:
            if self.eof:
                if self.buf:
                    line, self.buf = self.buf, b""
                    return line.decode("utf-8", "replace")
                raise StopIteration
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise _Timeout()
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.eof = True
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("utf-8", "replace") + "\n"

    next = __next__


def _sample(proc, lines, calls):
    """Ask the program for one sample of ``calls`` calls; its time in ns."""
    try:
        proc.stdin.write(b"%d\n" % calls)
        proc.stdin.flush()
    except OSError:
        raise _Ended()
    for line in lines:
        if line.startswith(SAMPLE_PREFIX):
            return float(line[len(SAMPLE_PREFIX):])
    raise _Ended()


class _Ended(Exception):
    """The program ended before answering (a crash while timing)."""


def _per_call(value, calls):
    if value is None or not calls:
        return value
    try:
        return float(value) / calls
    except (TypeError, ValueError):
        return value


def pick_cpus(choice, threads=1):
    """The cores a variant runs on: ``auto`` takes the last ``threads`` cores this process may
    use; a number (or list ``2,3``) names them; ``none`` (or an OS without affinity) pins none."""
    if not hasattr(os, "sched_getaffinity") or str(choice).lower() in ("none", "off", ""):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if str(choice).lower() == "auto":
        return allowed[-max(1, threads):]
    cpus = [int(c) for c in str(choice).split(",") if c.strip()]
    return [c for c in cpus if c in allowed] or None


def cpu_list(cpus):
    return ",".join(str(c) for c in cpus) if cpus else ""


def cpu_clock_mhz(cpus):
    """The current clock of the first pinned core in MHz (cpufreq, else /proc/cpuinfo); None
    where neither says."""
    cpu = cpus[0] if cpus else 0
    try:
        with open("/sys/devices/system/cpu/cpu%d/cpufreq/scaling_cur_freq" % cpu) as f:
            return round(int(f.read().strip()) / 1000.0, 1)
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return None
    for block in text.split("\n\n"):
        if re.search(r"^processor\s*:\s*%d\s*$" % cpu, block, re.M):
            m = re.search(r"^cpu MHz\s*:\s*([0-9.]+)", block, re.M)
            return round(float(m.group(1)), 1) if m else None
    return None


def _child_setup(cpus):
    _own_session_dies_with_agent()
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            pass


def _own_session_dies_with_agent():
    """In the child: its own session (a timeout kills the whole group), and on Linux a SIGKILL
    when the agent dies, so a killed agent leaves no variant running. The rendered main asks
    the same of its own parent (perf or qemu), which closes the chain."""
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _parse_result(out):
    for line in out.splitlines():
        if line.startswith(RESULT_PREFIX):
            text = re.sub(r"-?\bnan\b", "NaN", line[len(RESULT_PREFIX):], flags=re.I)
            text = re.sub(r"-?\binf\b", "Infinity", text, flags=re.I)
            try:
                return json.loads(text)
            except ValueError:
                return None
    return None


def _crash_message(returncode, err):
    if returncode is not None and returncode < 0:
        try:
            return "killed by %s" % signal.Signals(-returncode).name
        except ValueError:
            return "killed by signal %d" % -returncode
    if returncode is not None and returncode > 128:
        try:
            return "killed by %s (exit %d)" % (signal.Signals(returncode - 128).name, returncode)
        except ValueError:
            pass
    for line in reversed(err.splitlines()):
        if "fault" in line.lower() or "signal" in line.lower() or "abort" in line.lower():
            return line.strip()[:200]
    return "exited %s without a result; %s" % (returncode, _last_line(err))


def _last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1].strip()[:200] if lines else ""


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass
