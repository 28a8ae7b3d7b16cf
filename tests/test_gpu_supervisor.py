"""The GPU agent's supervisor and runner with CPU stand-in workers that really crash and really hang.

The workers are the real GPU worker (remote_agent.runners.gpu_worker) driving tests/gpu_standin.py's
StandinApi: host memory, launches interpreted with numpy from the launch facts. A variant marked
``fault: crash`` kills its worker with SIGSEGV mid-job, ``fault: hang`` spins forever, ``wrong``
computes a wrong C; the supervisor must record crash / timeout / wrong_answer, replace the
worker, and finish every other job on whichever of two stand-in devices is free.
"""

import collections
import csv
import hashlib
import json
import os
import sys
import time
import types
from dataclasses import asdict
from pathlib import Path

import pytest

from harness import kernels
from harness.build import copy_device_plugin, write_test_data
from harness.shapes import make_shape
from remote_agent import contract
from remote_agent.agent import Agent, AgentError
from remote_agent.runners import gpu
from remote_agent.supervisor import Supervisor, SupervisorError

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "gpu_standin.py"
MATMUL_PARAMS = ["a_ptr", "b_ptr", "c_ptr", "ws_ptr", "lock_ptr", "M", "N", "K", "stride_am", "stride_ak",
                 "stride_bk", "stride_bn", "stride_cm", "stride_cn"]
HIDDEN = [{"name": "global_scratch", "type": "*i8", "hidden": True},
          {"name": "profile_scratch", "type": "*i8", "hidden": True}]
PTR = {"fp16": "*fp16", "bf16": "*bf16", "fp32": "*fp32"}


def _matmul_launch(dtype, c_dtype=None, **extra):
    types_ = {"a_ptr": PTR[dtype], "b_ptr": PTR[dtype], "c_ptr": PTR[c_dtype or dtype], "ws_ptr": "*fp32",
              "lock_ptr": "*i32"}
    params = [{"name": n, "type": types_.get(n, "i32")} for n in MATMUL_PARAMS] + HIDDEN
    launch = {"entry": "matmul_kernel", "threads": 128, "block": [128, 1, 1], "shared": 0, "num_ctas": 1,
              "global_scratch_size": 0, "profile_scratch_size": 0, "params": params, "constexprs": {},
              "divisible": []}
    launch.update(extra)
    return launch


def _descriptors(misread=False):
    """The tensormap parameters of A (M x K) and B (K x N) tiles, each followed by its view's shape
    (i32) and strides (i64); ``misread``: A's view swaps M and K but not their strides (a wrong plan)."""
    out = []
    for name, dims, strides in (("a_desc", ["M", "K"], ["stride_am", "stride_ak"]),
                                ("b_desc", ["K", "N"], ["stride_bk", "stride_bn"])):
        if misread and name == "a_desc":
            dims = dims[::-1]
        out.append({"name": name, "type": "tensormap", "operand": name[0], "shape": dims, "strides": strides,
                    "block": [16, 16], "swizzle": 1, "elem_size": 2, "elem_type": 6})
        out += [{"name": n, "type": "i32"} for n in dims] + [{"name": n, "type": "i64"} for n in strides]
    return out


def _support(dtype):
    fill = {"entry": "fill_kernel", "threads": 128, "shared": 0,
            "params": [{"name": "out_ptr", "type": PTR[dtype]}, {"name": "n", "type": "i64"},
                       {"name": "seed", "type": "i32"}] + HIDDEN, "constexprs": {"BLOCK": 1024}}
    error = {"entry": "error_kernel", "threads": 128, "shared": 0,
             "params": [{"name": "c_ptr", "type": PTR[dtype]}, {"name": "ref_ptr", "type": "*fp32"},
                        {"name": "out_ptr", "type": "*fp32"}, {"name": "n", "type": "i64"},
                        {"name": "rtol", "type": "fp32"}, {"name": "atol", "type": "fp32"}] + HIDDEN,
             "constexprs": {"BLOCK": 1024}}
    return fill, error


def make_bundle(root, faults=(), reference_fault=None):
    """A GPU bundle with hand-written launch facts (what triton_gpu records) and stand-in images."""
    bundle = Path(root)
    (bundle / "artifacts").mkdir(parents=True, exist_ok=True)
    image = bundle / "artifacts" / "kernel.cubin"
    image.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(57))
    bad = bundle / "artifacts" / "garbage.cubin"
    bad.write_bytes(b"this is not an ELF image")
    sha = hashlib.sha256(image.read_bytes()).hexdigest()
    matmul = kernels.get("matmul")  # the shapes as the host's build writes them from the declaration
    shapes = [asdict(e) for e in write_test_data(matmul, types.SimpleNamespace(is_gpu=True), [
        make_shape(32, 48, 64, "fp16", "NN"), make_shape(40, 24, 56, "bf16", "TN")], root, 7)]
    support = {}
    for dtype in ("fp16", "bf16", "fp32"):
        fill, error = _support(dtype)
        support["fill_%s" % dtype] = {"artifact": "artifacts/kernel.cubin", "sha256": sha, "launch": fill}
        support["error_%s" % dtype] = {"artifact": "artifacts/kernel.cubin", "sha256": sha, "launch": error}
        ref = _matmul_launch(dtype, "fp32", **({"fault": reference_fault} if reference_fault else {}))
        support["reference_%s" % dtype] = {"artifact": "artifacts/kernel.cubin", "sha256": sha, "launch": ref,
                                           "config": {"BLOCK_M": 64, "BLOCK_N": 64}}
    variants, jobs = [], []
    names = ["v%02d" % i for i in range(6)] + list(faults)
    for name in names:
        for dtype in ("fp16", "bf16"):
            vid = "%s_%s" % (name, dtype)
            launch = _matmul_launch(dtype)
            artifact, digest = "artifacts/kernel.cubin", sha
            if name in ("crash", "hang", "wrong", "sticky"):
                launch["fault"] = name
            if name == "garbage":
                artifact, digest = "artifacts/garbage.cubin", hashlib.sha256(bad.read_bytes()).hexdigest()
            if name == "tampered":
                digest = "0" * 64
            if name in ("tma", "tma_misread"):  # host-made descriptors of A and B, as triton_gpu records them
                launch["params"] = launch["params"][:-2] + _descriptors(name == "tma_misread") + HIDDEN
            if name == "misfit":  # specialized for a unit K stride of A: wrong for the TN shape
                launch["constexprs"] = {"stride_ak": 1}
                launch["params"] = [p for p in launch["params"] if p["name"] != "stride_ak"]
            variants.append({"id": vid, "config": {"BLOCK_M": 32, "fault": name if name in faults else ""},
                             "dtype": dtype, "specialization": [dtype], "status": "ok", "artifact": artifact,
                             "sha256": digest, "message": "", "launch": launch, "compile_seconds": 1.0})
            for s in shapes:
                if s["dtype"] == dtype:
                    jobs.append({"variant": vid, "shape": s["id"], "grid": [1, 1, 1]})
    manifest = {
        "kernel": "matmul", "target": {"name": "gpu-node", "backend": "cuda", "gpu_arch": "90", "profiler": "events",
                                       "events": [], "arch": "x86_64"},
        "toolchain": {"kind": "triton", "triton_version": "3.9.0", "support_block": 1024, "support": support},
        "variants": variants, "shapes": shapes, "jobs": jobs, "pruned": [], "seed": 7,
        "config_names": ["BLOCK_M", "fault"],
        "tolerances": matmul.tolerances, "checks": matmul.describe_checks(), "device_reference": "matmul",
        "device_plugin": copy_device_plugin(matmul, bundle), "data_on_device": True, "schema_version": contract.MANIFEST_SCHEMA, "harness_version": "test", "created": "",
    }
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


def options(**kw):
    base = dict(warmup=1, iters=3, timeout=20.0, rerun_all=False, profiler=None, run_under=None, devices=None,
                min_time_ms=1.0)
    base.update(kw)
    return types.SimpleNamespace(**base)


def standin_runner(monkeypatch, devices=("cuda:0", "cuda:1"), command=None, starts=None):
    """make_gpu_runner as on a node with len(devices) GPUs; the workers are the real
    ``python -m remote_agent.runners.gpu_worker worker`` with the stand-in API in place of libcuda.
    ``starts``: a Counter of the workers started per device."""
    monkeypatch.setenv("HARNESS_GPU_API", "tests.gpu_standin:StandinApi")
    monkeypatch.setenv("PYTHONPATH", str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def factory(bundle, manifest, opts, log):
        runner = gpu.GpuRunner(bundle, manifest, opts, log, [(d, str(i)) for i, d in enumerate(devices)])
        if command:
            runner.worker_command = command
        if starts is not None:
            start = runner.worker_command
            runner.worker_command = lambda device: starts.update([device]) or start(device)
        return runner

    monkeypatch.setattr(gpu, "make_gpu_runner", factory)


def run_agent(bundle, results, opts, monkeypatch, **kw):
    standin_runner(monkeypatch, **kw)
    logs = []
    agent = Agent(str(bundle), str(results), opts, out=open(os.devnull, "w"), log=logs.append)
    agent.run()
    with open(results, newline="") as f:
        return list(csv.DictReader(f)), logs


def test_crash_hang_wrong_and_bad_images_are_recorded_and_the_rest_finishes(tmp_path, monkeypatch):
    bundle = make_bundle(tmp_path / "b", faults=("crash", "hang", "wrong", "garbage", "tampered", "sticky"))
    results = tmp_path / "results.csv"
    start, starts = time.monotonic(), collections.Counter()
    rows, logs = run_agent(bundle, results, options(timeout=3.0), monkeypatch, starts=starts)
    elapsed = time.monotonic() - start
    by = {(r["variant_id"], r["shape_id"]): r for r in rows}
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert len(rows) == len(manifest["jobs"]) == len(by)  # one row per job, none twice
    status = lambda v, s: by[(v, s)]["status"]
    for shape, dtype in (("32x48x64_fp16_NN", "fp16"), ("40x24x56_bf16_TN", "bf16")):
        assert status("crash_" + dtype, shape) == contract.CRASH
        assert "SIGSEGV" in by[("crash_" + dtype, shape)]["message"]
        assert status("hang_" + dtype, shape) == contract.TIMEOUT
        assert "3s" in by[("hang_" + dtype, shape)]["message"]
        assert status("wrong_" + dtype, shape) == contract.WRONG_ANSWER
        assert float(by[("wrong_" + dtype, shape)]["rel_err"]) > contract.REL_ERR_TOL[dtype]
        assert status("garbage_" + dtype, shape) == contract.LOAD_ERROR
        assert "INVALID_IMAGE" in by[("garbage_" + dtype, shape)]["message"]
        # a lost context: the worker reports the job and leaves; the next job must not be blamed
        assert status("sticky_" + dtype, shape) == contract.CRASH
        assert "ILLEGAL_ADDRESS" in by[("sticky_" + dtype, shape)]["message"]
        assert status("tampered_" + dtype, shape) == contract.LOAD_ERROR
        assert "hash" in by[("tampered_" + dtype, shape)]["message"]
        for i in range(6):  # every healthy variant ran, checked and timed
            r = by[("v%02d_%s" % (i, dtype), shape)]
            assert r["status"] == contract.OK, r
            assert float(r["rel_err"]) < contract.REL_ERR_TOL[dtype]
            assert float(r["err_ratio"]) == 0.0
            assert float(r["time_ns_median"]) > 0 and int(r["iterations"]) >= 3
            # sampled by the rule every runner uses: at least --iters samples, the noise recorded
            assert int(r["samples"]) == int(r["iterations"]) >= 3 and float(r["noise"]) >= 0
            assert r["profiler"] == "events" and r["ctr_regs"] == "96"
    # Both workers came up and ran jobs, and no device was given up. Which device ran the healthy
    # variants is timing: a free worker takes the next job, so one device may spend the run in a
    # hang and restarts while the other runs them all. (Tampered rows name cuda:0 unrun.)
    assert all(any("worker for %s ready" % d in l for l in logs) for d in ("cuda:0", "cuda:1"))
    assert {r["device"] for r in rows if not r["variant_id"].startswith("tampered")} == {"cuda:0", "cuda:1"}
    assert not any("giving up" in l for l in logs)
    for d in ("cuda:0", "cuda:1"):  # each worker lost to a crash or hang was replaced
        killed = [r for r in rows if r["device"] == d and ("SIGSEGV" in r["message"] or r["status"] == contract.TIMEOUT)]
        lost = [r for r in rows if r["device"] == d and r["status"] in (contract.CRASH, contract.TIMEOUT)]
        assert 1 + len(killed) <= starts[d] <= 1 + len(lost)  # a sticky last job's worker may leave unreplaced
    assert any("timeout on" in l for l in logs) and any("crash on" in l for l in logs)
    assert elapsed < 60


def test_a_resumed_run_runs_nothing_twice(tmp_path, monkeypatch):
    bundle = make_bundle(tmp_path / "b", faults=("crash",))
    results = tmp_path / "results.csv"
    rows1, _ = run_agent(bundle, results, options(), monkeypatch)
    rows2, _ = run_agent(bundle, results, options(), monkeypatch)
    assert len(rows2) == len(rows1)
    assert [r["status"] for r in rows2].count(contract.CRASH) == 2


def test_wrong_reference_stops_the_run(tmp_path, monkeypatch):
    """The reference kernel is checked against the host at start; if it is wrong, nothing can be."""
    bundle = make_bundle(tmp_path / "b", reference_fault="wrong")
    with pytest.raises(AgentError, match="reference kernel disagrees"):
        run_agent(bundle, tmp_path / "results.csv", options(), monkeypatch, devices=("cuda:0",))


def test_workers_that_cannot_start_end_the_run_with_a_clear_error(tmp_path, monkeypatch):
    bundle = make_bundle(tmp_path / "b")
    dead = lambda device: [sys.executable, "-c", "import sys; sys.stderr.write('no GPU here\\n'); sys.exit(3)"]
    why = r"no worker could start on any device; \d+ jobs not run \(cuda:0: worker exited 3: no GPU here\)"
    with pytest.raises(AgentError, match=why):  # the worker's own last words say why
        run_agent(bundle, tmp_path / "results.csv", options(), monkeypatch, devices=("cuda:0",), command=dead)


def test_supervisor_kills_a_hung_worker_group_and_replaces_it(tmp_path):
    """Generic supervisor, raw protocol: a worker process (and its child) that hang are killed."""
    script = tmp_path / "w.py"
    script.write_text(
        "import json, subprocess, sys, time\n"
        "print(json.dumps({'ready': True}), flush=True)\n"
        "for line in sys.stdin:\n"
        "    req = json.loads(line)\n"
        "    if req.get('op') == 'exit': break\n"
        "    if req['what'] == 'hang':\n"
        "        open(sys.argv[1], 'w').write(str(subprocess.Popen(['sleep', '600']).pid))\n"
        "        time.sleep(600)\n"
        "    print(json.dumps({'id': req['id'], 'result': {'status': 'ok', 'message': req['what']}}), flush=True)\n")
    pidfile = tmp_path / "child.pid"
    sup = Supervisor(["d0"], lambda d: [sys.executable, str(script), str(pidfile)], job_timeout=2.0,
                     log=lambda m: None)
    jobs = [("a", {"what": "a"}), ("h", {"what": "hang"}), ("b", {"what": "b"})]
    out = {key: res for key, dev, res in sup.run(jobs)}
    assert out["a"]["status"] == "ok" and out["b"]["status"] == "ok"
    assert out["h"]["status"] == contract.TIMEOUT
    assert sup.restarts["d0"] == 1
    child = int(pidfile.read_text())
    time.sleep(0.2)
    assert _gone(child)  # the grandchild went with the worker's process group


def test_a_busy_worker_has_its_next_job_in_its_pipe_and_a_dead_worker_s_is_run_again(tmp_path):
    """Raw protocol: while a worker runs a job, its next job is already in its pipe (it starts it
    as soon as it replies, not once the supervisor has read the reply); a job sent ahead to a
    worker that then crashes, or leaves after replying, is run by its successor. Sent one at a time
    (``ahead=False``), the pipe is empty during each job."""
    script = tmp_path / "w.py"
    script.write_text(
        "import json, os, select, sys\n"
        "stdin = os.fdopen(0, 'rb', buffering=0)  # unbuffered: select sees what is still in the pipe\n"
        "print(json.dumps({'ready': True}), flush=True)\n"
        "while True:\n"
        "    line = stdin.readline()\n"
        "    if not line: break\n"
        "    req = json.loads(line)\n"
        "    if req.get('op') == 'exit': break\n"
        "    if req['what'] == 'crash': os._exit(9)\n"
        "    waiting = bool(select.select([stdin], [], [], 0.5)[0])\n"
        "    reply = {'id': req['id'], 'result': {'status': 'ok', 'message': str(waiting)}}\n"
        "    if req['what'] == 'leave': reply['exiting'] = True\n"
        "    print(json.dumps(reply), flush=True)\n"
        "    if req['what'] == 'leave': os._exit(3)\n")
    jobs = [("a", {"what": "a"}), ("c", {"what": "crash"}), ("b", {"what": "b"}), ("l", {"what": "leave"}),
            ("d", {"what": "d"}), ("e", {"what": "e"})]
    sup = Supervisor(["d0"], lambda d: [sys.executable, str(script)], job_timeout=10.0, log=lambda m: None)
    out = {key: res for key, dev, res in sup.run(jobs)}
    assert out["c"]["status"] == contract.CRASH
    assert {k: out[k]["status"] for k in "abld"} == dict.fromkeys("abld", "ok") and out["e"]["status"] == "ok"
    assert out["a"]["message"] == "True"  # the crash job was waiting while a ran
    assert out["b"]["message"] == "True" and out["d"]["message"] == "True"
    assert out["e"]["message"] == "False"  # the last job: nothing after it
    assert sup.restarts["d0"] == 2  # after the crash and after the worker that left
    one_at_a_time = Supervisor(["d0"], lambda d: [sys.executable, str(script)], log=lambda m: None, ahead=False)
    out = {key: res for key, dev, res in one_at_a_time.run([("a", {"what": "a"}), ("b", {"what": "b"})])}
    assert out["a"]["message"] == "False" and out["b"]["message"] == "False"


def _gone(pid):
    """Dead: no such process, or a zombie waiting for init to reap it."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_an_artifact_is_not_run_outside_its_specialization(tmp_path, monkeypatch):
    bundle = make_bundle(tmp_path / "b", faults=("misfit",))
    rows, _ = run_agent(bundle, tmp_path / "results.csv", options(), monkeypatch, devices=("cuda:0",))
    by = {(r["variant_id"], r["shape_id"]): r for r in rows}
    assert by[("misfit_fp16", "32x48x64_fp16_NN")]["status"] == contract.OK  # NN: stride_ak is 1
    tn = by[("misfit_bf16", "40x24x56_bf16_TN")]
    assert tn["status"] == contract.LOAD_ERROR and "stride_ak=1" in tn["message"]


def test_host_made_tensor_descriptors_view_their_operands(tmp_path, monkeypatch):
    # a tensormap parameter is encoded by the worker from the run-time values its launch facts name
    # (the stand-in keeps what cuTensorMapEncodeTiled got, and checks each view against its operand);
    # a view that pairs a dimension with the other one's stride reads the wrong memory: an illegal
    # address. The TN shape's A is K x M in memory: its row pitch (M = 40 halves) is not 16-byte
    # aligned, which the encoder refuses: that variant cannot run on that shape (load_error)
    bundle = make_bundle(tmp_path / "b", faults=("tma", "tma_misread"))
    rows, _ = run_agent(bundle, tmp_path / "results.csv", options(), monkeypatch, devices=("cuda:0",))
    by = {(r["variant_id"], r["shape_id"]): r for r in rows}
    assert by[("tma_fp16", "32x48x64_fp16_NN")]["status"] == contract.OK
    tn = by[("tma_bf16", "40x24x56_bf16_TN")]
    assert tn["status"] == contract.LOAD_ERROR and "cuTensorMapEncodeTiled" in tn["message"], tn
    misread = by[("tma_misread_fp16", "32x48x64_fp16_NN")]
    assert misread["status"] == contract.CRASH and "tensor descriptor a_desc" in misread["message"], misread


def test_without_the_flush_small_inputs_rotate(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GPU_FLUSH", "0")
    bundle = make_bundle(tmp_path / "b")
    rows, _ = run_agent(bundle, tmp_path / "results.csv", options(), monkeypatch, devices=("cuda:0",))
    assert all(r["status"] == contract.OK for r in rows)
    assert all("inputs rotated over 8 copies" in r["message"] for r in rows)


def test_driver_calls_reach_each_vendors_functions():
    # DriverApi's shared methods call the vendor's functions by the names in CALLS, each declared
    # with a signature (a missing or misspelt name would only show on that vendor's hardware)
    import ctypes

    from remote_agent.runners.cuda import CudaApi
    from remote_agent.runners.hip import HipApi

    class Lib(object):
        def __init__(self):
            self.called = []

        def __getattr__(self, name):
            return lambda *args: self.called.append(name) or 0

    for cls in (CudaApi, HipApi):
        api = cls.__new__(cls)
        api.lib, api.stream = Lib(), None
        api.device_count(), api.device_name(0), api.mem_info(), api.alloc(16), api.free(1), api.dtoh(0, 4)
        api.htod(0, b"abcd"), api.dtod(1, 2, 4), api.memset16(1, 0, 4), api.unload_module(api.load_module(b""))
        api.get_function(1, "f"), api.synchronize(), api.record(1), api.elapsed_ms(1, 2), api.destroy_event(1)
        api.launch(1, (1, 1, 1), (32, 1, 1), 0, (ctypes.c_void_p * 1)())
        assert sorted(set(api.lib.called)) == sorted(cls.CALLS.values()), cls
        assert set(cls.CALLS.values()) <= set(cls.SIGNATURES), cls
    assert set(CudaApi.CALLS) == set(HipApi.CALLS)
    # a cluster launch (kernels built with num_ctas): cuLaunchKernelEx with CUlaunchConfig and two
    # CUlaunchAttribute, laid out as cuda.h has them (72 and 56 bytes)
    from remote_agent.runners.cuda import LaunchAttribute, LaunchConfig
    from remote_agent.runners.gpu_api import GpuError

    api = CudaApi.__new__(CudaApi)
    api.lib, api.stream = Lib(), None
    api.launch_cluster(1, (66, 1, 1), 2, (384, 1, 1), 0, (ctypes.c_void_p * 1)())
    assert api.lib.called == ["cuLaunchKernelEx"] and "cuLaunchKernelEx" in CudaApi.SIGNATURES
    assert (ctypes.sizeof(LaunchAttribute), ctypes.sizeof(LaunchConfig)) == (72, 56)
    api.lib = type("OldDriver", (), {})()  # a driver before CUDA 12.0: the launch is refused in one line
    with pytest.raises(GpuError, match="no cuLaunchKernelEx") as refused:
        api.launch_cluster(1, (66, 1, 1), 2, (384, 1, 1), 0, (ctypes.c_void_p * 1)())
    assert refused.value.load
    assert LaunchConfig.stream.offset == 32 and LaunchAttribute.value.offset == 8


def test_a_device_runs_the_jobs_meant_for_it_before_those_any_device_may_run():
    """A winners' re-measure pinned to a device runs there first while the other devices take the
    search's jobs (left for the end, it would keep one device busy while the others idle); jobs
    meant for one device do not count as the others' work (the stream asks for the next rounds)."""
    import collections

    from remote_agent.supervisor import _free, _take

    workers = {"cuda:0": None, "cuda:1": None}
    pending = collections.deque([("r1", {"device": "cuda:0"}), ("r2", {"device": "cuda:0"}), ("s1", {}),
                                 ("q1", {"device": "cuda:1"}), ("s2", {}), ("gone", {"device": "cuda:7"})])
    device_of = lambda request: request.get("device")  # noqa: E731
    assert _free(pending, device_of, workers) == 3  # s1, s2 and the job of a dropped device
    order = {"cuda:0": [], "cuda:1": []}
    while pending:
        for device in ("cuda:0", "cuda:1"):
            job = _take(pending, device, device_of, workers)
            if job is not None:
                order[device].append(job[0])
    assert order == {"cuda:0": ["r1", "r2", "s2"], "cuda:1": ["q1", "s1", "gone"]}
    assert _take(collections.deque([("r", {"device": "cuda:0"})]), "cuda:1", device_of, workers) is None


def test_of_the_jobs_any_device_may_run_the_costliest_shape_s_go_first():
    """The slowest shapes' search ends first, so that their re-measure runs beside the other
    shapes' search rather than alone on one device at the end: a free device takes the first job
    of the kind whose jobs took longest so far (a kind none of whose jobs ran yet counts as the
    costliest: how long it takes is learnt first); a job pinned to it still comes before all."""
    import collections

    from remote_agent.supervisor import Supervisor, _take

    sup = Supervisor(["cuda:0"], lambda device: [], kind_of=lambda request: request["shape"])
    for shape, seconds in (("small", 0.01), ("small", 0.03), ("large", 0.5)):
        sup._count({"shape": shape}, seconds)
    assert sup._cost({"shape": "small"}) == pytest.approx(0.02) and sup._cost({"shape": "new"}) is None
    pending = collections.deque([("s1", {"shape": "small"}), ("l1", {"shape": "large"}), ("s2", {"shape": "small"}),
                                 ("l2", {"shape": "large"}), ("n1", {"shape": "new"}),
                                 ("p1", {"shape": "small", "device": "cuda:0"})])
    device_of = lambda request: request.get("device")  # noqa: E731
    order = []
    while pending:
        order.append(_take(pending, "cuda:0", device_of, {"cuda:0": None}, sup._cost)[0])
    assert order == ["p1", "n1", "l1", "l2", "s1", "s2"]
