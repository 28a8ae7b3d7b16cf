"""The fp8 block-scaled GEMM kernel: the numpy e4m3 codec, seeded data and its fp64 reference
(checked against a direct blockwise computation), pruning, real host compiles for sm90 and
gfx942, and aiter's blockscale Triton JSON read back the way aiter reads it."""

import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.errors import HarnessError
from harness.kernels import fp8_blockscale as fk
from harness.kernels.fp8_blockscale import fp8, rules
from harness.report import aiter_blockscale_csv as abs_csv
from harness.space import expand, first_pruning_rule
from harness.targets import load_targets
from remote_agent import contract
from remote_agent.results import ResultsWriter

ROOT = Path(__file__).resolve().parents[1]


def make_shape(M, N, K, dtype="fp8e4m3fn"):
    from types import SimpleNamespace

    return SimpleNamespace(M=M, N=N, K=K, dtype=dtype)


# ---- the e4m3 codec --------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", fp8.FORMATS)
def test_every_finite_code_round_trips(fmt):
    table = fp8.decode_table(fmt)
    codes = np.arange(256, dtype=np.uint8)
    finite = ~np.isnan(table)
    assert finite.sum() == (254 if fmt == "fp8e4m3fn" else 255)  # fn: 0x7F, 0xFF NaN; fnuz: 0x80 NaN
    # e4m3fn's 0x80 decodes to -0.0 and encodes back to 0x80
    assert (fp8.encode(table[finite], fmt) == codes[finite]).all()


def test_known_values_of_both_formats():
    x = np.array([1.0, -1.0, 448.0, 240.0, 2.0 ** -9, 2.0 ** -6, 0.0, np.nan])
    assert list(fp8.encode(x, "fp8e4m3fn")) == [0x38, 0xB8, 0x7E, 0x77, 0x01, 0x08, 0x00, 0x7F]
    # fnuz: bias 8, so the same code is half the value; 448 saturates to 240
    assert list(fp8.encode(x, "fp8e4m3fnuz")) == [0x40, 0xC0, 0x7F, 0x7F, 0x02, 0x10, 0x00, 0x80]
    assert fp8.decode(np.array([0x7E, 0x7F], dtype=np.uint8), "fp8e4m3fnuz").tolist() == [224.0, 240.0]


@pytest.mark.parametrize("fmt", fp8.FORMATS)
def test_rounding_is_nearest_ties_to_even_and_saturating(fmt):
    table = fp8.decode_table(fmt)
    pos = table[:128][~np.isnan(table[:128])]
    lo, hi = pos[:-1], pos[1:]
    mid = (lo + hi) / 2
    codes_lo = np.arange(len(lo))
    even = np.where(codes_lo % 2 == 0, codes_lo, codes_lo + 1)
    assert (fp8.encode(mid, fmt) == even).all()
    assert (fp8.encode(np.nextafter(mid, np.inf), fmt) == codes_lo + 1).all()
    assert (fp8.encode(np.nextafter(mid, -np.inf), fmt) == codes_lo).all()
    assert (fp8.encode(-np.nextafter(mid, np.inf), fmt) == (codes_lo + 1) | 0x80).all()
    big = np.array([fp8.MAX[fmt] * 1.5, 1e30, -1e30])
    assert fp8.decode(fp8.encode(big, fmt), fmt).tolist() == [fp8.MAX[fmt], fp8.MAX[fmt], -fp8.MAX[fmt]]
    tiny = -np.array([1e-30])  # rounds to zero; fnuz has no -0 (0x80 is its NaN)
    assert fp8.encode(tiny, fmt)[0] == (0x80 if fmt == "fp8e4m3fn" else 0x00)


def test_block_quantization_uses_amax_over_fp8_max():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (3, 300))
    codes, scale = fp8.quantize_rows(x, "fp8e4m3fn")
    assert scale.shape == (3, 3) and scale.dtype == np.float32
    assert np.allclose(scale[:, 0], np.abs(x[:, :128]).max(axis=1) / 448.0, rtol=1e-6)
    assert np.allclose(scale[:, 2], np.abs(x[:, 256:]).max(axis=1) / 448.0, rtol=1e-6)
    back = fp8.dequantize(codes, scale, 1, 128, "fp8e4m3fn")
    assert np.all(np.abs(back - x) <= np.abs(x) * 2.0 ** -4 + 2.0 ** -9 * np.repeat(scale, 128, 1)[:, :300])
    w = rng.uniform(-1, 1, (200, 300))
    codes, scale = fp8.quantize_blocks(w, "fp8e4m3fnuz")
    assert scale.shape == (2, 3)
    assert np.isclose(scale[1, 2], np.abs(w[128:, 256:]).max() / 240.0, rtol=1e-6)
    assert np.abs(fp8.decode(codes, "fp8e4m3fnuz")).max() <= 240.0


# ---- seeded data and the reference -------------------------------------------------------------
def _blockwise(a, a_scale, b, b_scale, fmt):
    """The kernel's own formula: per 128-wide K block, an exact product of the fp8 values, then
    the block's A scale per row and B scale per column, summed over blocks (fp64)."""
    M, K = a.shape
    N = b.shape[0]
    av, bv = fp8.decode(a, fmt), fp8.decode(b, fmt)
    out = np.zeros((M, N))
    for kb in range(fp8.cdiv(K, 128)):
        ks = slice(kb * 128, min(K, (kb + 1) * 128))
        part = av[:, ks] @ bv[:, ks].T
        out += part * a_scale[:, kb][:, None] * np.repeat(b_scale[:, kb], 128)[:N][None, :]
    return out


@pytest.mark.parametrize("fmt", fp8.FORMATS)
def test_reference_is_the_dequantized_product(fmt):
    shape = make_shape(37, 200, 300, fmt)  # partial scale blocks along N and K
    data = fk.make_data(shape, 7)
    assert data["a"].dtype == np.uint8 and data["a"].shape == (37, 300)
    assert data["b"].dtype == np.uint8 and data["b"].shape == (200, 300)
    assert data["a_scale"].shape == (37, 3) and data["b_scale"].shape == (2, 3)
    assert data["ref"].dtype == np.float32 and data["ref"].shape == (37, 200)
    direct = _blockwise(data["a"], data["a_scale"], data["b"], data["b_scale"], fmt)
    assert np.abs(data["ref"] - direct).max() <= 1e-6 * np.abs(direct).max()
    # ... and close to the unquantized product (quantization error only)
    rng = np.random.default_rng([7, 37, 200, 300])
    exact = rng.uniform(-1, 1, (37, 300)) @ rng.uniform(-1, 1, (200, 300)).T
    assert np.linalg.norm(data["ref"] - exact) / np.linalg.norm(exact) < 0.05


def test_data_is_seeded():
    shape = make_shape(16, 128, 256)
    one, two, other = fk.make_data(shape, 1), fk.make_data(shape, 1), fk.make_data(shape, 2)
    assert all((one[k] == two[k]).all() for k in one)
    assert not (one["a"] == other["a"]).all()


def test_flops_bytes_grid():
    shape = make_shape(16, 7168, 2048)
    assert fk.KERNEL.flops(shape) == 2 * 16 * 7168 * 2048
    assert fk.bytes_moved(shape) == 16 * 2048 + 7168 * 2048 + 4 * (16 * 16 + 56 * 16) + 2 * 16 * 7168
    cfg = {"BLOCK_M": 16, "BLOCK_N": 64, "SPLIT_K": 4}
    assert fk.KERNEL.grid(cfg, shape) == (112, 4, 1)


# ---- pruning ----------------------------------------------------------------------------------
def _targets():
    return load_targets(ROOT / "targets.yaml")


def _why(config, shape, target):
    rule = first_pruning_rule(rules.GPU_RULES, config, shape, target)
    return rule.name if rule else None


def test_pruning_rules_name_what_is_wrong():
    import dataclasses

    gpu = _targets()["gpu-node"]
    base = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=3)
    big = make_shape(4096, 7168, 2048)
    small = make_shape(16, 2112, 7168)
    assert _why(base, big, gpu) is None
    assert _why(dict(base, BLOCK_K=256), big, gpu) == "block_k_splits_scale"
    assert _why(dict(base, BLOCK_K=96), big, gpu) == "block_k_splits_scale"
    assert _why(dict(base, BLOCK_M=64), small, gpu) == "tile_m_exceeds_dim"
    assert _why(dict(base, BLOCK_M=16, SPLIT_K=8), small, gpu) is None  # 17 tiles of 132 SMs: split-K pays
    assert _why(dict(base, SPLIT_K=2), big, gpu) == "split_k_on_full_grid"
    assert _why(dict(base, BLOCK_M=16, SPLIT_K=8), make_shape(16, 2112, 512), gpu) == "split_k_too_deep"
    assert _why(dict(base, BLOCK_M=128, BLOCK_N=256, num_warps=4), big, gpu) == "accumulator_spills"
    assert _why(dict(base, TMA=1), big, gpu) is None
    assert _why(dict(base, TMA=1), make_shape(4096, 7168, 2056), gpu) == "tma_unaligned"
    assert _why(dict(base, TMA=1), make_shape(4096, 7168, 2048, "fp8e4m3fnuz"), _targets()["mi300"]) == "tma_needs_sm90"
    assert _why(base, big, dataclasses.replace(gpu, gpu_arch="80")) == "no_fp8_mma"
    mi300 = _targets()["mi300"]
    assert _why(base, big, mi300) == "fp8_format_not_native"  # gfx942's MFMA takes e4m3fnuz
    assert _why(base, big, dataclasses.replace(mi300, gpu_arch="gfx90a")) == "no_fp8_mma"
    assert _why(base, make_shape(4096, 7168, 2048, "fp8e4m3fnuz"), mi300) is None
    assert _why(base, big, dataclasses.replace(mi300, gpu_arch="gfx950")) is None
    assert _why(base, make_shape(4096, 7168, 2048, "fp8e4m3fnuz"), gpu) == "fp8_format_not_native"


def test_space_keeps_aiter_like_tiles_for_deepseek_shapes():
    gpu = _targets()["gpu-node"]
    configs = expand(dict(fk.GPU_SPACE, **fk.GPU_SPACE_CUDA))
    for M, N, K in ((16, 2112, 7168), (128, 7168, 2048), (4096, 24576, 1536)):
        shape = make_shape(M, N, K)
        kept = [c for c in configs if first_pruning_rule(rules.GPU_RULES, c, shape, gpu) is None]
        assert kept and len(kept) < len(configs) / 2
        assert all(128 % c["BLOCK_K"] == 0 for c in kept)
    skinny = make_shape(16, 2112, 7168)
    kept = [c for c in configs if first_pruning_rule(rules.GPU_RULES, c, skinny, gpu) is None]
    # aiter's gfx942 pick for M <= 16 on N=2112, K=7168: a 16-row tile with K split in pieces
    assert any(c["BLOCK_M"] == 16 and c["BLOCK_K"] == 128 and c["SPLIT_K"] == 8 for c in kept)


# ---- the Triton kernels run by Triton's interpreter on this CPU -------------------------------------
INTERPRET = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import numpy as np
from types import SimpleNamespace
from harness.kernels import fp8_blockscale as fk
from harness.kernels.fp8_blockscale import fp8, triton_kernel as tk

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
M, N = 20, 160
for fmt, torch_name in (("fp8e4m3fn", "float8_e4m3fn"), ("fp8e4m3fnuz", "float8_e4m3fnuz")):
    # K = 300: a partial last scale block and masked K steps; TMA needs 16-byte rows: K = 272;
    # split-K 2 (3 + 2 steps of 64) and 4 (2 + 2 + 1 + an empty split)
    for K, bm, bn, bk, gm, split, tma in ((300, 16, 64, 64, 1, 1, 0), (300, 32, 32, 128, 2, 1, 0),
                                          (272, 16, 64, 64, 1, 1, 1), (300, 16, 64, 64, 1, 2, 0),
                                          (300, 16, 32, 64, 1, 4, 0), (272, 16, 64, 64, 2, 2, 1)):
        shape = SimpleNamespace(M=M, N=N, K=K, dtype=fmt)
        d = fk.make_data(shape, 3)
        t = {k: Tensor(d[k], torch_name if k in ("a", "b") else "float32") for k in ("a", "b", "a_scale", "b_scale")}
        scalars = [M, N, K] + [fk.strides(shape)[k] for k in tk.ARGS[10:]]
        c = np.zeros((M, N), np.float32)
        tiles = fp8.cdiv(M, bm) * fp8.cdiv(N, bn)
        ws, locks = np.zeros(split * M * N, np.float32), np.zeros(tiles, np.int32)
        tk.fp8_blockscale_kernel[(tiles, split, 1)](
            t["a"], t["b"], Tensor(c, "float32"), t["a_scale"], t["b_scale"], Tensor(ws, "float32"),
            Tensor(locks, "int32"), *scalars, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, SPLIT_K=split,
            EVEN_K=K % bk == 0, TMA=tma)
        key = "%s kernel K%d %dx%dx%d split %d tma %d" % (fmt, K, bm, bn, bk, split, tma)
        out[key] = rel(c, d["ref"])
        out[key + " counters left"] = float(np.abs(locks).max())
    c = np.zeros((M, N), np.float32)
    tk.reference_kernel[(fp8.cdiv(M, 32) * fp8.cdiv(N, 32), 1, 1)](
        t["a"], t["b"], Tensor(c, "float32"), t["a_scale"], t["b_scale"], *scalars, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    out["%s reference" % fmt] = rel(c, d["ref"])
    codes = np.zeros(3000, np.uint8)
    tk.fill_kernel[(3, 1, 1)](Tensor(codes, torch_name), 3000, 5, BLOCK=1024)
    scales = np.zeros(3000, np.float32)
    tk.fill_kernel[(3, 1, 1)](Tensor(scales, "float32"), 3000, 5, BLOCK=1024)
    values = fp8.decode(codes, fmt)
    out["%s fill" % fmt] = [float(values.min()), float(values.max()), len(set(codes.tolist())),
                            float(scales.min()), float(scales.max())]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_kernels_run_right_under_tritons_interpreter():
    """The Triton source itself, run by Triton's CPU interpreter (fp8 decoded by Triton's own
    tables), against the numpy fp64 reference; split-K's fp32 atomic exchange is not interpreted."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", INTERPRET], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for key, value in out.items():
        if key.endswith("fill"):
            lo, hi, distinct, s_lo, s_hi = value
            assert -224 <= lo < -150 and 150 < hi <= 224 and distinct > 100, (key, value)
            assert 2.0 ** -8 <= s_lo and s_hi <= 2.0 ** -4 and s_hi / s_lo > 8, (key, value)
        elif key.endswith("counters left"):
            assert value == 0, key  # the last split resets its tile's counter
        else:
            assert value < 1e-6, (key, value)  # fp32 output: the fp8 products are exact


# ---- real compiles on this host (Triton, no GPU) ----------------------------------------------
def _job(fn, backend, arch, config, fp8_type, c_type="*bf16"):
    from harness.kernels.fp8_blockscale import triton_kernel as tk

    args = tk.ARGS if fn == "fp8_blockscale_kernel" else tuple(a for a in tk.ARGS if a not in ("ws_ptr", "lock_ptr"))
    types = {"a_ptr": "*" + fp8_type, "b_ptr": "*" + fp8_type, "c_ptr": c_type, "a_scale_ptr": "*fp32",
             "b_scale_ptr": "*fp32", "ws_ptr": "*fp32", "lock_ptr": "*i32"}
    unit = ("stride_ak", "stride_bk", "stride_cn", "stride_ask", "stride_bsk")
    signature, constexprs, divisible = {}, {}, []
    for i, name in enumerate(args):
        if name in types:
            signature[name] = types[name]
            divisible.append(i)
        elif name in unit:
            signature[name], constexprs[name] = "constexpr", 1
        else:
            signature[name] = "i32"
            divisible.append(i)
    for name, value in config.items():
        if name not in ("num_warps", "num_stages"):
            signature[name], constexprs[name] = "constexpr", value
    return {"module": tk.__name__, "fn": fn, "signature": signature, "constexprs": constexprs,
            "divisible": divisible, "options": {k: config[k] for k in ("num_warps", "num_stages") if k in config},
            "backend": backend, "arch": arch, "warp_size": 32 if backend == "cuda" else 64}


def _compile(job, tmp_path, name):
    pytest.importorskip("triton")
    from harness.compile.triton_gpu import run_compile_process

    result = run_compile_process(job, tmp_path / name, 300)
    assert result.status == "ok", result.message
    return result


@pytest.mark.slow
def test_compiles_for_sm90_with_fp8_warpgroup_mma(tmp_path):
    from remote_agent.runners.gpu_artifact import elf_facts

    cfg = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, SPLIT_K=2, EVEN_K=True, TMA=0, num_warps=4,
               num_stages=3)
    job = _job("fp8_blockscale_kernel", "cuda", "90", cfg, "fp8e4nv")
    res = _compile(job, tmp_path, "main.cubin")
    facts = elf_facts(res.artifact.read_bytes())
    assert facts["format"] == "cubin" and facts["arch"] == "sm_90"
    assert res.launch["entry"] in facts["kernels"]
    # the pointer and integer arguments, then the two hidden scratch pointers
    names = [p["name"] for p in res.launch["params"]]
    assert names[:7] == ["a_ptr", "b_ptr", "c_ptr", "a_scale_ptr", "b_scale_ptr", "ws_ptr", "lock_ptr"]
    assert "stride_ak" not in names and names[-2:] == ["global_scratch", "profile_scratch"]
    assert len(facts["kernels"][res.launch["entry"]]["params"]) == len(names)
    assert 0 < res.launch["shared"] <= 232448
    ptx = _asm(job, "ptx")
    assert "wgmma.mma_async" in ptx and "e4m3" in ptx  # fp8 tensor-core MMA, not an upcast
    tma = _compile(_job("fp8_blockscale_kernel", "cuda", "90", dict(cfg, TMA=1), "fp8e4nv"), tmp_path, "tma.cubin")
    assert tma.launch["global_scratch_size"] > 0  # the tensor descriptors live there


def _asm(job, kind):
    """The PTX or AMDGCN text of a job, compiled in this process (the harness keeps binaries only)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from harness.kernels.fp8_blockscale import triton_kernel as tk

    attrs = {(i,): [["tt.divisibility", 16]] for i in job["divisible"]}
    src = ASTSource(fn=getattr(tk, job["fn"]), signature=job["signature"], constexprs=job["constexprs"], attrs=attrs)
    with tempfile.TemporaryDirectory() as cache:
        import os

        old = os.environ.get("TRITON_CACHE_DIR")
        os.environ["TRITON_CACHE_DIR"] = cache
        try:
            arch = int(job["arch"]) if job["backend"] == "cuda" else job["arch"]
            target = GPUTarget(job["backend"], arch, job["warp_size"])
            compiled = triton.compile(src, target=target, options=job["options"])
        finally:
            if old is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = old
    return compiled.asm[kind]


@pytest.mark.slow
def test_compiles_for_gfx942_with_native_fp8_mfma(tmp_path):
    from remote_agent.runners.gpu_artifact import elf_facts

    cfg = dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=1, EVEN_K=False, TMA=0, num_warps=4,
               num_stages=2)
    job = _job("fp8_blockscale_kernel", "hip", "gfx942", cfg, "fp8e4b8")
    res = _compile(job, tmp_path, "main.hsaco")
    facts = elf_facts(res.artifact.read_bytes())
    assert facts["format"] == "hsaco" and facts["arch"] == "gfx942"
    # e4m3fnuz feeds gfx942's fp8 MFMA; e4m3fn there would be upcast to fp16 MMAs
    assert re.search(r"v_mfma_f32_\w+_fp8_fp8", _asm(job, "amdgcn"))


@pytest.mark.slow
def test_support_kernels_compile_for_sm90(tmp_path):
    ref = _job("reference_kernel", "cuda", "90", dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4),
               "fp8e4nv", c_type="*fp32")
    _compile(ref, tmp_path, "ref.cubin")
    from harness.kernels.fp8_blockscale import triton_kernel as tk

    for out in ("*fp8e4nv", "*fp32"):
        fill = {"module": tk.__name__, "fn": "fill_kernel", "signature": {"out_ptr": out, "n": "i64", "seed": "i32",
                "BLOCK": "constexpr"}, "constexprs": {"BLOCK": 1024}, "divisible": [0], "options": {"num_warps": 4},
                "backend": "cuda", "arch": "90", "warp_size": 32}
        _compile(fill, tmp_path, "fill%s.cubin" % out[1:])


# ---- the aiter a8w8 blockscale tuned CSV ----------------------------------------------------------
META = {"arch": "sm90", "device": "NVIDIA H200", "cu_num": 132, "driver": "580", "toolchain": "triton 3.6.0",
        "triton": "3.6.0"}
SHAPES = [(16, 7168, 2048), (128, 2112, 7168), (4096, 24576, 1536)]


def _results(path):
    names = list(fk.GPU_SPACE)
    writer = ResultsWriter(str(path), contract.results_header(names, []))
    for M, N, K in SHAPES:
        for i, split in enumerate((1, 2, 4)):
            cfg = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=split, num_warps=4, num_stages=3)
            ns = 10000.0 + 1000.0 * ((i + M) % 3)
            row = {"schema_version": contract.RESULTS_SCHEMA, "target": "h200", "kernel": "fp8_blockscale",
                   "variant_id": "v%03d%d" % (M % 997, i), "shape_id": "%dx%dx%d_fp8e4m3fn" % (M, N, K), "M": M, "N": N,
                   "K": K, "dtype": "fp8e4m3fn", "layout": "", "device": "NVIDIA H200", "status": contract.OK,
                   "time_ns_median": ns, "time_ns_min": ns, "time_ns_p20": ns, "time_ns_p80": ns, "iterations": 10,
                   "tflops": 2.0 * M * N * K / ns / 1e3, "gbps": 1.0, "rel_err": 1e-3, "max_abs_err": 0.01,
                   "err_ratio": 0.00125 * i, "profiler": "events"}
            row.update({contract.CONFIG_PREFIX + k: v for k, v in cfg.items()})
            writer.write(row)
        writer.write({"schema_version": contract.RESULTS_SCHEMA, "target": "h200", "kernel": "fp8_blockscale",
                      "variant_id": "lib:torch._scaled_mm", "shape_id": "%dx%dx%d_fp8e4m3fn" % (M, N, K), "M": M,
                      "N": N, "K": K, "dtype": "fp8e4m3fn", "layout": "", "device": "NVIDIA H200",
                      "status": contract.OK, "time_ns_median": 1.0, "iterations": 10, "profiler": "events"})
    writer.close()
    return pd.read_csv(path)


def test_aiter_blockscale_triton_json_reads_back_as_aiter_reads_it(tmp_path):
    """aiter's blockscale CSV dispatches CK kernels only: the Triton configs go to aiter's Triton JSON."""
    from harness.report import triton_json

    df = _results(tmp_path / "results.csv")
    with pytest.raises(HarnessError, match="ck or cktile only"):
        abs_csv.write_tuned_csv(df, None, META, tmp_path / "fp8_blockscale.aiter_blockscale.csv")
    lines = []
    paths = triton_json.write_triton_json(df, None, META, tmp_path / "triton", say=lines.append)
    assert [p.name for p in paths] == ["sm90-GEMM-A8W8_BLOCKSCALE-N=%d-K=%d.json" % (N, K) for _, N, K in
                                       sorted(SHAPES, key=lambda s: (s[1], s[2]))] + ["sm90-GEMM-A8W8_BLOCKSCALE.json"]
    for M, N, K in SHAPES:
        configs = triton_json.read_triton_json(tmp_path / "triton" / ("sm90-GEMM-A8W8_BLOCKSCALE-N=%d-K=%d.json" % (N, K)))
        cfg, tuned = triton_json.lookup(configs, M)
        ours = df[(df["M"] == M) & ~df["variant_id"].str.startswith("lib:")]
        best = ours.loc[ours["time_ns_median"].idxmin()]
        assert tuned and cfg["NUM_KSPLIT"] == best["cfg_SPLIT_K"] and cfg["BLOCK_SIZE_K"] == 128
    assert lines == []


# the keyword arguments aiter's Triton kernel takes besides its run-time ones
# (aiter/ops/triton/_triton_kernels/gemm_a8w8_blockscale.py: _gemm_a8w8_blockscale_kernel's constexprs)
AITER_A8W8_BLOCKSCALE_CONSTEXPRS = {"GROUP_K", "GROUP_N", "BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M",
                                    "NUM_KSPLIT", "SPLITK_BLOCK_SIZE", "EVEN_K", "GRID_MN", "cache_modifier"}


def test_aiter_triton_json_has_only_keys_aiters_launch_takes(tmp_path):
    """aiter launches its kernel with ``**config``, and Triton refuses any keyword that is neither a
    kernel argument nor a compile option ("Keyword argument ... was specified but unrecognised"):
    the harness's own switches of the CUDA space (TMA, WS, OVERLAP, ORDERED, PIPE, SMEM_SCALES), at 0
    in a winner that aiter's kernel can run, stay out of the file."""
    amd = pytest.importorskip("triton.backends.amd.compiler")
    from harness.report import triton_json

    names = list(fk.KERNEL.space_for(_targets()["gpu-node"]))
    assert {"WS", "OVERLAP", "ORDERED", "PIPE", "SMEM_SCALES", "num_ctas"} <= set(names)
    writer = ResultsWriter(str(tmp_path / "results.csv"), contract.results_header(names, []))
    M, N, K = 4096, 7168, 2048
    cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=3, TMA=0, WS=0,
               CUDA=0, OVERLAP=0, ORDERED=0, PIPE=0, SMEM_SCALES=0, num_ctas=1, SHARE_A=0)
    row = {"schema_version": contract.RESULTS_SCHEMA, "target": "h200", "kernel": "fp8_blockscale", "variant_id": "v1",
           "shape_id": "%dx%dx%d_fp8e4m3fn" % (M, N, K), "M": M, "N": N, "K": K, "dtype": "fp8e4m3fn", "layout": "",
           "device": "NVIDIA H200", "status": contract.OK, "time_ns_median": 1e5, "time_ns_min": 1e5,
           "iterations": 10, "tflops": 1.0, "gbps": 1.0, "rel_err": 1e-3, "max_abs_err": 0.01, "err_ratio": 0.0,
           "profiler": "events"}
    writer.write(dict(row, **{contract.CONFIG_PREFIX + k: v for k, v in cfg.items()}))
    writer.close()
    paths = triton_json.write_triton_json(pd.read_csv(tmp_path / "results.csv"), None, META, tmp_path / "triton")
    takes = AITER_A8W8_BLOCKSCALE_CONSTEXPRS | set(amd.HIPOptions.__dataclass_fields__)
    for path in paths:
        for key, config in triton_json.read_triton_json(path).items():
            assert set(config) <= takes, (path.name, key, sorted(set(config) - takes))
            assert config["BLOCK_SIZE_M"] == 128 and config["num_warps"] == 8
    assert triton_json.accept_for("fp8_blockscale")(dict(cfg, TMA=1, WS=1)) == (
        "uses TMA, WS, which aiter's Triton GEMM does not have")
    assert triton_json.accept_for("fp8_blockscale")(dict(cfg, TMA=1, CUDA=1, num_ctas=2, SHARE_A=1)) == (
        "uses TMA, CUDA, SHARE_A, which aiter's Triton GEMM does not have")


def test_aiter_blockscale_csv_refusals(tmp_path):
    from harness.report.aiter_csv import aiter_split_k

    with pytest.raises(HarnessError, match="SPLIT_K=3"):
        aiter_split_k(3)
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(HarnessError, match="no gfx|no cu_num"):
        abs_csv.read_tuned_csv(tmp_path / "bad.csv")


def test_reader_matches_aiters_own_file(tmp_path):
    """A few lines of aiter's shipped a8w8_blockscale_tuned_gemm.csv, whitespace as such files have."""
    text = ("gfx,cu_num,M,N,K,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
            "gfx950,256,1,2048,3072,ck,8,2,4.8294,a8w8_blockscale_1x128x128_256x16x64x256_16x16_16x16_1x1_16x16x1_"
            "16x16x1_1x16x1x16_4_1x1_intrawave_v1,2.61,1304.22,0.0\n"
            "gfx950,256,8,2048,3072, cktile ,20,3,8.9575,a8w8_blockscale_cktile_32x128x128_1x4x1_16x16x64_intrawave_"
            "0x1x0_4,11.24,708.77,0.0001\n"
            "gfx950,256,8,2048,3072, cktile ,20,3,8.9575,a8w8_blockscale_cktile_32x128x128_1x4x1_16x16x64_intrawave_"
            "0x1x0_4,11.24,708.77,0.0001\n")
    (tmp_path / "aiter.csv").write_text(text)
    table = abs_csv.read_tuned_csv(tmp_path / "aiter.csv")
    assert set(table) == {("gfx950", 256, 1, 2048, 3072), ("gfx950", 256, 8, 2048, 3072)}
    assert table[("gfx950", 256, 8, 2048, 3072)]["libtype"] == "cktile"
    assert abs_csv.aiter_tflops_bw(8, 2048, 3072, 8.9575) == (11.24, 708.77)  # aiter's own numbers


# ---- end to end on this host: a real sm90 bundle, the GPU agent on the CPU stand-in, the report --------
E2E_CONFIGS = [dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=2, num_warps=4, num_stages=3, TMA=0),
               dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=3, TMA=1)]


@pytest.fixture(scope="module")
def sm90_bundle(tmp_path_factory):
    """A real sm90 bundle of two configs and two odd shapes (host Triton), with the library asked for."""
    pytest.importorskip("triton")
    from harness.build import BuildOptions, build
    from harness.kernels import get
    from harness.library import request_gpu_library
    from harness.shapes import parse_shape_list

    kernel = get("fp8_blockscale")
    target = _targets()["gpu-node"]
    shapes = parse_shape_list("48x200x300,64x256x384", "fp8e4m3fn", problem=kernel.problem)
    root = tmp_path_factory.mktemp("fp8")
    summary = build(kernel, target, shapes, root, BuildOptions(jobs=2, only_configs=E2E_CONFIGS))
    request_gpu_library(summary.manifest, shapes, kernel.gpu_library)
    summary.manifest.save(summary.bundle)
    return root, target, summary


def test_bundle_declares_the_fp8_operands_and_its_own_reference(sm90_bundle):
    _, _, summary = sm90_bundle
    m = json.loads((summary.bundle / "manifest.json").read_text())
    assert m["device_reference"] == "fp8_blockscale" and m["library"] == {
        "torch._scaled_mm": ["48x200x300_fp8e4m3fn", "64x256x384_fp8e4m3fn"]}
    shape = m["shapes"][0]
    ops = {o["name"]: (o["dtype"], o["shape"]) for o in shape["operands"]}
    assert ops == {"a": ("fp8e4m3fn", [48, 300]), "b": ("fp8e4m3fn", [200, 300]), "c": ("bf16", [48, 200]),
                   "a_scale": ("fp32", [48, 3]), "b_scale": ("fp32", [2, 3]), "ref": ("fp32", [48, 200]),
                   "a_scale_t": ("fp32", [48, 3])}
    # A's scales again, M-major: a copy the device makes of a_scale (SMEM_SCALES 2 reads it by TMA)
    copy = next(o for o in shape["operands"] if o["name"] == "a_scale_t")
    assert copy["strides"] == [1, 48] and copy["copy_of"] == "a_scale" and copy["role"] == "input"
    support = m["toolchain"]["support"]
    assert sorted(support) == ["error_bf16", "error_fp32", "fill_fp32", "fill_fp8e4m3fn", "reference_fp8e4m3fn"]
    assert support["reference_fp8e4m3fn"]["launch"]["entry"].startswith("reference_kernel")
    assert [p["type"] for p in m["variants"][0]["launch"]["params"][:5]] == ["*fp8e4nv", "*fp8e4nv", "*bf16", "*fp32",
                                                                            "*fp32"]
    # K = 300 is no multiple of 16 bytes: the TMA config is pruned there with its rule
    assert [p["rule"] for p in m["pruned"]] == ["tma_unaligned"]


@pytest.mark.slow
def test_agent_checks_every_answer_and_times_the_library_then_aiter_csv(sm90_bundle, tmp_path, monkeypatch):
    """The real GPU worker on the CPU stand-in (launches computed with numpy): fp8 inputs filled on
    the 'device', the reference kernel checked against the agent's own host decode, every variant
    and lib:torch._scaled_mm checked and timed; then the report writes aiter's blockscale CSV."""
    import csv
    import os

    from remote_agent.agent import Agent
    from remote_agent.runners import gpu
    from tests.test_gpu_supervisor import options

    root, target, summary = sm90_bundle
    monkeypatch.setenv("HARNESS_GPU_API", "tests.gpu_standin:StandinLibraryApi")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr(gpu, "make_gpu_runner", lambda bundle, manifest, opts, log: gpu.GpuRunner(
        bundle, manifest, opts, log, [("cuda:0", "0")]))
    results, logs = tmp_path / "results.csv", []
    Agent(str(summary.bundle), str(results), options(), out=open(os.devnull, "w"), log=logs.append).run()
    with open(results, newline="") as f:
        rows = list(csv.DictReader(f))
    assert any("self-check fp8e4m3fn" in line for line in logs), logs
    measured = [r for r in rows if r["status"] != "pruned"]
    assert len(measured) == 3 + 2  # two configs on 64x256x384, one on 48x200x300 (TMA pruned), the library
    for r in measured:
        assert r["status"] == "ok", r
        assert 1e-4 < float(r["rel_err"]) < 1e-2  # a bf16 answer: about 2^-9 per element, within tolerance
    lib = [r for r in measured if r["variant_id"] == "lib:torch._scaled_mm"]
    assert len(lib) == 2 and all("stand-in" in r["message"] for r in lib)

    from harness.report import triton_json

    df = pd.read_csv(results)
    meta = dict(META, arch="sm90", cu_num=132)
    paths = triton_json.write_triton_json(df, None, meta, tmp_path / "triton", say=logs.append)
    assert [p.name for p in paths] == ["sm90-GEMM-A8W8_BLOCKSCALE-N=200-K=300.json",
                                       "sm90-GEMM-A8W8_BLOCKSCALE-N=256-K=384.json", "sm90-GEMM-A8W8_BLOCKSCALE.json"]
    for p in paths[:2]:  # the TMA config is no aiter kernel: the split-K one is written
        assert all(c["NUM_KSPLIT"] == 2 and c["BLOCK_SIZE_K"] == 128 for k, c in json.loads(p.read_text()).items()
                   if k != "_harness")



def test_seeds_are_feasible_aiter_like_tiles_per_shape_class():
    import dataclasses

    from harness.kernels import get
    from harness.shapes import parse_shape_list

    kernel = get("fp8_blockscale")
    gpu, mi300 = _targets()["gpu-node"], _targets()["mi300"]
    skinny, large = parse_shape_list("16x2112x7168,4096x4096x7168", "fp8e4m3fn", problem=kernel.problem)
    for shape, target in ((skinny, gpu), (large, gpu)):
        seeds = kernel.seed_configs(shape, target)
        assert seeds and all(first_pruning_rule(kernel.gpu_rules, c, shape, target) is None for c in seeds)
        assert all(c["BLOCK_K"] == 128 for c in seeds)
    skinny_seeds = kernel.seed_configs(skinny, gpu)
    assert all(c["BLOCK_M"] == 16 for c in skinny_seeds)
    assert any(c["SPLIT_K"] > 1 for c in skinny_seeds)  # 17 column tiles of 132 SMs: K is split
    assert any(c["TMA"] == 1 and c["BLOCK_M"] == 128 for c in kernel.seed_configs(large, gpu))
    fnuz = parse_shape_list("16x2112x7168:fp8e4m3fnuz", "fp8e4m3fn", problem=kernel.problem)[0]
    amd = kernel.seed_configs(fnuz, mi300)
    assert amd and all("TMA" not in c and c["num_stages"] == 2 for c in amd)
    assert kernel.seed_configs(skinny, dataclasses.replace(gpu, backend="cpu", gpu_arch=None)) == []


def test_shapes_default_to_the_first_fp8_format_and_refuse_a_layout():
    from harness.api.common import shapes_from_options
    from harness.kernels import get

    kernel = get("fp8_blockscale")
    gpu = _targets()["gpu-node"]
    shapes = shapes_from_options(gpu, "16x7168x2048", None, "auto", None, kernel)
    assert [s.id for s in shapes] == ["16x7168x2048_fp8e4m3fn"]
    assert len(shapes_from_options(gpu, None, None, "auto", None, kernel)) == 6  # DeepSeek-V3's defaults
    with pytest.raises(HarnessError, match="bad shape"):
        shapes_from_options(gpu, "16x7168x2048:fp8e4m3fn:NT", None, "auto", None, kernel)


def test_a_cpu_target_is_refused_in_one_line(tmp_path):
    from harness.build import compiler_for
    from harness.kernels import get

    with pytest.raises(HarnessError, match="no CPU source: build it for a GPU target"):
        compiler_for(get("fp8_blockscale"), _targets()["local"], tmp_path)


# ---- the persistent warp-specialized Gluon kernel (WS = 1) --------------------------------------
WS = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, SPLIT_K=1, num_warps=4, num_stages=5, TMA=1, WS=1)


def test_ws_rules_keep_it_to_sm90_and_its_tiles():
    targets = _targets()
    gpu = targets["gpu-node"]
    big = make_shape(4096, 7168, 7168)
    assert _why(WS, big, gpu) is None
    assert _why(dict(WS, BLOCK_N=160, num_stages=4), big, gpu) is None
    assert _why(dict(WS, BLOCK_N=192, num_stages=4), big, gpu) is None
    assert _why(dict(WS, BLOCK_N=256), big, gpu) == "ws_tile_n"  # accumulator + partial spill
    assert _why(dict(WS, num_warps=8), big, gpu) == "ws_config"
    assert _why(dict(WS, TMA=0), big, gpu) == "ws_config"
    assert _why(dict(WS, BLOCK_M=32), big, gpu) == "ws_config"
    assert _why(dict(WS, BLOCK_N=160, WS=0), big, gpu) == "tile_in_parts_needs_ws"
    assert _why(WS, make_shape(4096, 7168, 7000), gpu) == "tma_unaligned"  # K bytes a row
    assert _why(WS, make_shape(4096, 7164, 7168), gpu) == "ws_unaligned"  # C's row: 2N bytes
    assert _why(dict(WS, TMA=0, WS=1), make_shape(4096, 7168, 2048, "fp8e4m3fnuz"), targets["mi300"]) is not None


def test_ws_rules_for_tall_narrow_overlapped_and_decode_tiles():
    """192-row tiles (three consumers at 160 registers: 128 columns at most), 80-wide tiles (64 + 16),
    the shared-memory bound on ring and C tile, OVERLAP on the WS kernel only, PIPE's two partials on
    one part up to 128 wide with one or two consumers, and the 64-row WS tile on decode shapes (TMA
    reads no row past M)."""
    from harness.kernels.fp8_blockscale import rules

    targets = _targets()
    gpu = targets["gpu-node"]
    big = make_shape(4096, 7168, 7168)
    tall = dict(WS, BLOCK_M=192, num_stages=4)
    assert _why(tall, big, gpu) is None
    assert _why(dict(tall, BLOCK_N=160, num_stages=3), big, gpu) == "ws_tile_n"  # 176 bytes of stack
    assert _why(dict(tall, num_stages=5), big, gpu) == "ws_shared_memory"  # 255 KB
    assert _why(dict(WS, num_stages=6), big, gpu) is None  # 229640 bytes built
    assert rules.ws_shared_bytes(dict(WS, num_stages=6)) - 229640 in range(0, 1024)
    assert rules.ws_shared_bytes(tall) - 213244 in range(0, 1024)
    assert _why(dict(tall, WS=0, TMA=1, num_warps=8), big, gpu) == "tile_in_parts_needs_ws"
    assert _why(dict(WS, BLOCK_N=80), big, gpu) is None
    assert _why(dict(WS, BLOCK_N=80, WS=0, num_warps=8), big, gpu) == "tile_in_parts_needs_ws"
    assert _why(dict(WS, OVERLAP=1), big, gpu) is None
    assert _why(dict(WS, OVERLAP=1, WS=0, num_warps=8), big, gpu) == "overlap_needs_ws"
    assert _why(dict(WS, ORDERED=1), big, gpu) is None and _why(dict(tall, ORDERED=1), big, gpu) is None
    assert _why(dict(WS, ORDERED=1, BLOCK_M=64), big, gpu) == "ordered_needs_consumers"  # one consumer
    assert _why(dict(WS, ORDERED=1, WS=0, num_warps=8), big, gpu) == "ordered_needs_consumers"
    assert _why(dict(WS, PIPE=1), big, gpu) is None and _why(dict(WS, PIPE=1, BLOCK_N=64), big, gpu) is None
    for bad in (dict(BLOCK_N=160, num_stages=4), dict(BLOCK_N=96), dict(BLOCK_M=192, num_stages=4),
                dict(OVERLAP=1), dict(ORDERED=1), dict(WS=0, num_warps=8)):
        assert _why(dict(WS, PIPE=1, **bad), big, gpu) == "pipe_config", bad
    staged = dict(WS, SMEM_SCALES=1, num_stages=5)  # A's scales staged: 8 K steps of 128 rows, 4 KiB
    assert _why(staged, big, gpu) is None and _why(dict(staged, PIPE=1), big, gpu) is None
    assert _why(dict(tall, SMEM_SCALES=1), big, gpu) is None
    assert _why(dict(staged, num_stages=6), big, gpu) == "ws_shared_memory"  # 229640 bytes built without
    assert rules.ws_shared_bytes(dict(tall, SMEM_SCALES=1)) - 219436 in range(0, 1024)
    assert rules.ws_shared_bytes(staged) - 200992 in range(0, 1024)
    assert _why(dict(staged, OVERLAP=1), big, gpu) == "smem_scales_config"
    assert _why(dict(staged, WS=0, num_warps=8, num_stages=4), big, gpu) == "smem_scales_config"
    ring = dict(staged, SMEM_SCALES=2)  # A's scales copied into each slot by TMA: 512 bytes a slot
    assert _why(ring, big, gpu) is None and _why(dict(ring, PIPE=1), big, gpu) is None
    assert _why(dict(tall, SMEM_SCALES=2), big, gpu) is None
    assert rules.ws_shared_bytes(ring) - 199424 in range(0, 1024)  # as built
    assert _why(dict(ring, num_stages=6), big, gpu) == "ws_shared_memory"  # 232712 bytes built
    assert _why(dict(ring, OVERLAP=1), big, gpu) == "smem_scales_config"
    assert _why(dict(ring, num_stages=4, num_ctas=2), big, gpu) == "cluster_config"
    # the M-major copy's rows (M fp32) must be 16-byte multiples for TMA
    assert _why(ring, make_shape(4098, 7168, 7168), gpu) == "smem_scales_unaligned"
    assert _why(staged, make_shape(4098, 7168, 7168), gpu) is None
    decode = make_shape(16, 10240, 5120)
    assert _why(dict(WS, BLOCK_M=64, BLOCK_N=80, GROUP_M=1, num_stages=6), decode, gpu) is None
    assert _why(dict(WS, GROUP_M=1, num_stages=4), decode, gpu) == "tile_m_exceeds_dim"  # 128 rows: not the WS floor
    assert _why(dict(WS, BLOCK_M=64, GROUP_M=1, WS=0, TMA=0), decode, gpu) == "tile_m_exceeds_dim"
    space = fk.KERNEL.space_for(gpu)
    assert 192 in space["BLOCK_M"] and 80 in space["BLOCK_N"]
    assert space["OVERLAP"] == space["ORDERED"] == space["PIPE"] == [0, 1] and space["SMEM_SCALES"] == [0, 1, 2]
    hip = fk.KERNEL.space_for(targets["mi300"])
    assert 192 not in hip["BLOCK_M"] and 80 not in hip["BLOCK_N"] and "OVERLAP" not in hip and "PIPE" not in hip
    assert "SMEM_SCALES" not in hip


def test_ws_grid_is_persistent_and_descriptors_follow_the_tile():
    from harness.kernels.fp8_blockscale import descriptors

    gpu = _targets()["gpu-node"]
    assert fk.KERNEL.grid(WS, make_shape(4096, 7168, 7168), gpu) == (132, 1, 1)
    assert fk.KERNEL.grid(WS, make_shape(256, 256, 7168), gpu) == (4, 1, 1)  # no more programs than tiles
    one = {d.name: d.block for d in descriptors.tensor_descriptors(WS)}
    assert one == {"a_desc": (64, 128), "b_desc": (128, 128), "c_desc": (64, 128)}
    two = {d.name: d.block for d in descriptors.tensor_descriptors(dict(WS, BLOCK_N=160))}
    assert two == {"a_desc": (64, 128), "b_desc": (128, 128), "c_desc": (64, 128), "b2_desc": (32, 128),
                   "c2_desc": (64, 32)}
    assert descriptors.tensor_descriptors(dict(WS, WS=0)) == []
    ring = {d.name: (d.operand, d.block) for d in descriptors.tensor_descriptors(dict(WS, SMEM_SCALES=2))}
    assert ring["as_desc"] == ("a_scale_t", (1, 64))  # a K step's scales of a consumer's 64 rows
    assert fk.strides(make_shape(4096, 7168, 7168))["KS"] == 56


def _cuobjdump(artifact, what: str) -> str:
    """Triton's cuobjdump on a cubin: ``-sass`` (the machine code) or ``-res-usage`` (registers, stack,
    local memory)."""
    import os
    import subprocess

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    return subprocess.run([tool, what, str(artifact)], capture_output=True, text=True, check=True).stdout


def test_cluster_rules_grid_and_descriptors(monkeypatch):
    """num_ctas 2: the WS kernel in clusters of two CTAs (a tile of 2 x BLOCK_M rows, B multicast).
    Its rules (plain and PIPE consumers, one or two of them, a ring of a power of two slots: Gluon
    stacks cluster buffers in powers of two), a persistent grid of clusters (one per two
    multiprocessors), descriptors whose A and C blocks the CTAs split and whose B block each gets
    whole, and the prune where the host's Triton has no Gluon TMA multicast."""
    from harness.kernels.fp8_blockscale import descriptors, rules

    monkeypatch.setattr(rules, "gluon_multicast", lambda: True)
    gpu = _targets()["gpu-node"]
    big = make_shape(4096, 7168, 7168)
    pair = dict(WS, num_ctas=2, num_stages=4)
    for ok in (pair, dict(pair, PIPE=1), dict(pair, BLOCK_M=64), dict(pair, BLOCK_N=160), dict(pair, num_stages=2)):
        assert _why(ok, big, gpu) is None, ok
    for bad in (dict(num_stages=5), dict(num_stages=3), dict(BLOCK_M=192), dict(SMEM_SCALES=1), dict(OVERLAP=1),
                dict(ORDERED=1), dict(num_ctas=4)):
        assert _why(dict(pair, **bad), big, gpu) == "cluster_config", bad
    assert _why(dict(pair, WS=0, num_warps=8), big, gpu) in ("cluster_config", "tile_in_parts_needs_ws")
    assert fk.KERNEL.grid(pair, big, gpu) == (66, 1, 1)  # 16 x 56 tiles of 256 x 128: 66 clusters
    assert fk.KERNEL.grid(pair, make_shape(300, 256, 7168), gpu) == (4, 1, 1)  # 2 x 2 cluster tiles
    blocks = {d.name: (d.block, d.cga) for d in descriptors.tensor_descriptors(pair)}
    assert blocks == {"a_desc": ((128, 128), ((1, 0),)), "b_desc": ((128, 128), ((0, 0),)),
                      "c_desc": ((128, 128), ((1, 0),))}
    assert descriptors.tensor_descriptors(pair)[0].as_dict()["cga"] == [[1, 0]]
    assert "cga" not in descriptors.tensor_descriptors(WS)[0].as_dict()
    assert fk.KERNEL.space_for(gpu)["num_ctas"] == [1, 2]
    monkeypatch.setattr(rules, "gluon_multicast", lambda: False)
    assert _why(pair, big, gpu) == "cluster_needs_multicast"
    assert _why(WS, big, gpu) is None


@pytest.mark.slow
@pytest.mark.parametrize("block_m,block_n,pipe", [(128, 128, 0), (128, 128, 1), (64, 160, 0)])
def test_cluster_kernel_compiles_for_sm90_with_b_multicast(tmp_path, block_m, block_n, pipe):
    """The cluster kernel through the harness's compiler (Triton with Gluon TMA multicast): built for
    clusters of two (the launch facts' num_ctas), each CTA's own A rows and C rows in the descriptors'
    blocks, B whole; in the cubin B's TMA loads multicast (one a part), the consumers arrive on the
    pair's barrier in the other CTA (a remote arrive), fp8 wgmma, no local memory."""
    pytest.importorskip("triton")
    from harness.compile.triton_gpu import TritonGpuCompiler
    from harness.kernels.fp8_blockscale import rules
    from harness.shapes import parse_shape_list

    if not rules.gluon_multicast():
        pytest.skip("this Triton's Gluon has no TMA multicast")
    gpu = _targets()["gpu-node"]
    shape = parse_shape_list("4096x7168x7168:fp8e4m3fn", "fp8e4m3fn", fk.KERNEL.problem)[0]
    cfg = dict(WS, BLOCK_M=block_m, BLOCK_N=block_n, num_stages=4, PIPE=pipe, num_ctas=2)
    res = TritonGpuCompiler(fk.KERNEL, gpu, tmp_path).compile(cfg, shape, 300)
    assert res.status == "ok", res.message
    assert res.launch["num_ctas"] == 2
    blocks = {p["name"]: p["block"] for p in res.launch["params"] if p.get("type") == "tensormap"}
    assert blocks["a_desc"] == [64, 128] and blocks["b_desc"] == [128, 128]  # a CTA's rows of A; all of B
    assert blocks["c_desc"][0] == 64
    usage = _cuobjdump(res.artifact, "-res-usage")
    assert "STACK:0 " in usage and "LOCAL:0 " in usage, usage
    sass = _cuobjdump(res.artifact, "-sass")
    parts = 1 + (block_n & (block_n - 1) != 0)
    assert sass.count("UTMALDG.2D.MULTICAST") == parts
    assert "QGMMA" in sass and "SYNCS.ARRIVE.TRANS64.RED" in sass  # the remote arrive on CTA 0's barrier


def _unresolved_module_attributes(module):
    """``module.name`` references in the Gluon functions of ``module`` whose module lacks the name:
    Triton 3.6 looks up every global a kernel names when it hashes the kernel, in branches a config
    does not build too (3.9 only where it builds), so one is a failed compile on the node."""
    import ast
    import inspect
    import textwrap
    import types

    missing = []
    for fn in vars(module).values():
        source_fn = getattr(fn, "fn", None)
        if source_fn is None or getattr(source_fn, "__module__", None) != module.__name__:
            continue
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(source_fn)))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                owner = vars(module).get(node.value.id)
                if isinstance(owner, types.ModuleType) and not hasattr(owner, node.attr):
                    missing.append("%s: %s.%s" % (source_fn.__name__, node.value.id, node.attr))
    return missing


def test_ws_kernel_builds_where_gluon_has_no_cluster_barriers(tmp_path, monkeypatch):
    """The node's Triton 3.6 has neither Gluon's allocate_mbarrier nor TMA multicast: with
    allocate_mbarrier gone (the module reloaded without it) the WS kernel names no module attribute
    that is missing, and a one-CTA config still compiles, in this process."""
    pytest.importorskip("triton")
    import importlib

    from triton.experimental.gluon.language.nvidia.hopper import mbarrier

    from harness.compile.triton_gpu import TritonGpuCompiler, _compile_in_process
    from harness.kernels.fp8_blockscale import gluon_kernel
    from harness.shapes import parse_shape_list

    shape = parse_shape_list("4096x7168x7168:fp8e4m3fn", "fp8e4m3fn", fk.KERNEL.problem)[0]
    job = TritonGpuCompiler(fk.KERNEL, _targets()["gpu-node"], tmp_path)._job_for(dict(WS, PIPE=1), shape)
    job["out"] = str(tmp_path / "ws.cubin")
    monkeypatch.delattr(mbarrier, "allocate_mbarrier")
    try:
        module = importlib.reload(gluon_kernel)
        assert _unresolved_module_attributes(module) == []
        assert _compile_in_process(job)["status"] == "ok"
    finally:
        monkeypatch.undo()
        importlib.reload(gluon_kernel)
    assert gluon_kernel.cluster_barriers is mbarrier.allocate_mbarrier
    assert (tmp_path / "ws.cubin.tmp").stat().st_size > 0


def test_ws_seeds_for_prefill_shapes_fill_the_waves(tmp_path):
    """The WS seeds of prefill shapes, and every seed (completed with the space's first values,
    WS = 0 ones included) is a config the sm90 compiler takes."""
    from harness.compile.triton_gpu import TritonGpuCompiler
    from harness.kernels.fp8_blockscale import seeds

    gpu = _targets()["gpu-node"]
    shape = make_shape(4096, 7168, 16384)
    # 128-row tiles: 160 columns take 32 x 45 = 1440 tiles, 11 waves (of 132) at 192 column-units each,
    # where 128 columns take 1792 tiles, 14 waves at 160
    assert [c["BLOCK_N"] for c in seeds.ws_seeds(shape, 132)] == [160, 192, 128]
    for spec in ((4096, 7168, 16384), (4096, 4096, 7168), (1024, 7168, 16384), (512, 2112, 7168)):
        from harness.shapes import parse_shape_list

        s = parse_shape_list("%dx%dx%d:fp8e4m3fn" % spec, "fp8e4m3fn", fk.KERNEL.problem)[0]
        got = fk.KERNEL.seed_configs(s, gpu)
        ws = [c for c in got if c.get("WS")]
        assert len(ws) >= 2, spec
        assert all(_why(c, s, gpu) is None for c in got)
        compiler = TritonGpuCompiler(fk.KERNEL, gpu, tmp_path)
        for c in got:  # the compile job of each (its options checked against the kernel's constexprs or defines)
            job = compiler._job_for(c, s)
            if c.get("CUDA"):
                assert "-DBLOCK_M=%d" % c["BLOCK_M"] in job["options"], job["options"]
            else:
                assert job["constexprs"]["BLOCK_M"] == c["BLOCK_M"]
    s = parse_shape_list("4096x7168x7168:fp8e4m3fnuz", "fp8e4m3fnuz", fk.KERNEL.problem)[0]
    assert not [c for c in fk.KERNEL.seed_configs(s, _targets()["mi300"]) if c.get("WS")]
    big = parse_shape_list("4096x7168x16384:fp8e4m3fn", "fp8e4m3fn", fk.KERNEL.problem)[0]
    got = [(c["BLOCK_M"], c["BLOCK_N"], c["num_stages"], c.get("OVERLAP", 0)) for c in fk.KERNEL.seed_configs(big, gpu)
           if c.get("WS")]
    assert {(192, 128, 4, 0), (128, 128, 5, 0)} <= set(got), got
    assert not [c for c in fk.KERNEL.seed_configs(big, gpu) if c.get("OVERLAP") or c.get("ORDERED")]

    def piped(spec):
        s = parse_shape_list(spec + ":fp8e4m3fn", "fp8e4m3fn", fk.KERNEL.problem)[0]
        return [(c["BLOCK_M"], c["BLOCK_N"], c["SMEM_SCALES"]) for c in fk.KERNEL.seed_configs(s, gpu)
                if c.get("PIPE") and c.get("WS")]

    # the WS kernel's PIPE: its extra MMA step a tile costs 1 / steps: seeded from 32 steps of K (4096)
    # up, with A's scales from global memory and through the ring (SMEM_SCALES 2)
    assert piped("4096x7168x16384") == piped("4096x4096x4096") == [(128, 128, 0), (128, 128, 2)]
    assert piped("4096x7168x2048") == piped("4096x4096x3968") == []

    def staged(spec):
        s = parse_shape_list(spec + ":fp8e4m3fn", "fp8e4m3fn", fk.KERNEL.problem)[0]
        return [(c["BLOCK_M"], c["BLOCK_N"], c["PIPE"], c["SMEM_SCALES"]) for c in fk.KERNEL.seed_configs(s, gpu)
                if c.get("SMEM_SCALES")]

    # scales in shared memory: staged (1: a tile's first steps wait for theirs) and through the ring
    # (2); seeded from the same 32 steps
    assert staged("4096x7168x16384") == staged("1024x4096x7296") == [(192, 128, 0, 1), (128, 128, 0, 1),
                                                                      (128, 128, 1, 2), (192, 128, 0, 2)]
    assert staged("4096x7168x2048") == []


def test_ws_decode_seed_is_the_narrowest_tile_in_one_wave():
    from harness.kernels.fp8_blockscale import seeds
    from harness.shapes import parse_shape_list

    gpu = _targets()["gpu-node"]

    def ws(spec):
        s = parse_shape_list(spec + ":fp8e4m3fn", "fp8e4m3fn", fk.KERNEL.problem)[0]
        return [(c["BLOCK_M"], c["BLOCK_N"]) for c in fk.KERNEL.seed_configs(s, gpu) if c.get("WS")]

    assert ws("16x10240x5120") == [(64, 80)]  # 128 tiles of 80 columns; 64 would take 160
    assert ws("64x7168x2048") == [(64, 64)]  # 112 tiles
    assert ws("16x2112x7168") == []  # 33 tiles of 64: most multiprocessors idle (split-K seeds instead)
    assert seeds.ws_decode_seed(make_shape(16, 40960, 5120), 132) == []  # 320 tiles of 128: no one wave


@pytest.mark.parametrize("block_m,block_n,stages,overlap,ordered,pipe,staged", [
    (128, 128, 5, 0, 0, 0, 0), (128, 128, 5, 0, 1, 0, 0), (128, 160, 4, 0, 0, 0, 0), (192, 128, 4, 1, 1, 0, 0),
    (128, 128, 5, 0, 0, 1, 0), (192, 128, 4, 0, 0, 0, 1), (128, 128, 5, 0, 0, 1, 1), (128, 128, 5, 0, 0, 1, 2),
    (192, 128, 4, 0, 0, 0, 2)])
def test_ws_kernel_compiles_for_sm90_without_spills(tmp_path, block_m, block_n, stages, overlap, ordered, pipe,
                                                    staged):
    """Through the harness's compiler (host descriptors, Gluon signature with fp8 layouts): fp8
    wgmma (QGMMA) in the cubin, no local memory (the consumers' setmaxnreg holds accumulator,
    partial and scales), the descriptor parameters in the launch facts; no scale load between a
    wgmma wait and the promotion (a load there stalls every promotion for a round trip to L2) nor,
    OVERLAP = 0, between a wait and the next MMAs' issue (the step's scales load while its MMAs run:
    loaded before them, a step ahead, the kernel was slower); OVERLAP = 1 issues each consumer's MMAs in two
    places; ORDERED = 1 waits for its turn before a consumer's MMAs and passes it on after them;
    PIPE = 1 issues each consumer's MMAs in four places (a tile's odd first step, the step before the
    loop, two in the loop) and ptxas keeps them asynchronous: one wgmma wait a site, not one after
    every MMA (what its serialization, C7514, looks like). SMEM_SCALES = 1 reads A's scales from shared
    memory (LDS), staged 8 steps at a time from loads issued 8 steps ahead, after the MMAs' issue: more
    shared-memory loads than the same tile without. SMEM_SCALES = 2 has the loader copy them into
    each ring slot (one TMA copy more) and the consumers read them there: fewer global loads, more
    shared-memory loads."""
    pytest.importorskip("triton")
    from harness.compile.triton_gpu import TritonGpuCompiler
    from harness.shapes import parse_shape_list

    gpu = _targets()["gpu-node"]
    shape = parse_shape_list("4096x7168x7168:fp8e4m3fn", "fp8e4m3fn", fk.KERNEL.problem)[0]
    cfg = dict(WS, BLOCK_M=block_m, BLOCK_N=block_n, num_stages=stages, OVERLAP=overlap, ORDERED=ordered, PIPE=pipe,
               SMEM_SCALES=staged)
    comp = TritonGpuCompiler(fk.KERNEL, gpu, tmp_path)
    res = comp.compile(cfg, shape, 300)
    assert res.status == "ok", res.message
    names = [p["name"] for p in res.launch["params"]]
    assert [p.get("type") for p in res.launch["params"] if p["name"] == "a_desc"] == ["tensormap"]
    assert ("b2_desc" in names) == (block_n == 160)
    assert 0 < res.launch["shared"] <= 232448
    usage = _cuobjdump(res.artifact, "-res-usage")
    assert "STACK:0 " in usage and "LOCAL:0 " in usage, usage
    sass = _cuobjdump(res.artifact, "-sass")
    assert "QGMMA" in sass and "USETMAXREG" in sass
    lines = sass.splitlines()
    waits = [i for i, line in enumerate(lines) if "WARPGROUP.DEPBAR" in line]
    assert waits
    for i in waits:  # no scale load between a wait and the promotion, nor (OVERLAP = 0) the next MMAs' issue
        # (after that issue, which PIPE makes before it promotes, a load is the next step's)
        first_ffma = next((j for j in range(i, len(lines)) if "FFMA" in lines[j]), len(lines))
        issue = next((j for j in range(i, len(lines)) if "WARPGROUP.ARRIVE" in lines[j]), len(lines))
        end = min(first_ffma, issue) if overlap else issue
        assert not any("LDG" in line for line in lines[i:end]), "\n".join(lines[i:end])
    if staged:  # the same tile without: fewer shared-memory loads
        plain = comp.compile(dict(cfg, SMEM_SCALES=0), shape, 300)
        plain_sass = _cuobjdump(plain.artifact, "-sass")
        assert sass.count("LDS") > plain_sass.count("LDS"), (sass.count("LDS"), plain_sass.count("LDS"))
        if staged == 2:
            assert sass.count("LDG") < plain_sass.count("LDG"), (sass.count("LDG"), plain_sass.count("LDG"))
            assert sass.count("UTMALDG") == plain_sass.count("UTMALDG") + block_m // 64  # a copy a consumer
            assert "as_desc" in names
    consumers, parts = block_m // 64, 1 + (block_n & (block_n - 1) != 0)
    sites = 4 if pipe else 1 + overlap  # a consumer's MMA sites
    assert sum("QGMMA" in line for line in lines) == consumers * parts * 4 * sites  # 4 MMAs of K 32
    if pipe:
        assert len(waits) == consumers * 4, len(waits)  # the odd step's, two in the loop, the unread one's
        tries = sum("TRYWAIT" in line for line in lines)
        assert tries == 2 * (1 + consumers * 4), tries
        return
    # barrier waits (each a try-wait and its retry): the loader's slot wait, and at each of a
    # consumer's MMA sites the slot's ready barrier and, ORDERED, its turn (not at consumer 0's
    # first MMA of OVERLAP's prologue: step 0, nobody before it)
    sites = consumers * (1 + overlap) * (1 + ordered) - (1 if overlap and ordered else 0)
    assert sum("TRYWAIT" in line for line in lines) == 2 * (1 + sites)


def test_ws_probe_variants_are_configs_the_tune_builds():
    """bench/probes/fp8_ws_probe.py times what `harness tune` would: each default variant (the decode
    variants on decode shapes) is in the space and passes every rule on the probe's default shapes;
    a trailing o is OVERLAP = 1, d PIPE = 1; bad variants exit 2."""
    from bench.probes import fp8_ws_probe as probe
    from harness.shapes import parse_shape_list

    gpu = _targets()["gpu-node"]
    space = fk.KERNEL.space_for(gpu)
    for spec in probe.DEFAULT_SHAPES:
        s = parse_shape_list(spec + ":fp8e4m3fn", "fp8e4m3fn", fk.KERNEL.problem)[0]
        for v in probe.DECODE_VARIANTS if s.M < probe.DECODE_M else probe.DEFAULT_VARIANTS:
            cfg = probe.variant_config(v)
            assert all(cfg[k] in space[k] for k in cfg), v
            assert _why(cfg, s, gpu) is None, (v, spec)
    flags = {v: (probe.variant_config(v)["OVERLAP"], probe.variant_config(v)["ORDERED"])
             for v in ("128x128x6x8", "128x128x6x8o", "128x128x6x8p", "128x128x6x8op")}
    assert flags == {"128x128x6x8": (0, 0), "128x128x6x8o": (1, 0), "128x128x6x8p": (0, 1), "128x128x6x8op": (1, 1)}
    assert probe.variant_config("128x128x5x8d")["PIPE"] == 1 and probe.variant_config("128x128x5x8")["PIPE"] == 0
    assert probe.variant_config("128x128x5x8ds")["SMEM_SCALES"] == 1 and probe.variant_config("128x128x5x8d")[
        "SMEM_SCALES"] == 0
    assert probe.m_major("128x128x6x8t") and not probe.m_major("128x128x6x8")
    assert probe.variant_config("128x128x5x8dm")["SMEM_SCALES"] == 2
    assert probe.main(["--variant", "128x128x5x8dsm"]) == 2  # SMEM_SCALES is one or the other
    assert probe.main(["--variant", "128x128x5x8od"]) == 2
    assert probe.main(["--variant", "128x160"]) == 2
    assert probe.main(["--variant", "128x160x4x8x"]) == 2 and probe.main(["--variant", "128x160x4x8po"]) == 2


def test_ws_configs_build_and_run_through_the_agent_on_the_standin(tmp_path, monkeypatch):
    """A real sm90 bundle of three WS configs (one tile part, two, and A's scales through the ring;
    host descriptors, persistent grid), run by the GPU worker on the CPU stand-in: the agent encodes
    each fp8, bf16 and fp32 tensor map over its operand, fills A's M-major scales as the copy of
    a_scale they are declared (the stand-in computes that config's C from them), launches one
    program per tile at most, and every answer is checked."""
    pytest.importorskip("triton")
    from harness.build import BuildOptions, build
    from harness.shapes import parse_shape_list

    from harness.kernels.fp8_blockscale import rules

    target = _targets()["gpu-node"]
    shapes = parse_shape_list("64x256x384", "fp8e4m3fn", problem=fk.KERNEL.problem)
    configs = [dict(WS, BLOCK_M=64, BLOCK_N=128, GROUP_M=1, num_stages=4),
               dict(WS, BLOCK_M=64, BLOCK_N=160, GROUP_M=1, num_stages=4),
               dict(WS, BLOCK_M=64, BLOCK_N=128, GROUP_M=1, num_stages=4, SMEM_SCALES=2)]
    if rules.gluon_multicast():  # and a cluster config: the stand-in refuses it launched without clusters
        configs.append(dict(WS, BLOCK_M=64, BLOCK_N=128, GROUP_M=1, num_stages=4, num_ctas=2))
    summary = build(fk.KERNEL, target, shapes, tmp_path / "b", BuildOptions(jobs=2, only_configs=configs))
    m = json.loads((summary.bundle / "manifest.json").read_text())
    launches = [v["launch"] for v in m["variants"]]
    assert [l["entry"].split("_ws_")[0] for l in launches] == ["fp8_blockscale"] * len(configs)
    maps = [[p["name"] for p in l["params"] if p.get("type") == "tensormap"] for l in launches]
    # a_desc, b_desc, c_desc (+ b2_desc, c2_desc for 160 = 128 + 32; + as_desc for SMEM_SCALES 2)
    assert sorted(map(len, maps)) == [3] * (len(configs) - 2) + [4, 5]
    assert sorted(l["num_ctas"] for l in launches) == [1, 1, 1, 2][:len(configs)]
    rows = run_agent_on_standin(summary.bundle, tmp_path, monkeypatch)
    assert len(rows) == len(configs)
    for r in rows:
        assert r["status"] == "ok", r
        assert 1e-4 < float(r["rel_err"]) < 1e-2


def run_agent_on_standin(bundle, tmp_path, monkeypatch) -> list:
    """The agent's result rows of ``bundle`` run by the GPU worker on the CPU stand-in (one device)."""
    import csv
    import os

    from remote_agent.agent import Agent
    from remote_agent.runners import gpu
    from tests.test_gpu_supervisor import options

    monkeypatch.setenv("HARNESS_GPU_API", "tests.gpu_standin:StandinApi")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr(gpu, "make_gpu_runner", lambda bundle, manifest, opts, log: gpu.GpuRunner(
        bundle, manifest, opts, log, [("cuda:0", "0")]))
    results = tmp_path / "results.csv"
    Agent(str(bundle), str(results), options(), out=open(os.devnull, "w"), log=lambda line: None).run()
    with open(results, newline="") as f:
        return list(csv.DictReader(f))


def test_ceiling_probe_patches_still_apply_to_the_kernel():
    """bench/probes/fp8_ws_ceiling.py patches the WS kernel's source at run time: each of its copies
    still finds what it replaces (it exits with a message when the kernel has changed), is valid
    Python that differs from the kernel in the way its mode says, and loads as a module of its own
    (no relative import left)."""
    from bench.probes import fp8_ws_ceiling as ceiling

    pytest.importorskip("triton")
    assert callable(ceiling.load_kernel(True, "const", tempfile.mkdtemp()))

    kernel = open(ceiling.KERNEL_FILE).read()
    for noload in (False, True):
        for promo in ("real", "col0", "bcast", "const", "chain"):
            src = ceiling.patched_source(noload, promo)
            compile(src, "fp8_ws_ceiling_copy", "exec")
            assert ("mbarrier.arrive(bar)" in src) == noload and "mbarrier.arrive(bar)" not in kernel
            assert ("return acc + part * 0.5" in src) == (promo == "const")
            assert ("use_acc=kk > 0" in src) == (promo == "chain")
            assert ("gl.load(a_scale_rows + kk * stride_ask)" in src) == (promo in ("real", "const", "chain"))
