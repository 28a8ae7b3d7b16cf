"""ELF runner: one process per variant and shape, under the profiler and ``run_under``.

The program (rendered from templates/cpu/main.cpp.j2 and the kernel's declaration) takes its
operands' files and element counts and its scalar arguments in the manifest's order, and prints one line
``HARNESS_RESULT {json}`` with its error figures and per-iteration times; exit code 3 means
it could not load its data. A signal, a missing result line or a timeout are statuses.
"""

import json
import os
import re
import shlex
import signal
import subprocess
import tempfile

from .. import contract
from ..stats import summarize

RESULT_PREFIX = "HARNESS_RESULT "


class ElfRunner:
    def __init__(self, bundle_dir, manifest, profiler, run_under=None, timeout=60.0, scratch_dir=None):
        self.bundle = os.path.abspath(bundle_dir)
        self.manifest = manifest
        self.profiler = profiler
        self.run_under = shlex.split(run_under) if run_under else []
        self.timeout = timeout
        self.tolerances = manifest["tolerances"]
        self.scratch_dir = scratch_dir  # perf output goes here: the agent writes only in its workdir

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
        """Returns a dict of result columns (status, times, errors, counters, message)."""
        fd, scratch = tempfile.mkstemp(prefix="perf-", suffix=".csv", dir=self.scratch_dir)
        os.close(fd)
        cmd = self.profiler.wrap(self.command(variant, shape, grid, warmup, iters), scratch)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_own_session_dies_with_agent, cwd=self.bundle)
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            _unlink(scratch)
            return {"status": contract.TIMEOUT, "message": "no answer within %gs; killed" % self.timeout}
        counters = self.profiler.collect(scratch)
        _unlink(scratch)
        return self.classify(proc.returncode, out, err, shape, counters)

    def classify(self, returncode, out, err, shape, counters):
        result = _parse_result(out)
        row = {"ctr:" + k: v for k, v in counters.items()}
        if returncode == 3:
            row.update(status=contract.LOAD_ERROR, message=_last_line(err) or "could not load its data")
            return row
        if result is None or returncode != 0:
            row.update(status=contract.CRASH, message=_crash_message(returncode, err))
            return row
        row.update(summarize(result["times_ns"]))
        row.update(rel_err=result["rel_err"], max_abs_err=result["max_abs_err"], err_ratio=result["err_ratio"])
        tol = self.tolerances["rel_err"][shape["dtype"]]
        if not (result["rel_err"] <= tol):  # NaN fails too
            row.update(status=contract.WRONG_ANSWER,
                       message="relative error %.3g over tolerance %.3g" % (result["rel_err"], tol))
        else:
            row["status"] = contract.OK
        return row


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
