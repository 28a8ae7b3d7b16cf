"""The fp8 block-scaled GEMM's CUDA C++ kernel (CUDA = 1, harness/kernels/fp8_blockscale/cuda_kernel.cu):
built by NVRTC through the GPU compiler, its rules, grid and seeds, and a bundle of it run by the
agent on the CPU stand-in with every answer checked."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import harness.kernels.fp8_blockscale as fk
from harness.compile import cuda_cpp
from harness.errors import HarnessError
from harness.kernels.fp8_blockscale import cuda_kernel, rules, seeds
from harness.shapes import parse_shape_list
from harness.space import first_pruning_rule
from harness.targets import load_targets
from tests.test_fp8_blockscale import _cuobjdump, run_agent_on_standin

ROOT = Path(__file__).resolve().parents[1]
CUDA = dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, SPLIT_K=1, num_warps=4, num_stages=3, TMA=1, WS=0,
            CUDA=1, OVERLAP=0, ORDERED=0, PIPE=0, SMEM_SCALES=0, num_ctas=1, SHARE_A=0)

needs_nvrtc = pytest.mark.skipif(not rules.nvrtc_available(), reason="no NVRTC on this host")


def _gpu():
    return load_targets(ROOT / "targets.yaml")["gpu-node"]


def _shape(spec):
    return parse_shape_list(spec + ":fp8e4m3fn", "fp8e4m3fn", fk.KERNEL.problem)[0]


def _why(config, shape, target):
    rule = first_pruning_rule(rules.GPU_RULES, config, shape, target)
    return rule.name if rule else None


def test_rules_take_the_tiles_that_fit_and_prune_the_rest():
    """256 x 128 (two waves a consumer), 128 x 256 (two halves), 128 x 192, PIPE 128 x 128 and the
    clusters sharing A or B pass; tiles past a consumer's registers or spanning three scale blocks, SHARE_A without a
    cluster, the other kernels' keys, another arch, unaligned rows and an overfull ring are pruned,
    each by its rule."""
    gpu, big = _gpu(), _shape("4096x7168x16384")
    for ok in (CUDA, dict(CUDA, num_ctas=2), dict(CUDA, num_ctas=2, SHARE_A=1),
               dict(CUDA, BLOCK_M=128, BLOCK_N=192, num_stages=4), dict(CUDA, BLOCK_M=128, num_stages=5, PIPE=1),
               dict(CUDA, BLOCK_M=128, BLOCK_N=160, num_stages=5), dict(CUDA, BLOCK_N=64, num_stages=4),
               dict(CUDA, BLOCK_M=128, BLOCK_N=256), dict(CUDA, BLOCK_M=128, BLOCK_N=256, num_ctas=2, SHARE_A=1)):
        assert _why(ok, big, gpu) is None, ok
    for bad, rule in ((dict(BLOCK_N=192), "cuda_tile"), (dict(BLOCK_M=128, BLOCK_N=320), "cuda_tile"),
                      (dict(BLOCK_M=128, BLOCK_N=224), "cuda_tile"),
                      (dict(BLOCK_M=128, BLOCK_N=256, PIPE=1), "pipe_config"),
                      (dict(BLOCK_M=128, BLOCK_N=176), "cuda_tile"), (dict(BLOCK_N=120), "cuda_tile"),
                      (dict(SHARE_A=1), "share_a_config"),
                      (dict(WS=1, BLOCK_M=128, num_stages=5), "cuda_config"), (dict(num_warps=8), "cuda_config"),
                      (dict(SMEM_SCALES=2), "smem_scales_config"), (dict(BLOCK_M=192), "cuda_config"),
                      (dict(PIPE=1), "pipe_config"), (dict(num_stages=4), "cuda_shared_memory")):
        assert _why(dict(CUDA, **bad), big, gpu) == rule, (bad, _why(dict(CUDA, **bad), big, gpu))
    assert _why(CUDA, _shape("4094x7168x16384"), gpu) == "cuda_unaligned"  # A's M-major scales: 4M bytes a row
    assert _why(CUDA, _shape("4096x7164x16384"), gpu) == "cuda_unaligned"
    assert _why(dict(CUDA, TMA=0), big, dataclasses.replace(gpu, gpu_arch="89")) == "cuda_config"  # sm90 only
    triton_256 = dict(CUDA, CUDA=0, BLOCK_N=32, num_warps=8, num_stages=3, TMA=0)  # the Triton kernel keeps its space
    assert _why(triton_256, big, gpu) == "block_m_256_needs_cuda"
    assert _why(dict(triton_256, BLOCK_M=128), big, gpu) is None


def test_missing_nvrtc_is_one_line_and_prunes(monkeypatch):
    """Without NVRTC a build says how to get it, and the CUDA configs are pruned, not failed."""
    monkeypatch.setattr(cuda_cpp, "_nvrtc", None)
    monkeypatch.setattr(cuda_cpp, "_wheel_libraries", lambda: [])
    monkeypatch.setattr(cuda_cpp, "NVRTC_LIBS", ("libnvrtc-not-here.so.99",))
    with pytest.raises(HarnessError, match="pip install nvidia-cuda-nvrtc-cu12"):
        cuda_cpp.nvrtc()
    monkeypatch.setattr(rules, "nvrtc_available", lambda: False)
    assert _why(CUDA, _shape("4096x7168x16384"), _gpu()) == "cuda_needs_nvrtc"


def test_grid_is_one_cta_or_cluster_a_multiprocessor_at_most():
    gpu = _gpu()
    assert fk.KERNEL.grid(CUDA, _shape("4096x7168x16384"), gpu) == (132, 1, 1)  # 16 x 56 tiles
    assert fk.KERNEL.grid(dict(CUDA, num_ctas=2, SHARE_A=1), _shape("4096x7168x16384"), gpu) == (66, 1, 1)
    assert fk.KERNEL.grid(CUDA, _shape("1000x2000x1152"), gpu) == (64, 1, 1)  # 4 x 16 tiles
    assert fk.KERNEL.grid(dict(CUDA, num_ctas=2, SHARE_A=1), _shape("1000x2000x1152"), gpu) == (32, 1, 1)
    assert fk.KERNEL.grid(dict(CUDA, num_ctas=2), _shape("1000x2000x1152"), gpu) == (32, 1, 1)  # 2 x 16 pairs


def test_large_shapes_seed_the_cuda_tiles_first_and_amd_none():
    gpu = _gpu()
    got = fk.KERNEL.seed_configs(_shape("4096x7168x16384"), gpu)
    tiles = [(c["BLOCK_M"], c["BLOCK_N"], c.get("num_ctas", 1), c.get("SHARE_A", 0), c.get("PIPE", 0))
             for c in got if c.get("CUDA")]
    assert tiles == [(256, 128, 1, 0, 0), (256, 128, 2, 1, 0), (256, 128, 2, 0, 0), (128, 256, 1, 0, 0),
                     (128, 192, 1, 0, 0), (128, 192, 2, 0, 0), (128, 128, 1, 0, 0), (128, 128, 1, 0, 1)]
    assert got[0].get("CUDA") and all(_why(c, _shape("4096x7168x16384"), gpu) is None for c in got)
    mi300 = load_targets(ROOT / "targets.yaml")["mi300"]
    amd = parse_shape_list("4096x7168x7168:fp8e4m3fnuz", "fp8e4m3fnuz", fk.KERNEL.problem)[0]
    assert not [c for c in fk.KERNEL.seed_configs(amd, mi300) if c.get("CUDA")]
    assert len(seeds.CUDA_LARGE) == 8


def test_launch_facts_name_every_argument():
    facts = cuda_kernel.launch_facts(dict(CUDA, num_ctas=2, SHARE_A=1))
    names = [(p["name"], p["type"]) for p in facts["params"]]
    assert names == [("tm_a", "tensormap"), ("tm_b", "tensormap"), ("tm_sa", "tensormap"), ("tm_c", "tensormap"),
                     ("b_scale_ptr", "*fp32"), ("c_ptr", "*bf16"), ("M", "i32"), ("N", "i32"), ("K", "i32")]
    maps = {p["name"]: p for p in facts["params"] if p["type"] == "tensormap"}
    assert maps["tm_a"]["block"] == [128, 128]  # the shared operand: each CTA loads half of it
    assert maps["tm_b"]["block"] == [128, 128] and maps["tm_c"]["block"] == [256, 64]
    assert maps["tm_sa"]["operand"] == "a_scale_t" and maps["tm_sa"]["shape"] == ["KS", "M"]
    assert facts["num_ctas"] == 2 and facts["block"] == [384, 1, 1]
    # three slots of A, B and A's scales (150528), two tiles' B scales (8192), the C tile of the TMA
    # stores (65536), the barriers (48) and 1024 to align the ring; 160 columns store C from registers
    assert cuda_kernel.shared_bytes(CUDA) == 150528 + 8192 + 65536 + 48 + 1024
    assert cuda_kernel.shared_bytes(dict(CUDA, BLOCK_M=128, BLOCK_N=160, num_stages=5)) == 195584 + 80 + 1024


@needs_nvrtc
@pytest.mark.parametrize("config", [CUDA, dict(CUDA, num_ctas=2, SHARE_A=1), dict(CUDA, BLOCK_M=128, BLOCK_N=192,
                                                                                  num_stages=4),
                                    dict(CUDA, BLOCK_M=128, num_stages=5, PIPE=1),
                                    dict(CUDA, BLOCK_M=128, BLOCK_N=256), dict(CUDA, BLOCK_M=128, BLOCK_N=160, num_stages=4)],
                         ids=["256x128", "256x128-share-a", "128x192", "128x128-pipe", "128x256", "128x160"])
def test_nvrtc_builds_the_kernel_for_sm90a(tmp_path, config):
    """Through the harness's GPU compiler: a cubin whose launch facts are the module's, at 168
    registers at launch (the consumers raise theirs), no local memory, fp8 wgmmas of the tile's
    width (four a K step and wave; 128 a half of 256 columns), TMA loads (multicast with a cluster)
    and TMA stores of C (BLOCK_N a multiple of 64), no B scale chosen at run time."""
    pytest.importorskip("triton")  # its cuobjdump
    from harness.compile.triton_gpu import TritonGpuCompiler

    res = TritonGpuCompiler(fk.KERNEL, _gpu(), tmp_path).compile(config, _shape("4096x7168x16384"), 300)
    assert res.status == "ok", res.message
    assert res.launch["entry"] == "fp8_blockscale_cuda" and res.launch["registers"] == 168
    assert res.launch["shared"] == cuda_kernel.shared_bytes(config)
    assert res.launch["params"] == cuda_kernel.params(config)
    usage = _cuobjdump(res.artifact, "-res-usage")
    assert "STACK:0 " in usage and "LOCAL:0 " in usage, usage
    sass = _cuobjdump(res.artifact, "-sass")
    part = cuda_kernel.part_width(config)
    wgmma = "QGMMA.64x%dx32.F32.E4M3.E4M3" % part
    parts = config["BLOCK_M"] // 128 * config["BLOCK_N"] // part
    assert sass.count(wgmma) % 4 == 0 and sass.count(wgmma) >= 4 * parts
    assert "USETMAXREG" in sass and ("UTMASTG" in sass) == (config["BLOCK_N"] % 64 == 0)  # else C from registers
    assert ("UTMALDG.2D.MULTICAST" in sass) == (config["num_ctas"] == 2)
    # PIPE waits for the older of two wgmma groups (the wgmmas not serialized by ptxas)
    assert ("WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass) == bool(config["PIPE"])
    # the B scale of each column group is fixed at compile time, also where tiles straddle two scale
    # blocks at changing columns (160: four places, a copy of the K loop each)
    assert "FSEL" not in sass


@needs_nvrtc
def test_a_compile_error_is_a_result_with_its_line():
    job = cuda_cpp.KernelSource(fk.CUDA_SOURCE).job(dict(CUDA, BLOCK_M=192), "90")
    out = cuda_cpp.compile_job(dict(job, out="/nonexistent/never-written"))
    assert out["status"] == "compile_error" and "BLOCK_M: 128 or 256" in out["message"], out


@needs_nvrtc
def test_cuda_configs_run_through_the_agent_on_the_standin(tmp_path, monkeypatch):
    """A real sm90 bundle of CUDA configs (one CTA, clusters sharing A and B, 128-row PIPE, 128 x
    192 on a shape where the tile spans two scale blocks, 128 x 256 whose second half is past N) run
    by the GPU worker on the CPU stand-in: the agent encodes the four tensor maps over their operands
    (A's M-major scales the copy of a_scale it makes), launches clusters where the launch facts say
    so, and every answer is checked."""
    pytest.importorskip("triton")  # the bundle's fill and check kernels
    from harness.build import BuildOptions, build

    shapes = parse_shape_list("512x448x384", "fp8e4m3fn", problem=fk.KERNEL.problem)
    configs = [CUDA, dict(CUDA, num_ctas=2, SHARE_A=1), dict(CUDA, num_ctas=2),
               dict(CUDA, BLOCK_M=128, num_stages=5, PIPE=1), dict(CUDA, BLOCK_M=128, BLOCK_N=192, num_stages=4),
               dict(CUDA, BLOCK_M=128, BLOCK_N=256)]
    summary = build(fk.KERNEL, _gpu(), shapes, tmp_path / "b", BuildOptions(jobs=2, only_configs=configs))
    m = json.loads((summary.bundle / "manifest.json").read_text())
    assert [v["launch"]["entry"] for v in m["variants"]] == ["fp8_blockscale_cuda"] * len(configs)
    rows = run_agent_on_standin(summary.bundle, tmp_path, monkeypatch)
    assert len(rows) == len(configs)
    for r in rows:
        assert r["status"] == "ok", r
        assert 1e-4 < float(r["rel_err"]) < 1e-2


DECODE = dict(CUDA, BLOCK_M=16, BLOCK_N=64, GROUP_M=1, num_stages=6, SWAP_AB=1)


def test_decode_rules_take_its_tiles_and_prune_the_rest():
    """The decode kernel (SWAP_AB = 1): 16 to 64 tokens by 64 or 128 weight rows, split-K, any M;
    the prefill kernel's tiles, clusters, PIPE, SWAP_AB without CUDA and unaligned K are pruned,
    each by its rule."""
    gpu, decode = _gpu(), _shape("16x2112x7168")
    for ok in (DECODE, dict(DECODE, BLOCK_N=128), dict(DECODE, SPLIT_K=8), dict(DECODE, BLOCK_N=128, SPLIT_K=8)):
        assert _why(ok, decode, gpu) is None, ok
    assert _why(dict(DECODE, BLOCK_M=64, SPLIT_K=2), _shape("40x7168x2048"), gpu) is None
    assert _why(DECODE, _shape("7x2112x7168"), gpu) is None  # A's scales by pointer: any M
    for bad, rule in ((dict(BLOCK_M=128), "tile_m_exceeds_dim"), (dict(BLOCK_N=96), "cuda_config"),
                      (dict(num_ctas=2), "cuda_config"), (dict(PIPE=1), "pipe_config"),
                      (dict(CUDA=0), "swap_ab_needs_cuda"),
                      (dict(SPLIT_K=16), "split_k_too_deep")):  # 56 steps: 4 a split, the last two none
        got = _why(dict(DECODE, **bad), decode, gpu)
        assert got == rule, (bad, got)
    assert _why(dict(DECODE, BLOCK_M=128), _shape("256x2112x7168"), gpu) == "cuda_config"
    assert _why(dict(DECODE, GROUP_M=8), _shape("64x2112x7168"), gpu) == "cuda_config"  # the kernel has none
    assert _why(DECODE, _shape("16x2112x7160"), gpu) == "tma_unaligned"  # rows of A and B: K bytes
    assert _why(dict(DECODE, SPLIT_K=2), _shape("16x10240x5120"), gpu) == "split_k_on_full_grid"  # 160 tiles


def test_decode_grid_is_tiles_by_splits_and_seeds_lead_the_skinny_class():
    gpu = _gpu()
    assert fk.KERNEL.grid(dict(DECODE, SPLIT_K=8), _shape("16x2112x7168"), gpu) == (33, 8, 1)
    assert fk.KERNEL.grid(dict(DECODE, BLOCK_N=128), _shape("40x10240x5120"), gpu) == (3 * 80, 1, 1)
    got = fk.KERNEL.seed_configs(_shape("16x2112x7168"), gpu)
    decode = [(c["BLOCK_M"], c["BLOCK_N"], c["SPLIT_K"]) for c in got if c.get("SWAP_AB")]
    # 33 and 17 tiles: the splits that bring them nearest to two CTAs a multiprocessor (264) and
    # leave none of them empty (56 K steps: not 16)
    assert got[0].get("SWAP_AB") and decode == [(16, 64, 8), (16, 128, 8)]
    assert [(c["BLOCK_N"], c["SPLIT_K"]) for c in fk.KERNEL.seed_configs(_shape("16x10240x5120"), gpu)
            if c.get("SWAP_AB")] == [(64, 1), (128, 4)]
    # wider tiles of tokens unsplit; over 32 tokens also 32-token tiles
    assert [(c["BLOCK_M"], c["BLOCK_N"], c["SPLIT_K"]) for c in fk.KERNEL.seed_configs(_shape("64x7168x2048"), gpu)
            if c.get("SWAP_AB")] == [(64, 64, 1), (64, 128, 1), (32, 64, 1)]
    assert not [c for c in fk.KERNEL.seed_configs(_shape("4096x7168x16384"), gpu) if c.get("SWAP_AB")]


@needs_nvrtc
@pytest.mark.parametrize("config", [DECODE, dict(DECODE, BLOCK_M=64, BLOCK_N=128, SPLIT_K=4)],
                         ids=["16x64", "64x128-split4"])
def test_nvrtc_builds_the_decode_kernel(tmp_path, config):
    """The weight's rows on the wgmma's 64-row side, the tokens on its narrow one: fp8 wgmmas of
    n = BLOCK_M, four a K step; TMA loads, no local memory; the split-K reduction's atomic."""
    pytest.importorskip("triton")  # its cuobjdump
    from harness.compile.triton_gpu import TritonGpuCompiler

    shape = _shape("%dx2112x7168" % config["BLOCK_M"])
    res = TritonGpuCompiler(fk.KERNEL, _gpu(), tmp_path).compile(config, shape, 300)
    assert res.status == "ok", res.message
    assert res.launch["entry"] == "fp8_blockscale_decode"
    assert res.launch["block"] == [config["BLOCK_N"] // 64 * 128 + 32, 1, 1]
    usage = _cuobjdump(res.artifact, "-res-usage")
    assert "STACK:0 " in usage and "LOCAL:0 " in usage, usage
    sass = _cuobjdump(res.artifact, "-sass")
    assert sass.count("QGMMA.64x%dx32.F32.E4M3.E4M3" % config["BLOCK_M"]) == 4
    assert "UTMALDG.2D" in sass
    assert ("ATOMG" in sass or "RED" in sass) == (config["SPLIT_K"] > 1)


@needs_nvrtc
def test_decode_configs_run_through_the_agent_on_the_standin(tmp_path, monkeypatch):
    """A bundle of decode configs (one split, K split four ways, two consumers, a ragged M) run by
    the GPU worker on the CPU stand-in: the agent encodes A's and B's tensor maps, passes A's
    M-major scales by pointer, gives the split-K configs their zeroed workspace and counters, and
    every answer is checked."""
    pytest.importorskip("triton")
    from harness.build import BuildOptions, build

    shapes = parse_shape_list("16x448x1024,20x200x1024", "fp8e4m3fn", problem=fk.KERNEL.problem)
    configs = [DECODE, dict(DECODE, SPLIT_K=4), dict(DECODE, BLOCK_N=128, SPLIT_K=2), dict(DECODE, BLOCK_M=32)]
    summary = build(fk.KERNEL, _gpu(), shapes, tmp_path / "b", BuildOptions(jobs=2, only_configs=configs))
    m = json.loads((summary.bundle / "manifest.json").read_text())
    assert {v["launch"]["entry"] for v in m["variants"]} == {"fp8_blockscale_decode"}
    rows = run_agent_on_standin(summary.bundle, tmp_path, monkeypatch)
    assert [(r["M"], r["status"]) for r in rows if r["status"] != "ok"] == [("16", "pruned")]  # BLOCK_M 32
    for r in rows:
        if r["status"] == "pruned":
            continue
        assert 1e-4 < float(r["rel_err"]) < 1e-2
