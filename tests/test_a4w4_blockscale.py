"""The MXFP4 (a4w4 blockscale) GEMM kernel: aiter's packing and e8m0 scales in numpy, seeded data
and its fp64 reference, the device plug-in's host reference, pruning and seeds, the Triton source
run by Triton's interpreter against the fp64 reference, real host compiles for sm90 and gfx950,
aiter's untuned a4w4 list as a shapes source, and its Triton JSON read back the way aiter reads it."""

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from harness.kernels import a4w4_blockscale as ak
from harness.kernels.a4w4_blockscale import mxfp4
from harness.space import first_pruning_rule
from harness.targets import load_targets
from remote_agent import contract
from remote_agent.results import ResultsWriter

ROOT = Path(__file__).resolve().parents[1]
AITER = ROOT / "tests" / "data" / "consumers" / "aiter"


def _targets():
    targets = load_targets(ROOT / "targets.yaml")
    gfx950 = dataclasses.replace(targets["mi300"], name="mi355", gpu_arch="gfx950", shared_mem_max=163840,
                                 multiprocessors=256)
    return targets["gpu-node"], gfx950


def _shape(M, N, K):
    return SimpleNamespace(M=M, N=N, K=K, dtype="mxfp4")


def _device_plugin():
    spec = importlib.util.spec_from_file_location("a4w4_device", ak.KERNEL.device_plugin)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- aiter's MXFP4 layout in numpy ---------------------------------------------------------
def test_packing_is_low_nibble_first_as_aiter_packs():
    # aiter's tests: x = x_low | x_high << 4, and mxfp4_to_f32 reads x & 0xF first, then x >> 4
    low, high = np.array([[1, 7, 15]], np.uint8), np.array([[2, 9, 0]], np.uint8)
    packed = low | (high << 4)
    assert mxfp4.unpack(packed).tolist() == [[1, 2, 7, 9, 15, 0]]
    assert np.array_equal(mxfp4.pack(mxfp4.unpack(packed)), packed)
    assert mxfp4.E2M1_VALUES[mxfp4.unpack(packed)].tolist() == [[0.5, 1.0, 6.0, -0.5, -6.0, 0.0]]
    assert mxfp4.scale_values(np.array([127, 124, 130, 0])).tolist() == [1.0, 0.125, 8.0, 2.0 ** -127]
    assert np.isnan(mxfp4.scale_values(np.array([255]))[0])


def test_reference_is_the_dequantized_product_by_plain_loops():
    shape = _shape(3, 5, 64)
    d = ak.make_data(shape, 7)
    assert d["a"].shape == (3, 32) and d["a"].dtype == np.uint8 and d["a_scale"].shape == (3, 2)
    assert d["b"].shape == (5, 32) and d["b_scale"].shape == (5, 2)
    assert d["a_scale"].min() >= 124 and d["a_scale"].max() <= 130
    for m in range(3):
        for n in range(5):
            want = 0.0
            for k in range(64):
                a = mxfp4.E2M1_VALUES[(int(d["a"][m, k // 2]) >> (4 * (k % 2))) & 0xF] * 2.0 ** (
                    int(d["a_scale"][m, k // 32]) - 127)
                b = mxfp4.E2M1_VALUES[(int(d["b"][n, k // 2]) >> (4 * (k % 2))) & 0xF] * 2.0 ** (
                    int(d["b_scale"][n, k // 32]) - 127)
                want += a * b
            assert d["ref"][m, n] == np.float32(want)
    again = ak.make_data(shape, 7)
    assert all(np.array_equal(d[k], again[k]) for k in d)
    assert not np.array_equal(d["a"], ak.make_data(shape, 8)["a"])


def test_device_plugins_host_reference_agrees_with_numpy_and_plain_python(monkeypatch):
    dev = _device_plugin()
    shape = _shape(4, 3, 96)
    d = ak.make_data(shape, 1)
    args = (d["a"].tobytes(), d["a_scale"].tobytes(), d["b"].tobytes(), d["b_scale"].tobytes(), 4, 3, 96)
    with_numpy = dev.host_reference(*args)
    assert np.allclose(np.array(with_numpy).reshape(4, 3), ak.reference(d["a"], d["a_scale"], d["b"], d["b_scale"]),
                       rtol=0, atol=0)
    monkeypatch.setitem(sys.modules, "numpy", None)  # the node may have no numpy: the plain path
    assert dev.host_reference(*args) == with_numpy
    op = {o["name"]: (o["dtype"], o["shape"]) for o in dev.shape(67, 45, 320)["operands"]}
    assert op == {"a": ("u8", [67, 160]), "b": ("u8", [45, 160]), "c": ("bf16", [67, 45]),
                  "a_scale": ("e8m0", [67, 10]), "b_scale": ("e8m0", [45, 10]), "ref": ("fp32", [67, 45])}
    assert dev.strides(67, 45, 320) == ak.strides(_shape(67, 45, 320))
    assert list(dev.LIBRARIES) == [ak.KERNEL.gpu_library]


# ---- pruning and seeds ---------------------------------------------------------------------
def _why(config, shape, target):
    rule = first_pruning_rule(ak.KERNEL.rules_for(target), config, shape, target)
    return rule.name if rule else None


def test_pruning_rules_name_what_is_wrong():
    sm90, gfx950 = _targets()
    base = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=256, GROUP_M=8, SPLIT_K=1, num_warps=4, num_stages=3)
    big = _shape(4096, 7168, 2304)
    assert _why(base, big, sm90) is None and _why(base, big, gfx950) is None
    assert _why(base, big, dataclasses.replace(sm90, gpu_arch="80")) == "no_scaled_dot"
    assert _why(base, big, dataclasses.replace(gfx950, gpu_arch="gfx942")) == "no_scaled_dot"
    assert _why(base, _shape(4096, 7168, 2300), sm90) == "k_not_mx_block"
    assert _why(dict(base, BLOCK_M=128), _shape(32, 7168, 2048), sm90) == "tile_m_exceeds_dim"


def test_seeds_are_feasible_for_the_default_shapes_on_both_targets():
    from harness.shapes import parse_shape_list

    shapes = parse_shape_list(ak.DEFAULT_SHAPES["gpu"], "mxfp4", problem=ak.PROBLEM)
    for target in _targets():
        for shape in shapes:
            seeds = ak.KERNEL.seed_configs(shape, target)
            assert seeds, (target.name, shape)
            assert all(_why(c, shape, target) is None for c in seeds)
            if target.backend == "hip":
                assert all(c["num_stages"] == 2 and "waves_per_eu" in c for c in seeds)
    skinny = ak.KERNEL.seed_configs(shapes[0], _targets()[0])
    assert all(c["BLOCK_M"] == 32 for c in skinny) and any(c["SPLIT_K"] > 1 for c in skinny)


# ---- the Triton source under Triton's interpreter --------------------------------------------
INTERPRET = r"""
import json
import numpy as np
from types import SimpleNamespace
from harness.kernels import a4w4_blockscale as ak
from harness.kernels.a4w4_blockscale import mxfp4, triton_kernel as tk

class DType:
    def __init__(self, name): self.name = name
    def __str__(self): return "torch." + self.name

DTYPES = {}  # one object per dtype, kept alive: Triton caches a pointer type by the dtype object

class Tensor:
    # numpy memory dressed as the torch tensor the interpreter expects
    def __init__(self, array, dtype):
        self.array = array
        self.dtype = DTYPES.setdefault(dtype, DType(dtype))
    def data_ptr(self): return self.array.ctypes.data
    def untyped_storage(self): return self
    def cpu(self): return self
    def new_empty(self, *a, **k): return self
    def set_(self, *a): return self
    def storage_offset(self): return 0
    def size(self): return self.array.shape
    def stride(self): return tuple(s // self.array.itemsize for s in self.array.strides)
    def copy_(self, other): return self

def rel(c, ref):
    return float(np.linalg.norm(c.astype(np.float64) - ref) / np.linalg.norm(ref))

out = {}
M, N = 20, 96
# K = 320: a masked K tail (2.5 steps of 128); 512 with 256-value steps; split-K 2 of 3 steps
for K, bm, bn, bk, gm, split in ((320, 16, 32, 128, 1, 1), (512, 16, 64, 256, 1, 1), (320, 32, 32, 128, 2, 2)):
    shape = SimpleNamespace(M=M, N=N, K=K, dtype="mxfp4")
    d = ak.make_data(shape, 3)
    t = {"a": Tensor(d["a"], "uint8"), "b": Tensor(d["b"], "uint8"),
         "a_scale": Tensor(d["a_scale"].view(np.int8), "int8"), "b_scale": Tensor(d["b_scale"].view(np.int8), "int8")}
    scalars = [M, N, K] + [ak.strides(shape)[k] for k in tk.ARGS[10:]]
    c = np.zeros((M, N), np.float32)
    tiles = mxfp4.cdiv(M, bm) * mxfp4.cdiv(N, bn)
    ws, locks = np.zeros(split * M * N, np.float32), np.zeros(tiles, np.int32)
    tk.a4w4_blockscale_kernel[(tiles, split, 1)](
        t["a"], t["b"], Tensor(c, "float32"), t["a_scale"], t["b_scale"], Tensor(ws, "float32"),
        Tensor(locks, "int32"), *scalars, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, SPLIT_K=split,
        EVEN_K=K % bk == 0)
    key = "kernel K%d %dx%dx%d split %d" % (K, bm, bn, bk, split)
    out[key] = rel(c, d["ref"])
    out[key + " counters left"] = float(np.abs(locks).max())
c = np.zeros((M, N), np.float32)
tk.reference_kernel[(mxfp4.cdiv(M, 32) * mxfp4.cdiv(N, 32), 1, 1)](
    t["a"], t["b"], Tensor(c, "float32"), t["a_scale"], t["b_scale"], *scalars, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
out["reference"] = rel(c, d["ref"])
codes = np.zeros(3000, np.uint8)
tk.fill_kernel[(3, 1, 1)](Tensor(codes, "uint8"), 3000, 5, BLOCK=1024)
scales = np.zeros(3000, np.int8)
tk.fill_kernel[(3, 1, 1)](Tensor(scales, "int8"), 3000, 5, BLOCK=1024)
s = scales.view(np.uint8)
out["fill"] = [len(set(codes.tolist())), int(s.min()), int(s.max()), len(set(s.tolist()))]
print(json.dumps(out))
"""


def test_kernels_run_right_under_tritons_interpreter():
    """The Triton source (tl.dot_scaled decoded by Triton's own e2m1 rules, low nibble first)
    against the numpy fp64 reference of aiter's packing: exact, since every dequantized value and
    product is a short dyadic number (fp32 output here)."""
    pytest.importorskip("triton")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", INTERPRET], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    distinct, s_lo, s_hi, s_distinct = out.pop("fill")
    assert distinct == 256 and (s_lo, s_hi, s_distinct) == (124, 130, 7)
    assert len(out) == 7
    for key, value in out.items():
        assert value == 0, (key, value)


# ---- real compiles on this host (Triton, no GPU) ---------------------------------------------
BUILD_CONFIGS = [dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=2, num_warps=4, num_stages=2),
                 dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=256, GROUP_M=8, SPLIT_K=1, num_warps=4, num_stages=3)]


@pytest.mark.slow
@pytest.mark.parametrize("which", ["sm90", "gfx950"])
def test_builds_for_sm90_and_gfx950(which, tmp_path):
    """A real bundle per target: the variants, the fill kernels per input dtype (packed codes and
    e8m0 scales), the reference kernel; gfx950's main kernel uses the scaled fp4 MFMA."""
    pytest.importorskip("triton")
    from harness.build import BuildOptions, build
    from harness.shapes import parse_shape_list

    target = dict(zip(("sm90", "gfx950"), _targets()))[which]
    configs = BUILD_CONFIGS if which == "sm90" else [dict(c, waves_per_eu=0, matrix_instr_nonkdim=16)
                                                     for c in BUILD_CONFIGS]
    shapes = parse_shape_list("130x200x320", "mxfp4", problem=ak.PROBLEM)
    summary = build(ak.KERNEL, target, shapes, tmp_path, BuildOptions(jobs=2, only_configs=configs))
    m = json.loads((summary.bundle / "manifest.json").read_text())
    assert [v["status"] for v in m["variants"]] == ["ok", "ok"], [v["message"] for v in m["variants"]]
    assert sorted(m["toolchain"]["support"]) == ["error_bf16", "error_fp32", "fill_e8m0", "fill_u8", "reference_mxfp4"]
    assert m["device_reference"] == "a4w4_blockscale"
    assert [p["type"] for p in m["variants"][0]["launch"]["params"][:5]] == ["*u8", "*u8", "*bf16", "*i8", "*i8"]
    ops = {o["name"]: (o["dtype"], o["shape"]) for o in m["shapes"][0]["operands"]}
    assert ops["a"] == ("u8", [130, 160]) and ops["b_scale"] == ("e8m0", [200, 10])
    if which == "gfx950":
        from harness.compile.triton_gpu import TritonGpuCompiler

        compiler = TritonGpuCompiler(ak.KERNEL, target, tmp_path / "asm")
        job = compiler._job(configs[1], compiler.specialization(configs[1], shapes[0]))
        assert re.search(r"v_mfma_scale_f32_\w+_f8f6f4", _amdgcn(job))  # native fp4, not a bf16 upcast


def _amdgcn(job):
    """The AMDGCN text of a compile job, compiled in this process (the harness keeps binaries only)."""
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from harness.kernels.a4w4_blockscale import triton_kernel as tk

    attrs = {(i,): [["tt.divisibility", 16]] for i in job["divisible"]}
    src = ASTSource(fn=getattr(tk, job["fn"]), signature=job["signature"], constexprs=job["constexprs"], attrs=attrs)
    old = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        try:
            compiled = triton.compile(src, target=GPUTarget("hip", job["arch"], job["warp_size"]),
                                      options=job["options"])
        finally:
            if old is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = old
    return compiled.asm["amdgcn"]


# ---- aiter's untuned a4w4 list as a shapes source ----------------------------------------------
def test_aiters_a4w4_list_reads_as_mxfp4_shapes():
    from harness.shapes import MATMUL, read_shapes_file

    shapes = read_shapes_file(str(AITER / "a4w4_blockscale_untuned_gemm.csv"), "auto", "mxfp4", problem=ak.PROBLEM)
    rows = [line for line in (AITER / "a4w4_blockscale_untuned_gemm.csv").read_text().splitlines()[1:] if line]
    assert len(shapes) == len(set(rows)) == 182 and {s.dtype for s in shapes} == {"mxfp4"}
    three = read_shapes_file(str(AITER / "a4w4_blockscale_untuned_gemm.three.csv"), "auto", "mxfp4",
                             problem=ak.PROBLEM)
    assert [(s.M, s.N, s.K) for s in three] == [(32, 7168, 2048), (256, 4608, 7168), (4096, 7168, 2304)]
    assert ",".join("%dx%dx%d:mxfp4" % (s.M, s.N, s.K) for s in three) == ak.DEFAULT_SHAPES["gpu"]
    # the matmul does not take it as fp16 GEMMs any more: every row is listed, pointing here
    from harness.errors import HarnessError

    with pytest.raises(HarnessError) as err:
        read_shapes_file(str(AITER / "a4w4_blockscale_untuned_gemm.three.csv"), "auto", "fp16", problem=MATMUL)
    assert "no row" in str(err.value) or "a4w4_blockscale" in str(err.value)


# ---- aiter's Triton JSON (GEMM-AFP4WFP4) ------------------------------------------------------
META = {"arch": "sm90", "device": "NVIDIA H200", "cu_num": 132, "driver": "580", "toolchain": "triton 3.6.0",
        "triton": "3.6.0"}
SHAPES = [(32, 7168, 2048), (256, 4608, 7168), (4096, 7168, 2304), (16, 7168, 2048), (1024, 7168, 2048)]


def _results(path):
    names = list(ak.GPU_SPACE)
    writer = ResultsWriter(str(path), contract.results_header(names, []))
    for M, N, K in SHAPES:
        for i, (bm, split) in enumerate(((16, 1), (32, 2), (64, 4))):
            cfg = dict(BLOCK_M=bm, BLOCK_N=128, BLOCK_K=256, GROUP_M=1, SPLIT_K=split, num_warps=4, num_stages=3)
            ns = 10000.0 + 1000.0 * ((i + M) % 3)
            row = {"schema_version": contract.RESULTS_SCHEMA, "target": "h200", "kernel": "a4w4_blockscale",
                   "variant_id": "v%03d%d" % (M % 997, i), "shape_id": "%dx%dx%d_mxfp4" % (M, N, K), "M": M, "N": N,
                   "K": K, "dtype": "mxfp4", "layout": "", "device": "NVIDIA H200", "status": contract.OK,
                   "time_ns_median": ns, "time_ns_min": ns, "time_ns_p20": ns, "time_ns_p80": ns, "iterations": 10,
                   "tflops": 2.0 * M * N * K / ns / 1e3, "gbps": 1.0, "rel_err": 1e-3, "max_abs_err": 0.01,
                   "err_ratio": 0.0, "profiler": "events"}
            row.update({contract.CONFIG_PREFIX + k: v for k, v in cfg.items()})
            writer.write(row)
    writer.close()
    return pd.read_csv(path)


def test_triton_json_reads_back_the_way_aiter_reads_it_for_every_m(tmp_path):
    """aiter's gemm_afp4wfp4 asks get_gemm_config("GEMM-AFP4WFP4", M, N, 2 * K_packed): files per
    (N, unpacked K), M_LEQ_x keys; every tuned M finds a tuned key holding its best config."""
    from harness.report import triton_json

    df = _results(tmp_path / "results.csv")
    lines = []
    paths = triton_json.write_triton_json(df, None, META, tmp_path / "triton", say=lines.append)
    nk = sorted({(N, K) for _, N, K in SHAPES})
    assert [p.name for p in paths] == ["sm90-GEMM-AFP4WFP4-N=%d-K=%d.json" % nk_ for nk_ in nk] + [
        "sm90-GEMM-AFP4WFP4.json"]
    for M, N, K in SHAPES:
        configs = triton_json.read_triton_json(tmp_path / "triton" / ("sm90-GEMM-AFP4WFP4-N=%d-K=%d.json" % (N, K)))
        cfg, tuned = triton_json.lookup(configs, M)
        ours = df[(df["M"] == M) & (df["N"] == N) & (df["K"] == K)]
        best = ours.loc[ours["time_ns_median"].idxmin()]
        assert tuned
        assert (cfg["BLOCK_SIZE_M"], cfg["NUM_KSPLIT"], cfg["BLOCK_SIZE_K"]) == (
            best["cfg_BLOCK_M"], best["cfg_SPLIT_K"], 256)
        for key in ("waves_per_eu", "matrix_instr_nonkdim", "cache_modifier", "GROUP_SIZE_M", "num_warps"):
            assert key in cfg
    assert lines == []


# ---- the gfx950 check of a tune's configs ------------------------------------------------------
@pytest.mark.fresh_compile_cache
def test_gfx950_check_compiles_the_configs_a_tune_measured(tmp_path, capsys):
    pytest.importorskip("triton")
    from harness.kernels.a4w4_blockscale import gfx950_check

    rows = []
    for M, N, K in ((32, 7168, 2048), (32, 7168, 2048)):  # the same pair twice: checked once
        row = {"variant_id": "v1", "kernel": "a4w4_blockscale", "M": M, "N": N, "K": K}
        row.update({"cfg_" + k: v for k, v in BUILD_CONFIGS[0].items()})
        rows += [row, {"variant_id": "lib:dequantize+torch.matmul", "kernel": "a4w4_blockscale", "M": M, "N": N,
                       "K": K}]
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    assert gfx950_check.main([str(tmp_path / "results.csv"), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.strip() == "gfx950: 1 of 1 (config, shape) variants compiled (1 configs)"
    (tmp_path / "bad.csv").write_text("M,N\n1,2\n")
    assert gfx950_check.main([str(tmp_path / "bad.csv")]) == 2
    assert "no column" in capsys.readouterr().err


# ---- the GPU agent's path on the CPU stand-in ----------------------------------------------------
@pytest.mark.slow
def test_agent_checks_every_answer_and_times_the_library(tmp_path, monkeypatch):
    """A real sm90 bundle, the real GPU worker on the CPU stand-in (tests/a4w4_standin.py):
    packed codes and e8m0 scales filled on the 'device', the reference kernel checked against the
    device plug-in's host decode, every variant and the library checked against the reference
    and timed; the results then write aiter's GEMM-AFP4WFP4 JSON."""
    import csv

    pytest.importorskip("triton")
    from harness.build import BuildOptions, build
    from harness.library import request_gpu_library
    from harness.report import triton_json
    from harness.shapes import parse_shape_list
    from remote_agent.agent import Agent
    from remote_agent.runners import gpu
    from tests.test_gpu_supervisor import options

    shapes = parse_shape_list("130x200x320", "mxfp4", problem=ak.PROBLEM)
    summary = build(ak.KERNEL, _targets()[0], shapes, tmp_path / "b", BuildOptions(jobs=2, only_configs=BUILD_CONFIGS))
    request_gpu_library(summary.manifest, shapes, ak.KERNEL.gpu_library)
    summary.manifest.save(summary.bundle)
    monkeypatch.setenv("HARNESS_GPU_API", "tests.a4w4_standin:A4w4StandinApi")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr(gpu, "make_gpu_runner", lambda bundle, manifest, opts, log: gpu.GpuRunner(
        bundle, manifest, opts, log, [("cuda:0", "0")]))
    results, logs = tmp_path / "results.csv", []
    Agent(str(summary.bundle), str(results), options(), out=open(os.devnull, "w"), log=logs.append).run()
    with open(results, newline="") as f:
        rows = list(csv.DictReader(f))
    assert any("self-check mxfp4" in line for line in logs), logs
    assert len(rows) == 3 and [r["variant_id"] for r in rows].count("lib:dequantize+torch.matmul") == 1
    for r in rows:
        assert r["status"] == "ok", r
        assert 1e-4 < float(r["rel_err"]) < 1e-2  # a bf16 answer: about 2^-9 per element
    paths = triton_json.write_triton_json(pd.read_csv(results), None, META, tmp_path / "triton", say=logs.append)
    assert [p.name for p in paths] == ["sm90-GEMM-AFP4WFP4-N=200-K=320.json", "sm90-GEMM-AFP4WFP4.json"]
