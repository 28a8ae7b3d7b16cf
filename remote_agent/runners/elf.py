"""ELF runner: one process per variant and shape, under the profiler and ``run_under``; the jobs
of one shape are measured interleaved, a group at a time (``run_group``).

The program (rendered from templates/cpu/main.cpp.j2 and the kernel's declaration) takes its
operands' files and element counts and its scalar arguments in the manifest's order, checks its
answer and prints one line ``HARNESS_RESULT {json}`` (error figures, timer resolution); then it
times as many calls as this runner writes on its stdin, one count per line, answering
``HARNESS_SAMPLE <ns> <switches>`` each (``switches``: the involuntary context switches the program
had meanwhile). A library launcher also prints ``HARNESS_LIBRARY <build>, core <name>`` once, before
the result line; it becomes the row's ``library`` column (it runs without an inherited
OPENBLAS_CORETYPE, and its row's message says so: openblas_core.py). The runner decides, with
remote_agent/measure.py: one call to estimate, a warm-up (the same rule for every variant: longer
where the minimum decides), the calls per sample, and samples until the noise of the deciding
estimator (``estimator``: min by default on CPUs) settles or the time cap is spent; a sample with a
context switch is set aside (``preempted``). Exit code 3 means the program could not load its data.
A signal, a missing result line or a timeout are statuses.

Interleaved (``--interleave N``, the agent groups up to N jobs of one shape, fewer where their
operands would pass GROUP_BYTES): the group's processes start together and each is checked and
warmed up; then the runner takes one sample of each in turn, each after measure.REVISIT_WARM_NS
(0.2 ms) of untimed calls that bring its data back into the caches, until every job's Stopper is
done. A slow stretch of the machine then slows every job of the group alike, instead of the one
that ran in it. A job's --timeout and its Stopper's time cap count its own time (the time spent in
its steps). OpenMP builds (targets with ``threads``) run one job at a time: their idle worker
threads spin for a while after each call (libomp: 200 ms) and would slow the next job's sample.

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
from ..errors import AgentError
from .openblas_core import library_env

RESULT_PREFIX = "HARNESS_RESULT "
SAMPLE_PREFIX = "HARNESS_SAMPLE "
LIBRARY_PREFIX = "HARNESS_LIBRARY "  # a library launcher's build and core (templates/cpu/openblas_launcher.cpp.j2)
MAX_REMEASURE = 2
GROUP_BYTES = 256 << 20  # operands of the jobs measured interleaved, together at most


class ElfRunner:
    def __init__(self, bundle_dir, manifest, profiler, run_under=None, timeout=60.0, scratch_dir=None,
                 max_noise=measure.DEFAULT_MAX_NOISE, max_time=None, pin_cpu="auto", estimator=measure.MIN,
                 interleave=1, race=0.0):
        self.bundle = os.path.abspath(bundle_dir)
        self.manifest = manifest
        self.profiler = profiler
        self.run_under = shlex.split(run_under) if run_under else []
        self.timeout = timeout
        self.tolerances = manifest["tolerances"]
        self.scratch_dir = scratch_dir  # perf output goes here: the agent writes only in its workdir
        self.estimator = measure.check_estimator(estimator)
        self.max_noise, self.max_time = max_noise, max_time
        self.threads = int(manifest["target"].get("threads") or 1)
        self.cpus = pick_cpus(pin_cpu, self.threads)
        self.interleave = max(1, int(interleave))
        self.race = float(race or 0.0)  # racing: drop a job this far behind its shape's leader (0: off)
        self.leaders = {}  # shape id -> the best minimum of a config (not a library) so far in this run
        # a library job's environment where it differs from the agent's, and what its row says of it
        self.library_env, self.library_note = library_env(os.environ)

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

    def group_size(self, shape):
        """How many jobs of ``shape`` to measure interleaved: --interleave, fewer where their
        processes' operands would pass GROUP_BYTES together, one for OpenMP builds."""
        if self.threads > 1:
            return 1
        per_job = int(shape.get("bytes") or 0)
        fit = int(GROUP_BYTES // per_job) if per_job else self.interleave
        return max(1, min(self.interleave, fit))

    def run_group(self, items, warmup, iters):
        """Result columns for each (variant, shape, grid) of ``items``, measured interleaved (one
        sample of each in turn); those measured while the core's clock dropped are measured again
        (at most MAX_REMEASURE times)."""
        rows = [None] * len(items)
        todo, remeasured = list(range(len(items))), 0
        while todo:
            before = cpu_clock_mhz(self.cpus)
            got = self._measure_interleaved([items[i] for i in todo], warmup, iters)
            after = cpu_clock_mhz(self.cpus)
            dropped = measure.clock_changed(before, after)
            again = []
            for i, row in zip(todo, got):
                if dropped and row["status"] == contract.OK and remeasured < MAX_REMEASURE:
                    again.append(i)
                    continue
                row.update(pinned_cpu=cpu_list(self.cpus), clock_mhz_before=before, clock_mhz_after=after,
                           remeasured=remeasured,
                           throttle=("clock dropped %.0f -> %.0f MHz" % (before, after)) if dropped else "")
                rows[i] = row
            todo, remeasured = again, remeasured + bool(again)
        return rows

    def _measure_interleaved(self, items, warmup, iters):
        """Start every job's process (all on the runner's cores), read their checks, warm each
        up, then take one sample of each in turn until every Stopper is done: a slow stretch of
        the machine then falls on all of them alike instead of on whichever ran in it."""
        jobs = []
        try:
            for variant, shape, grid in items:
                jobs.append(_Job(self, variant, shape, grid, warmup, iters))
            for job in jobs:
                job.step(job.check_and_warm)
            revisit = len(jobs) > 1
            sampling = [j for j in jobs if j.stopper is not None]
            while sampling:
                for job in list(sampling):
                    job.step(job.take_sample, revisit)
                    if job.stopper is None or job.stopper.done():
                        sampling.remove(job)
                if self.race:
                    for job in self._out_of_race(jobs, sampling):
                        sampling.remove(job)
            return [job.finish() for job in jobs]
        finally:
            for job in jobs:
                job.kill()

    def seed_leaders(self, results_path):
        """Racing: each shape's leader starts at the best minimum of an ``ok`` config row already
        in ``results_path`` whose artifact is the one this bundle has for that variant (earlier
        rounds of a search, or a resumed run), so a round of a few configs is raced against the
        shape's best so far, not only against itself."""
        if not self.race or not results_path or not os.path.exists(results_path):
            return
        from ..results import read_rows

        artifacts = {v["id"]: v.get("sha256") or v.get("artifact_sha256") for v in self.manifest["variants"]}
        try:
            rows = read_rows(results_path)
        except (OSError, ValueError):
            return
        for row in rows:
            vid = row.get("variant_id") or ""
            if (row.get("status") != contract.OK or row.get("estimator") != measure.MIN or vid.startswith("lib:")
                    or vid not in artifacts or (artifacts[vid] and row.get("artifact_sha256") != artifacts[vid])):
                continue
            try:
                t = float(row.get("time_ns") or "nan")
            except ValueError:
                continue
            sid = row.get("shape_id")
            if t > 0 and t < self.leaders.get(sid, float("inf")):
                self.leaders[sid] = t

    def _out_of_race(self, jobs, sampling):
        """Racing (``race`` > 0): the jobs still sampling that are clearly out of the running
        against their shape's leader (the best minimum of a config in this run, this group's
        included; measure.Stopper.out_of_race says when). The library's job is never dropped,
        nor does it lead: it is what the configs are compared with, not one of them."""
        for job in jobs:
            if job.stopper is not None and job.stopper.samples and not job.is_library:
                best = min(job.stopper.samples)
                sid = job.shape["id"]
                if best < self.leaders.get(sid, float("inf")):
                    self.leaders[sid] = best
        out = []
        for job in sampling:
            leader = self.leaders.get(job.shape["id"])
            if not job.is_library and job.stopper is not None and job.stopper.out_of_race(leader, self.race):
                job.raced = (min(job.stopper.samples) / leader, self.race)
                out.append(job)
        return out

    def _answer_ok(self, check, shape):
        return check.get("rel_err", float("nan")) <= self.tolerances["rel_err"][shape["dtype"]]

    def classify(self, returncode, out, err, shape, counters, times=None, calls=1):
        result = _parse_result(out)
        row = {"ctr:" + k: _per_call(v, calls) for k, v in counters.items()}
        library = _library_line(out)
        if library:
            row["library"] = library
            if self.library_note:
                row["message"] = self.library_note
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


class _Job(object):
    """One variant's process on one shape, in conversation with the runner: started, its check
    read, warmed up, sampled (``take_sample``, one sample per call), finished into a row.
    Every step counts against the job's own ``--timeout``: its *own* time is the time spent in
    its steps, not the time the other jobs of its group took, and the Stopper's clock too."""

    def __init__(self, runner, variant, shape, grid, warmup, iters):
        self.runner, self.shape, self.warmup, self.iters = runner, shape, warmup, iters
        self.is_library = str(variant.get("id", "")).startswith("lib:")
        self.raced = None  # (its minimum / the leader's, the margin) when racing dropped it
        self.own = 0.0
        self.out = []
        self.stopper, self.batch, self.revisit_calls, self.calls = None, 1, 0, 0
        self.timed_out = False
        fd, self.scratch = tempfile.mkstemp(prefix="perf-", suffix=".csv", dir=runner.scratch_dir)
        os.close(fd)
        self.err_file = tempfile.TemporaryFile(mode="w+", dir=runner.scratch_dir)
        cmd = runner.profiler.wrap(runner.command(variant, shape, grid, warmup, iters), self.scratch)
        cpus, agent = runner.cpus, os.getpid()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err_file,
                                     preexec_fn=lambda: _child_setup(cpus, agent), cwd=runner.bundle,
                                     env=runner.library_env if self.is_library else None)
        self.lines = _Lines(self.proc.stdout, time.monotonic() + runner.timeout)

    def step(self, fn, *args):
        """Run one step of the conversation within what is left of the job's own timeout; a
        timeout kills the process, a program that ended stops the sampling."""
        if self.timed_out or self.proc.returncode is not None:
            return
        self.lines.deadline = time.monotonic() + max(0.0, self.runner.timeout - self.own)
        start = time.monotonic()
        try:
            fn(*args)
        except _Timeout:
            self.timed_out = True
            self.stopper = None
            self.kill()
        except _Ended:  # it died while timing: its exit status tells
            self.stopper = None
        finally:
            self.own += time.monotonic() - start

    def check_and_warm(self):
        """Read the check line; if the answer is right: one call to estimate, the warm-up (the
        same rule for every variant, longer where the minimum decides), the calls per sample."""
        check = None
        for line in self.lines:
            self.out.append(line)
            if line.startswith(RESULT_PREFIX):
                check = _parse_result(line)
                break
        if check is None or not self.runner._answer_ok(check, self.shape):
            return
        first, _ = self._sample(1)
        long_warm = self.runner.estimator == measure.MIN
        n_warm = measure.warmup_calls(first, self.warmup, measure.MIN_WARM_NS if long_warm else measure.WARM_NS)
        if n_warm:
            self._sample(n_warm)
        self.batch = measure.batch_size(first, check.get("resolution_ns", 1))
        self.revisit_calls = measure.warmup_calls(first, 1, measure.REVISIT_WARM_NS)
        self.stopper = measure.Stopper(self.runner.max_noise, self.runner.max_time, self.iters,
                                       estimator=self.runner.estimator, clock=lambda: self.own)

    def take_sample(self, revisit):
        """One sample of ``batch`` calls; after another job ran on the core (``revisit``), a few
        untimed calls first bring this one's data back into the caches. A sample during which the
        OS switched the program out is set aside (measure.Stopper.add_preempted)."""
        if revisit and self.revisit_calls:
            self._sample(self.revisit_calls)
        ns, switches = self._sample(self.batch)
        if switches:
            self.stopper.add_preempted(ns / self.batch)
        else:
            self.stopper.add(ns / self.batch, ns / 1e9)

    def _sample(self, calls):
        self.calls += calls
        return _sample(self.proc, self.lines, calls)

    def finish(self):
        """Close the program's input, read what else it prints up to its exit, and classify."""
        runner = self.runner
        if not self.timed_out:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.lines.deadline = time.monotonic() + max(0.1, runner.timeout - self.own)
                self.out.extend(self.lines)
                self.proc.wait(timeout=max(0.1, self.lines.deadline - time.monotonic()))
            except (subprocess.TimeoutExpired, _Timeout):
                self.timed_out = True
                self.kill()
        if self.timed_out:
            self._cleanup()
            return {"status": contract.TIMEOUT, "message": "no answer within %gs; killed" % runner.timeout}
        self.err_file.seek(0)
        err = self.err_file.read()
        counters = runner.profiler.collect(self.scratch)
        self._cleanup()
        samples = self.stopper.samples_for_estimate() if self.stopper is not None else None
        times = (samples, self.batch) if samples else None
        row = runner.classify(self.proc.returncode, "".join(self.out), err, self.shape, counters, times,
                              1 + self.calls)
        if times:
            row["preempted"] = self.stopper.preempted
        if self.raced and row.get("status") == contract.OK:
            row["message"] = "raced: %.2fx the shape's best so far after %d samples (out by more than %g %%)" % (
                self.raced[0], len(self.stopper.samples), 100.0 * self.raced[1])
        return row

    def kill(self):
        if self.proc.returncode is None:
            _kill_group(self.proc)
            self.proc.wait()
        self._cleanup()

    def _cleanup(self):
        _unlink(self.scratch)
        if not self.err_file.closed:
            self.err_file.close()


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
    """Ask the program for one sample of ``calls`` calls: its time in ns, and how often the OS
    took the core away from it meanwhile (0 where the program does not say)."""
    try:
        proc.stdin.write(b"%d\n" % calls)
        proc.stdin.flush()
    except OSError:
        raise _Ended()
    for line in lines:
        if line.startswith(SAMPLE_PREFIX):
            fields = line[len(SAMPLE_PREFIX):].split()
            switches = int(fields[1]) if len(fields) > 1 else 0
            return float(fields[0]), max(0, switches)
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


def _child_setup(cpus, agent):
    _own_session_dies_with_agent(agent)
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            pass


def _own_session_dies_with_agent(agent):
    """In the child: its own session (a timeout kills the whole group), and on Linux a SIGKILL
    when the agent (pid ``agent``) dies, so a killed agent leaves no variant running. An agent
    killed between the fork and the prctl sends no signal, so the child then checks that its
    parent is still the agent, and exits if not (seen once in the full suite: processes of a
    killed agent's variants still ran 5 s later). The rendered main asks the same of its own
    parent (perf or qemu), which closes the chain."""
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != agent:
        os._exit(1)


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


def _library_line(out):
    """What a library launcher says it ran (``HARNESS_LIBRARY OpenBLAS 0.3.34, core SkylakeX``), at
    most 200 characters; "" for kernel variants, which print no such line."""
    for line in out.splitlines():
        if line.startswith(LIBRARY_PREFIX):
            return "".join(ch for ch in line[len(LIBRARY_PREFIX):].strip() if ch.isprintable())[:200]
    return ""


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


def make_elf_runner(bundle, manifest, options, log):
    """The CPU runner of a bundle: its profiler, run_under and timing options (runners.RUNNERS)."""
    from ..profilers import select

    profiler = select(options.profiler or manifest["target"]["profiler"], manifest["target"]["events"], log)
    run_under = options.run_under if options.run_under is not None else manifest["target"].get("run_under")
    return ElfRunner(bundle, manifest, profiler, run_under, options.timeout, options.scratch_dir,
                     max_noise=_option(options, "max_noise", measure.DEFAULT_MAX_NOISE),
                     max_time=_option(options, "max_time", None),
                     pin_cpu=_option(options, "pin_cpu", "auto"), estimator=estimator_for(manifest, options),
                     interleave=_option(options, "interleave", measure.DEFAULT_INTERLEAVE),
                     race=_option(options, "race", 0.0))


def estimator_for(manifest, options):
    """The run's --estimator, else the target's default (min on CPUs, median on GPUs)."""
    name = _option(options, "estimator", None) or measure.default_estimator(manifest["target"]["backend"])
    try:
        return measure.check_estimator(name)
    except ValueError as exc:
        raise AgentError(str(exc))


def _option(options, name, default):
    value = getattr(options, name, None)
    return default if value is None else value
