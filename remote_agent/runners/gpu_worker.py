"""The GPU worker: one process per device (``python -m remote_agent.runners.gpu_worker worker``),
started and replaced by the supervisor (remote_agent/supervisor.py) for GpuRunner (gpu.py).

It opens its device through ctypes (cuda.py on libcuda.so.1, hip.py on libamdhip64.so), generates
the shape's inputs on the device from the bundle's seed with the bundle's fill kernel, computes
the reference (gpu_reference.py), and for each variant: poisons C with NaN, launches once,
reduces the error figures on the device, then times it with the selected profiler and checks the
answer again (gpu_timing.py). Library rows (``lib:<name>``) are timed the same way
(gpu_library.py). What depends on the kernel (its torch reference, the check of its reference
kernel, its library launchers) comes from the bundle's device plug-in (gpu_plugin.py). Errors that leave a CUDA context unusable make the worker report the job and
exit, so the next job gets a fresh process.

Under ncu or rocprof the worker opens no device: each job runs in a child process
(``python -m remote_agent.runners.gpu_worker one``) under the profiler.
"""

import array
import json
import math
import os
import sys
import time

from .. import contract
from ..stats import MEDIAN, summarize
from .gpu_api import GpuError
from .gpu_backends import api_for
from .gpu_launch import Kernel, cdiv, specialization_problem
from .gpu_library import run_library
from .gpu_memory import ShapeData, copy_of, data_seed, input_bytes
from .gpu_plugin import load_device_plugin
from .gpu_reference import check_reference_kernel, compute_reference, pick_reference
from .gpu_flush import L2Flush
from .gpu_timing import check_and_time


class _PhaseClock(object):
    """Seconds per named phase, each from the end of the one before."""

    def __init__(self):
        self.last = time.monotonic()
        self.laps = {}

    def lap(self, name):
        now = time.monotonic()
        self.laps[name] = round(now - self.last, 3)
        self.last = now


class Worker(object):
    def __init__(self, bundle, manifest, device_index, options, api=None):
        self.bundle = bundle
        self.manifest = manifest
        self.options = options
        self.tolerances = manifest["tolerances"]
        clock = _PhaseClock()  # where the start's seconds go (the ready line says it)
        self.api = api or api_for(manifest["target"]["backend"])
        self.api.init()
        self.api.open(device_index)
        self.device = self.api.facts()
        clock.lap("device")
        self.kernels = {}
        self.shapes = {}
        self.support = {}
        self.l2_flush = L2Flush(self.api, self.device.get("l2_bytes"), self.device.get("sm_count"))
        self.torch = None
        self.torch_error = None
        self.device_plugin = load_device_plugin(bundle, manifest)
        clock.lap("plug-in")
        self.reference_mode = pick_reference(self, options.get("reference", "auto"))
        clock.lap("reference")
        from ..profilers.events import gpu_profiler

        self.profiler = gpu_profiler(options.get("profiler") or "events", self.api, options)
        self.self_check = check_reference_kernel(self)
        clock.lap("self-check")
        self._checked_kinds = {_kind(s): None for s in manifest["shapes"]}
        self.start_seconds = clock.laps

    # ---- what the profilers call ----
    @property
    def flush_enabled(self):
        return self.l2_flush.enabled

    def flush(self):
        self.l2_flush()

    # ---- support kernels ----
    def support_kernel(self, role, dtype):
        key = "%s_%s" % (role, dtype)
        if key not in self.support:
            facts = self.manifest["toolchain"].get("support", {}).get(key)
            if facts is None:
                raise GpuError("the bundle has no %s kernel for %s; rebuild it" % (role, dtype), load=True)
            self.support[key] = Kernel(self.api, self._read(facts["artifact"]), facts["launch"],
                                       self.device.get("shared_max"))
        return self.support[key]

    def _read(self, rel):
        with open(os.path.join(self.bundle, rel), "rb") as f:
            return f.read()

    def fill(self, ptr, n, dtype, seed):
        k = self.support_kernel("fill", dtype)
        block = int(self.manifest["toolchain"].get("support_block", 1024))
        grid = (cdiv(n, block), 1, 1)
        k.run(grid, k.params({"out_ptr": ptr, "n": n, "seed": seed}, grid))

    def errors(self, c_ptr, ref_ptr, n, dtype, rtol, atol):
        """(rel_err, max_abs_err, err_ratio) of c against ref, reduced on the device."""
        return _figures(*self._error_sums(c_ptr, ref_ptr, n, dtype, rtol, atol), n=n)

    def check(self, data):
        """(rel_err, max_abs_err, err_ratio) over every check the manifest declares (each output
        against its reference), with the tolerances of the shape's dtype."""
        dtype = data.shape["dtype"]
        rtol, atol = self.tolerances["rtol"][dtype], self.tolerances["atol"][dtype]
        d2 = r2 = bad = 0.0
        maxabs, n = 0.0, 0
        for c in self.manifest["checks"]:
            out = data.operands[c["output"]]
            sums = self._error_sums(data.ptr(c["output"]), data.ptr(c["reference"]), out["elements"], out["dtype"],
                                    rtol, atol)
            d2, r2, bad = d2 + sums[0], r2 + sums[1], bad + sums[3]
            maxabs = max(maxabs, sums[2])
            n += out["elements"]
        return _figures(d2, r2, maxabs, bad, n=n)

    def _error_sums(self, c_ptr, ref_ptr, n, dtype, rtol, atol):
        """(sum of squared differences, sum of squared references, max |difference|, elements
        outside atol + rtol |ref|), by the bundle's error kernel on the device."""
        k = self.support_kernel("error", dtype)
        block = int(self.manifest["toolchain"].get("support_block", 1024))
        programs = cdiv(n, block)
        out = self.api.alloc(programs * 16)
        try:
            grid = (programs, 1, 1)
            k.run(grid, k.params({"c_ptr": c_ptr, "ref_ptr": ref_ptr, "out_ptr": out, "n": n,
                                  "rtol": rtol, "atol": atol}, grid))
            self.api.synchronize()
            raw = array.array("f")
            raw.frombytes(self.api.dtoh(out, programs * 16))
        finally:
            self.api.free(out)
        maxabs = max(raw[2::4]) if programs else 0.0
        return math.fsum(raw[0::4]), math.fsum(raw[1::4]), maxabs, math.fsum(raw[3::4])

    # ---- shapes and variants ----
    def check_reference_for(self, shape):
        """The reference kernel's check against the host for a shape of a dtype and layout that the
        manifest this worker started with did not have (a later round of a kept worker); a failed
        check fails every job of that dtype and layout."""
        kind = _kind(shape)
        if kind not in self._checked_kinds:
            started_with = self.manifest
            self.manifest = dict(started_with, shapes=[shape])
            try:
                self.self_check.update(check_reference_kernel(self) or {})
                self._checked_kinds[kind] = None
            except GpuError as exc:
                if exc.sticky:
                    raise
                self._checked_kinds[kind] = str(exc)
            finally:
                self.manifest = started_with
        if self._checked_kinds[kind] is not None:
            raise GpuError(self._checked_kinds[kind], load=True)

    def data_for(self, shape):
        data = self.shapes.pop(shape["id"], None)
        if data is not None:
            self.shapes[shape["id"]] = data  # the most recently used last
            return data
        self.check_reference_for(shape)
        sets = self.l2_flush.input_sets(input_bytes(shape))
        # shapes' data stay on the device up to a quarter of its memory (a long-lived agent's
        # rounds come back to the same shapes); the least recently used go first
        need = sets * input_bytes(shape) + sum(op["bytes"] for op in shape["operands"] if op["role"] != "input")
        budget = int(os.environ.get("HARNESS_GPU_DATA_BYTES") or int(self.device.get("memory_bytes") or 0) // 4)
        while self.shapes and sum(d.nbytes + 4 * d.ws_count for d in self.shapes.values()) + need > budget:
            self.shapes.pop(next(iter(self.shapes))).release()
        data = ShapeData(self.api, shape, sets)
        seed = int(self.manifest.get("seed", 0))
        inputs = [op for op in shape["operands"] if op["role"] == "input"]
        for op in sorted(inputs, key=lambda op: bool(op.get("copy_of"))):  # a copy after what it copies
            first = data.ptr(op["name"])
            if op.get("copy_of"):
                copy_of(self.api, data, op)
            else:
                self.fill(first, op["elements"], op["dtype"], data_seed(seed, shape, op["name"]))
            for i in range(1, sets):
                self.api.dtod(data.ptr(op["name"], i), first, op["bytes"])
        compute_reference(self, data)
        self.api.synchronize()
        data.nbytes = need
        self.shapes[shape["id"]] = data
        return data

    def kernel_for(self, variant):
        k = self.kernels.get(variant["id"])
        if k is None:
            image = self._read(variant["artifact"])
            k = Kernel(self.api, image, variant["launch"], self.device.get("shared_max"))
            self.kernels[variant["id"]] = k
        return k

    def run_job(self, variant, shape, grid):
        """One (variant, shape): a results dict (status, times, errors, counters, message)."""
        if (variant.get("launch") or {}).get("library"):
            return run_library(self, variant, shape)
        try:
            kernel = self.kernel_for(variant)
        except GpuError as exc:
            if exc.sticky:
                raise
            return {"status": contract.LOAD_ERROR, "message": str(exc)}
        except OSError as exc:
            return {"status": contract.LOAD_ERROR, "message": "cannot read artifact: %s" % exc}
        data = self.data_for(shape)
        values = data.values(0)
        problem = specialization_problem(kernel.launch, values)
        if problem:
            return {"status": contract.LOAD_ERROR, "message": problem}
        cfg = variant.get("config", {})
        grid = tuple(int(g) for g in grid)
        ws, locks = data.workspace(cfg, grid)
        param_sets = []
        for r in range(data.sets):
            v = data.values(r)
            v.update(ws_ptr=ws, lock_ptr=locks)
            param_sets.append(kernel.params(v, grid))
        counters = {"ctr:" + k: v for k, v in kernel.facts.items()}

        def launch(i, stream=None):
            kernel.run(grid, param_sets[i % len(param_sets)], stream)

        return check_and_time(self, data, shape, launch, counters, kernel, variant, grid)


def _kind(shape):
    """What the reference kernel's check covers: a shape's dtype and layout."""
    return shape["dtype"], shape.get("layout")


def _figures(d2, r2, maxabs, bad, n):
    """rel_err = sqrt(sum d^2 / sum ref^2) (NaN stays NaN; a zero reference: 0 or inf),
    max_abs_err, err_ratio = share of elements outside tolerance."""
    if r2 > 0:
        rel = math.sqrt(d2 / r2) if d2 == d2 else float("nan")
    else:
        rel = 0.0 if d2 == 0 else float("inf")
    return rel, maxabs, (bad / n if n else 0.0)


def serve(handler, infile=None, outfile=None):
    """The worker side of the supervisor protocol: one JSON request per line in, one JSON reply per
    line out. ``handler(request) -> reply dict``; raising ``SystemExit`` after replying ends it."""
    from ..supervisor import protocol_streams

    infile, outfile = protocol_streams(infile, outfile)
    for line in infile:
        line = line.strip()
        if not line:
            continue
        request = json.loads(line)
        if request.get("op") == "exit":
            break
        reply, leave = handler(request)
        reply["id"] = request.get("id")
        if leave:
            reply["exiting"] = True  # the supervisor sends this worker nothing more
        outfile.write(json.dumps(reply) + "\n")
        outfile.flush()
        if leave:
            sys.stderr.flush()
            os._exit(3)


def worker_main(argv, api=None, standby=None, bridge=False):
    """A worker: ``standby``, the seconds per phase of a process started before its round that
    became this worker (it dies with its agent already, and its ready message says it started
    ahead and where those seconds went). ``bridge``: a worker that measures before its device's
    torch standby is loaded (``standby_main --bridge``); with the reference left to ``auto`` it
    checks against the bundle's reference kernel and imports torch only for a library job."""
    import argparse

    from ..supervisor import protocol_streams, send

    parser = argparse.ArgumentParser(prog="remote_agent.runners.gpu_worker worker")
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--device-index", type=int, default=0)
    parser.add_argument("--options", default="{}")
    args = parser.parse_args(argv)
    infile, outfile = protocol_streams(watched=standby is not None)
    with open(os.path.join(args.bundle, "manifest.json")) as f:
        manifest = json.load(f)
    options = json.loads(args.options)
    if bridge and options.get("reference", "auto") == "auto":
        options["reference"] = "kernel"
    from ..profilers.events import gpu_profiler_class

    if getattr(gpu_profiler_class(options.get("profiler") or "events"), "wraps_process", False):
        return _wrapped_worker(args.bundle, manifest, options, infile, outfile)
    if standby is None:  # (a standby imported it already)
        _import_torch_meanwhile(manifest, options)
    try:
        worker = Worker(args.bundle, manifest, args.device_index, options, api=api)
    except GpuError as exc:
        if getattr(exc, "fatal", False):  # e.g. the reference is wrong: no result can be trusted
            send(outfile, {"fatal": str(exc)})
        else:  # the supervisor retries, then gives the device up
            print("worker: cannot start: %s" % exc, file=sys.stderr)
        return 2
    send(outfile, {"ready": True, "device": worker.device, "reference": worker.reference_mode,
                   "self_check": worker.self_check, "profiler": worker.profiler.name,
                   "flush": worker.l2_flush.mode, "flush_fallback": worker.l2_flush.fallback,
                   "started_ahead": standby is not None, "start_seconds": worker.start_seconds,
                   "standby_seconds": standby or {}, "bridge": bridge})

    def handle(request):
        start = time.monotonic()
        worker.options.update(request.get("options") or {})  # a round's timing (the profiler reads these)
        try:
            result = worker.run_job(request["variant"], request["shape"], request["grid"])
            return {"result": result, "seconds": time.monotonic() - start}, False
        except GpuError as exc:
            status = contract.CRASH if exc.sticky or not exc.load else contract.LOAD_ERROR
            return {"result": {"status": status, "message": str(exc)[:300]}}, exc.sticky

    serve(handle, infile, outfile)
    return 0


def standby_main(argv):
    """A worker started before its round (``gpu_standby.Standbys``): it does what every worker
    of its backend does first (the driver's init and its device's primary context; torch's
    import, its CUDA init and a first cuBLAS product, where the node has torch and the reference
    may be torch) while the host still builds, says ``{"standby": "loaded"}`` on stdout, then
    reads its worker's arguments, one JSON line ``{"argv": [...]}`` on stdin, and becomes that
    worker (which finds all that done). End of file: it exits.

    ``--bridge``: a standby that leaves torch out (the driver alone). It becomes a worker that
    checks answers against the bundle's reference kernel and measures while the torch standby of
    its device still imports (seconds on a busy node); the agent hands the device over to that
    standby between two jobs once it is loaded."""
    import argparse
    import importlib.util
    import threading

    from ..supervisor import die_with_parent
    from .gpu_standby import bridges_help

    parser = argparse.ArgumentParser(prog="remote_agent.runners.gpu_worker standby")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--bridge", action="store_true", help="leave torch out (see above)")
    args = parser.parse_args(argv)
    die_with_parent()

    def driver():
        try:
            api = api_for(args.backend)
            api.init()
            api.open(0)  # the primary context, which the worker (and torch) retain again at once
        except Exception:  # the worker meets it again and says why
            pass

    clock = _PhaseClock()  # where the standby's seconds went (its worker's ready line says it)
    wants_torch = not args.bridge and os.environ.get("HARNESS_GPU_REFERENCE", "auto") in ("auto", "torch") and \
        importlib.util.find_spec("torch") is not None
    # The driver's init runs beside torch's import, except where a bridge runs beside this standby:
    # there it comes after, so that the bridges' inits, which the first jobs wait for, meet fewer
    # others (the driver serializes them: about 3 s each with nine at once on a four-GPU node).
    beside_import = wants_torch and not bridges_help()
    loading = threading.Thread(target=driver, daemon=True)
    if beside_import:
        loading.start()
    torch = None
    if wants_torch:
        try:
            import torch

            clock.lap("torch import")
        except Exception:  # pick_reference decides, and says why
            pass
    if beside_import:
        loading.join()
    else:
        driver()
    clock.lap("driver")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                torch.cuda.init()
                clock.lap("torch CUDA init")
                x = torch.ones((64, 64), device="cuda")
                (x @ x).sum().item()  # cuBLAS's handle and first kernels
                clock.lap("cuBLAS")
        except Exception:  # pick_reference decides, and says why
            pass
    sys.stdout.write(json.dumps({"standby": "loaded"}) + "\n")  # (Standbys reads it before a worker's protocol)
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    clock.lap("waiting")
    return worker_main(json.loads(line)["argv"], standby=clock.laps, bridge=args.bridge)


def _import_torch_meanwhile(manifest, options):
    """Import torch (the reference, where the node has it) in a thread while this worker starts
    its driver and opens its device: each takes a second or more, and a tune's first jobs wait
    for the worker to be ready. ``pick_reference`` imports it again (at once, or after this
    import ends) and decides."""
    import importlib.util
    import threading

    if options.get("reference", "auto") not in ("auto", "torch") or \
            manifest["target"]["backend"] not in ("cuda", "hip") or importlib.util.find_spec("torch") is None:
        return

    def load():
        try:
            import torch  # noqa: F401
        except Exception:  # pick_reference says why, or takes the kernel
            pass

    threading.Thread(target=load, daemon=True, name="torch-import").start()


def _wrapped_worker(bundle, manifest, options, infile, outfile):
    """A worker for ncu / rocprof: each job runs in a child process under the profiler; this
    process never opens the device itself."""
    import shutil
    import subprocess
    import tempfile

    from ..profilers.events import gpu_profiler
    from ..supervisor import send

    profiler = gpu_profiler(options["profiler"], None, options)
    tool = profiler.command(["true"], "/tmp")[0]
    if not shutil.which(tool):
        send(outfile, {"fatal": "profiler %s needs %s, which is not on PATH here" % (profiler.name, tool)})
        return 2
    send(outfile, {"ready": True, "device": {}, "reference": "kernel", "profiler": profiler.name})
    child_options = dict(options, profile_launches=profiler.launches(),
                         reference=os.environ.get("HARNESS_GPU_REFERENCE", "kernel"))

    def handle(request):
        library = (request["variant"].get("launch") or {}).get("library")
        if library:  # its kernels are the library's, not an entry this profiler can pick out
            return {"result": {"status": contract.LOAD_ERROR, "message": "%s is timed by the events profiler "
                               "only, this run uses %s" % (request["variant"]["id"], profiler.name)}}, False
        workdir = tempfile.mkdtemp(prefix="harness-prof-")
        try:
            req_path = os.path.join(workdir, "request.json")
            with open(req_path, "w") as f:
                json.dump(request, f)
            child = [sys.executable, "-m", "remote_agent.runners.gpu_worker", "one", "--bundle", bundle,
                     "--request", req_path, "--options", json.dumps(child_options)]
            proc = subprocess.run(profiler.command(child, workdir), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, universal_newlines=True)
            result = None
            for line in proc.stdout.splitlines():
                if line.startswith(RESULT_PREFIX):
                    result = json.loads(line[len(RESULT_PREFIX):])
            if result is None:
                tail = [l for l in (proc.stderr + proc.stdout).splitlines() if l.strip()][-3:]
                return {"result": {"status": contract.CRASH, "message": ("%s exited %s: %s" % (
                    profiler.name, proc.returncode, " | ".join(tail)))[:300]}}, False
            if result.get("status") == contract.OK:
                times, counters = profiler.collect(workdir, request["variant"]["launch"]["entry"],
                                                   profiler.launches())
                if not times:
                    result.update(status=contract.CRASH, message="%s recorded no launch of %s" % (
                        profiler.name, request["variant"]["launch"]["entry"]))
                result.update(summarize(times, estimator=options.get("estimator") or MEDIAN))
                for k, v in counters.items():
                    result["ctr:" + k] = v
            if os.environ.get("HARNESS_KEEP_PROFILES"):
                keep = os.path.join(os.environ["HARNESS_KEEP_PROFILES"], request["variant"]["id"] + "-" +
                                    request["shape"]["id"])
                shutil.copytree(workdir, keep, dirs_exist_ok=True)
            return {"result": result}, False
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    serve(handle, infile, outfile)
    return 0


def one_main(argv):
    """Run one job in this process and print its result (the child that ncu or rocprof wraps)."""
    import argparse

    parser = argparse.ArgumentParser(prog="remote_agent.runners.gpu_worker one")
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--request", required=True, help="JSON file with variant, shape, grid")
    parser.add_argument("--options", default="{}")
    args = parser.parse_args(argv)
    with open(os.path.join(args.bundle, "manifest.json")) as f:
        manifest = json.load(f)
    with open(args.request) as f:
        request = json.load(f)
    options = json.loads(args.options)
    options["profiler"] = "bracket"
    try:
        worker = Worker(args.bundle, manifest, 0, options)
        result = worker.run_job(request["variant"], request["shape"], request["grid"])
    except GpuError as exc:
        result = {"status": contract.CRASH if exc.sticky or not exc.load else contract.LOAD_ERROR,
                  "message": str(exc)[:300]}
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


RESULT_PREFIX = "HARNESS_RESULT "


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("worker", "one", "standby"):
        print("usage: python -m remote_agent.runners.gpu_worker {worker|one|standby} ...", file=sys.stderr)
        return 2
    if argv[0] == "worker":
        return worker_main(argv[1:])
    if argv[0] == "standby":
        return standby_main(argv[1:])
    return one_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
