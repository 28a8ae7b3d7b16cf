"""Host compiles for sm90 and gfx942 (Triton, no GPU): artifacts match the manifest's launch facts,
one artifact serves every shape of a specialization class, and resource limits prune.

Kept to a handful of small configs: the whole file compiles about ten kernels.
"""

import dataclasses
import hashlib
import json
import time
from pathlib import Path

import pytest

pytest.importorskip("triton")

from harness.build import BuildOptions, build  # noqa: E402
from harness.compile.triton_gpu import TritonGpuCompiler  # noqa: E402
from harness.errors import HarnessError  # noqa: E402
from harness.kernels import get  # noqa: E402
from harness.shapes import make_shape  # noqa: E402
from harness.targets import load_targets  # noqa: E402
from remote_agent.runners.gpu_artifact import elf_facts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED_LIMIT = 40000  # bytes: between the lower bound and the compiled size of C2 below
C1 = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=32, GROUP_M=1, SPLIT_K=1, num_warps=1, num_stages=2)
C2 = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=3)
C3 = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=3)
C4 = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=1, SPLIT_K=1, num_warps=8, num_stages=2)
SHAPES = [make_shape(128, 128, 128, "fp16", "NN"), make_shape(256, 192, 64, "fp16", "NN"),
          make_shape(1, 128, 64, "fp16", "NN")]


def targets():
    return load_targets(ROOT / "targets.yaml")


@pytest.fixture(scope="module")
def sm90(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu")
    target = dataclasses.replace(targets()["gpu-node"], shared_mem_max=SHARED_LIMIT, max_threads=128)
    with pytest.MonkeyPatch.context() as mp:  # its tests count compiles and reuses: a compile cache of its own
        mp.setenv("HARNESS_CACHE_DIR", str(root / "compile-cache"))
        summary = build(get("matmul"), target, SHAPES, root, BuildOptions(jobs=2, only_configs=[C1, C2, C3, C4]))
    return root, target, summary


def _variant(manifest, config, shape_id):
    for job in manifest.jobs:
        if job.shape == shape_id:
            v = next(v for v in manifest.variants if v.id == job.variant)
            if v.config == config:
                return v
    return None


def test_one_artifact_per_specialization_class(sm90):
    _, _, summary = sm90
    m = summary.manifest
    c1 = [v for v in m.variants if v.config == C1]
    assert len(c1) == 2  # 128^3 and 256x192x64 share a class; M=1 is another
    jobs = {(j.variant, j.shape) for j in m.jobs}
    shared = _variant(m, C1, SHAPES[0].id)
    assert (shared.id, SHAPES[1].id) in jobs  # the same artifact serves the second shape
    assert summary.reused_across_shapes >= 2
    one = _variant(m, C1, SHAPES[2].id)
    assert one.id != shared.id
    assert "M=1" in one.specialization and "M=16" in shared.specialization


def test_artifacts_match_launch_facts(sm90):
    root, _, summary = sm90
    bundle = summary.bundle
    ok = [v for v in summary.manifest.variants if v.status == "ok"]
    assert ok
    for v in ok:
        data = (bundle / v.artifact).read_bytes()
        assert hashlib.sha256(data).hexdigest() == v.sha256
        facts = elf_facts(data)
        assert facts["format"] == "cubin" and facts["machine"] == 190 and facts["arch"] == "sm_90"
        entry = v.launch["entry"]
        assert entry == "matmul_kernel" and entry in facts["functions"]
        params = v.launch["params"]
        assert [p["name"] for p in params[-2:]] == ["global_scratch", "profile_scratch"]
        assert all(p.get("hidden") for p in params[-2:])
        cubin_params = facts["kernels"][entry]["params"]
        assert [p["ordinal"] for p in cubin_params] == list(range(len(params)))
        assert [p["size"] for p in cubin_params] == [8 if p["type"].startswith("*") else 4 for p in params]
        assert facts["kernels"][entry]["param_bytes"] == cubin_params[-1]["offset"] + 8
        assert v.launch["threads"] == v.config["num_warps"] * 32
        assert 0 < v.launch["shared"] <= SHARED_LIMIT
        assert v.launch["triton_version"] == "3.9.0"
    one = _variant(summary.manifest, C1, SHAPES[2].id)
    names = [p["name"] for p in one.launch["params"]]
    assert "M" not in names and one.launch["constexprs"]["M"] == 1  # an int equal to 1 is a constant
    assert "stride_ak" not in names and one.launch["constexprs"]["stride_ak"] == 1
    shared = _variant(summary.manifest, C1, SHAPES[0].id)
    assert {"a_ptr", "c_ptr", "N", "K", "stride_am"} <= set(shared.launch["divisible"])


def test_configs_over_the_device_limits_are_pruned(sm90):
    _, _, summary = sm90
    m = summary.manifest
    by_rule = {}
    for p in m.pruned:
        by_rule.setdefault(p.rule, set()).add(json.dumps(p.config, sort_keys=True))
    # C3: the pipelined tiles alone need 64 KiB > 40000: pruned before compiling
    assert json.dumps(C3, sort_keys=True) in by_rule["shared_exceeds_device"]
    assert not any(v.config == C3 for v in m.variants)
    # C4: 8 warps x 32 = 256 threads > max_threads 128
    assert json.dumps(C4, sort_keys=True) in by_rule["threads_exceed_device"]
    # C2: passes the lower bound (32 KiB) but compiles to 48 KiB: compiled, then pruned
    c2 = [v for v in m.variants if v.config == C2]
    assert c2 and all(v.status == "pruned" for v in c2)
    assert all("shared_exceeds_device" in v.message and v.artifact is None for v in c2)
    assert c2[0].launch["shared"] > SHARED_LIMIT


def test_rebuild_compiles_nothing_and_knows_compiled_sizes(sm90):
    root, target, first = sm90
    start = time.monotonic()
    again = build(get("matmul"), target, SHAPES, root, BuildOptions(jobs=2, only_configs=[C1, C2, C3, C4]))
    assert again.compiled == 0
    assert time.monotonic() - start < 30
    # the plan now prunes C2 from the cached compiled size, before any compile
    rules = {(p.rule, json.dumps(p.config, sort_keys=True)) for p in again.manifest.pruned}
    assert ("shared_exceeds_device", json.dumps(C2, sort_keys=True)) in rules


def test_manifest_records_toolchain_and_support_kernels(sm90):
    _, _, summary = sm90
    tc = summary.manifest.toolchain
    assert tc["kind"] == "triton" and tc["triton_version"] == "3.9.0" and tc["backend"] == "cuda"
    assert {"fill_fp16", "error_fp16", "reference_fp16", "error_fp32"} <= set(tc["support"])
    for role, s in tc["support"].items():
        data = (summary.bundle / s["artifact"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == s["sha256"]
        assert s["launch"]["entry"] in elf_facts(data)["functions"]
    assert summary.manifest.data_on_device is True
    ref = tc["support"]["reference_fp16"]["launch"]
    assert [p["name"] for p in ref["params"]][5:8] == ["M", "N", "K"]  # generic: serves any shape


def test_gfx942_hsaco_with_amd_options(tmp_path):
    target = targets()["mi300"]
    compiler = TritonGpuCompiler(get("matmul"), target, tmp_path)
    config = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, SPLIT_K=1, num_warps=4, num_stages=2,
                  waves_per_eu=2, matrix_instr_nonkdim=16, kpack=1)
    shape = make_shape(256, 256, 128, "bf16", "NT")
    res = compiler.compile(config, shape, 300)
    assert res.status == "ok", res.message
    facts = elf_facts(res.artifact.read_bytes())
    assert facts["format"] == "hsaco" and facts["machine"] == 224 and facts["arch"] == "gfx942"
    assert "gfx942" in facts["target"]
    launch = res.launch
    assert launch["threads"] == 4 * 64 and launch["warp_size"] == 64
    assert launch["options"]["waves_per_eu"] == 2 and launch["options"]["matrix_instr_nonkdim"] == 16
    entry = launch["entry"]
    assert entry in facts["functions"] and entry + ".kd" in facts["objects"]
    kernel = facts["kernels"][entry]
    assert kernel["wavefront_size"] == 64
    assert len(kernel["params"]) == len(launch["params"])  # hidden scratch pointers included
    assert [p["size"] for p in kernel["params"]] == [8 if p["type"].startswith("*") else 4
                                                      for p in launch["params"]]
    last = kernel["params"][-1]
    assert kernel["kernarg_segment_size"] == last["offset"] + last["size"]  # no implicit arguments
    assert kernel["group_segment_fixed_size"] == 0  # LDS is dynamic: launch["shared"] at launch
    assert "stride_bk" not in [p["name"] for p in launch["params"]]  # NT: B's K stride is 1
    assert compiler.describe()["support"]["fill_bf16"]["launch"]["warp_size"] == 64


def test_amd_options_on_an_nvidia_target_are_refused(tmp_path):
    compiler = TritonGpuCompiler(get("matmul"), targets()["gpu-node"], tmp_path)
    with pytest.raises(HarnessError, match="waves_per_eu"):
        compiler.compile(dict(C1, waves_per_eu=2), SHAPES[0], 60)


def _descriptor_params(launch):
    """name -> (tensormap param, the names of the values that follow it) of a variant's launch facts."""
    params = launch["params"]
    return {p["name"]: (p, [q["name"] for q in params[i + 1:i + 5]]) for i, p in enumerate(params)
            if p["type"] == "tensormap"}


@pytest.mark.slow
def test_tma_configs_take_host_made_descriptors_in_the_layouts_orientation(tmp_path):
    # TMA = 1: tensor descriptors made on the host are arguments (no global scratch to make them in);
    # the orientation constexprs follow the layout (a descriptor's last stride must be the constant 1),
    # and each descriptor is the compiled kernel's 128-byte map, then its shape (i32), strides (i64)
    compiler = TritonGpuCompiler(get("matmul"), targets()["gpu-node"], tmp_path)
    cfg = dict(C2, TMA=1)
    nt = make_shape(128, 128, 128, "fp16", "NT")
    tn = make_shape(128, 128, 128, "bf16", "TN")
    job = compiler._job(cfg, compiler.specialization(cfg, nt))
    assert (job["constexprs"]["TMA"], job["constexprs"]["A_T"], job["constexprs"]["B_T"]) == (1, False, True)
    job = compiler._job(cfg, compiler.specialization(cfg, tn))
    assert (job["constexprs"]["A_T"], job["constexprs"]["B_T"]) == (True, False)
    plain = compiler._job(C2, compiler.specialization(C2, nt))
    assert plain["constexprs"]["TMA"] == 0
    assert job["signature"]["a_desc"] == "tensordesc<bf16[%d, %d]>" % (cfg["BLOCK_K"], cfg["BLOCK_M"])
    assert (job["signature"]["c_desc"], job["constexprs"]["c_desc"]) == ("constexpr", None)
    assert "a_desc" not in plain["signature"] or plain["constexprs"]["a_desc"] is None
    result = compiler.compile(cfg, tn, 300)
    assert result.status == "ok", result
    assert result.launch["global_scratch_size"] == 0
    descs = _descriptor_params(result.launch)
    assert sorted(descs) == ["a_desc", "b_desc"]
    a, after = descs["a_desc"]
    assert (a["operand"], a["shape"], a["strides"]) == ("a", ["K", "M"], ["stride_ak", "stride_am"])
    assert after == ["K", "M", "stride_ak", "stride_am"]
    assert [q["type"] for q in result.launch["params"] if q["name"] == "stride_am"] == ["i64"]  # only there: 1
    assert a["elem_size"] == 2 and a["swizzle"] in (1, 2, 3) and a["block"][0] == cfg["BLOCK_K"]
    b, after = descs["b_desc"]
    assert (b["shape"], after) == (["K", "N"], ["K", "N", "stride_bk", "stride_bn"])
    assert not _descriptor_params(compiler.compile(C2, nt, 300).launch)


@pytest.mark.slow
def test_wide_tiles_compile_for_sm90_with_four_descriptors(tmp_path):
    # BLOCK_N = 192, 320 and 288: two MMAs a tile (128 + 64, 256 + 64, 256 + 32 wide), one B descriptor each, and
    # C through a descriptor in pieces as wide as the narrow part: A, two B and C descriptors; one
    # program per tile
    target = targets()["gpu-node"]
    w192 = dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=4, TMA=1)
    w320 = dict(w192, BLOCK_M=64, BLOCK_N=320, num_warps=4)
    w288 = dict(w320, BLOCK_N=288, num_stages=5)
    shape = make_shape(512, 6144, 4096, "bf16", "NT")
    summary = build(get("matmul"), target, [shape], tmp_path, BuildOptions(jobs=2, only_configs=[w192, w320, w288]))
    m = summary.manifest
    for config, b_widths, c_block, tiles in ((w192, (128, 64), [128, 64], 4 * 32), (w320, (256, 64), [64, 64], 8 * 20),
                                             (w288, (256, 32), [64, 32], 8 * 22)):
        (variant,) = [v for v in m.variants if v.config == config]
        assert variant.status == "ok", variant.message
        descs = _descriptor_params(variant.launch)
        assert sorted(descs) == ["a_desc", "b2_desc", "b_desc", "c_desc"]
        assert descs["c_desc"][0]["block"] == c_block and descs["b2_desc"][0]["shape"] == ["N", "K"]
        assert (descs["b_desc"][0]["block"][0], descs["b2_desc"][0]["block"][0]) == b_widths  # N x K blocks
        bm, bn = config["BLOCK_M"], config["BLOCK_N"]
        assert variant.launch["shared"] > config["num_stages"] * (bm + bn) * 64 * 2  # the stages of A and B tiles
        (job,) = [j for j in m.jobs if j.variant == variant.id]
        assert tuple(job.grid) == (tiles, 1, 1)


@pytest.mark.slow
def test_tall_tiles_compile_for_sm90_with_two_a_descriptors(tmp_path):
    # BLOCK_M = 192: A in a 128-row and a 64-row block (a_desc, a2_desc); with BLOCK_N = 192 B in two
    # parts too (four MMAs a tile), with 256 in one (the blocks: test_matmul_tails)
    target = targets()["gpu-node"]
    t256 = dict(BLOCK_M=192, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=3, TMA=1)
    t192 = dict(t256, BLOCK_N=192)
    shape = make_shape(1536, 4096, 1024, "bf16", "TN")
    summary = build(get("matmul"), target, [shape], tmp_path, BuildOptions(jobs=2, only_configs=[t256, t192]))
    m = summary.manifest
    for config, names, tiles in ((t256, ["a2_desc", "a_desc", "b_desc", "c_desc"], 8 * 16),
                                 (t192, ["a2_desc", "a_desc", "b2_desc", "b_desc", "c_desc"], 8 * 22)):
        (variant,) = [v for v in m.variants if v.config == config]
        assert variant.status == "ok", variant.message
        descs = _descriptor_params(variant.launch)
        assert sorted(descs) == names
        assert descs["a2_desc"][1] == ["K", "M", "stride_ak", "stride_am"]  # A stored K x M (TN)
        assert variant.launch["shared"] > config["num_stages"] * (192 + config["BLOCK_N"]) * 64 * 2
        (job,) = [j for j in m.jobs if j.variant == variant.id]
        assert tuple(job.grid) == (tiles, 1, 1)


def test_tma_is_pruned_off_hopper():
    from harness.kernels.gemm_tiles import TMA_NEEDS_SM90

    _tma_needs_hopper = TMA_NEEDS_SM90.prunes

    t = targets()
    cfg = dict(C2, TMA=1)
    assert not _tma_needs_hopper(cfg, SHAPES[0], t["gpu-node"])
    assert _tma_needs_hopper(cfg, SHAPES[0], t["mi300"])
    assert not _tma_needs_hopper(C2, SHAPES[0], t["mi300"])
    assert _tma_needs_hopper(cfg, SHAPES[0], dataclasses.replace(t["gpu-node"], gpu_arch="80"))


@pytest.mark.slow
def test_persistent_and_swap_ab_configs(tmp_path):
    # PERSISTENT = 1: one program per multiprocessor of the target (never more than the tiles),
    # three descriptors (A, B, C in halves); SWAP_AB = 1 keeps the tile grid
    target = dataclasses.replace(targets()["gpu-node"], multiprocessors=5)
    persistent = dict(C2, TMA=1, PERSISTENT=1)
    swap = dict(C1, SWAP_AB=1, SPLIT_K=2)
    shapes = [make_shape(256, 192, 64, "fp16", "NN"), make_shape(64, 64, 64, "fp16", "NN"),
              make_shape(32, 64, 64, "fp16", "NN")]
    summary = build(get("matmul"), target, shapes, tmp_path, BuildOptions(jobs=2, only_configs=[persistent, swap]))
    m = summary.manifest
    grids = {}
    for job in m.jobs:
        v = next(v for v in m.variants if v.id == job.variant)
        assert v.status == "ok", v.message
        grids[(v.config.get("PERSISTENT", 0), job.shape)] = tuple(job.grid)
        if v.config.get("PERSISTENT"):
            assert sorted(_descriptor_params(v.launch)) == ["a_desc", "b_desc", "c_desc"]
            assert (v.launch["constexprs"]["PERSISTENT"], v.launch["constexprs"]["SWAP_AB"]) == (1, 0)
        else:
            assert v.launch["constexprs"]["SWAP_AB"] == 1
    assert grids[(1, "256x192x64_fp16_NN")] == (5, 1, 1)  # 12 tiles of 64 x 64 on 5 programs
    assert grids[(1, "64x64x64_fp16_NN")] == (1, 1, 1)  # one tile: one program
    assert grids[(0, "32x64x64_fp16_NN")] == (2 * 1, 2, 1)  # 16 x 64 tiles, two splits (fewer tiles than the 5 multiprocessors)
    assert (0, "256x192x64_fp16_NN") not in grids  # SWAP_AB is for skinny products (swap_ab_off_skinny)


def test_persistent_swap_and_tma_alignment_rules():
    from harness.space import first_pruning_rule

    t = targets()
    rules = get("matmul").gpu_rules
    shape = make_shape(64, 1024, 4096, "fp16", "NN")
    base = dict(C2, TMA=1, PERSISTENT=1)

    def rule(cfg, target=t["gpu-node"], s=shape):
        found = first_pruning_rule(rules, cfg, s, target)
        return found.name if found else None

    assert rule(base) is None
    assert rule(dict(base, TMA=0)) == "persistent_needs_tma"
    assert rule(dict(base, SPLIT_K=2)) == "persistent_one_split"
    assert rule(dict(base, SWAP_AB=1)) == "persistent_one_split"
    assert rule(base, dataclasses.replace(t["gpu-node"], multiprocessors=None)) == "persistent_needs_multiprocessors"
    assert rule(dict(C2, SWAP_AB=1)) is None
    assert rule(dict(C3, SWAP_AB=1), s=make_shape(256, 256, 256, "fp16", "NN")) == "swap_ab_off_skinny"
    assert rule(dict(C2, SWAP_AB=1), s=make_shape(256, 256, 256, "fp16", "NN")) == "swap_ab_off_skinny"
    big = make_shape(1024, 1024, 1024, "fp16", "NN")
    assert rule(dict(C3, num_warps=4), s=big) is None  # 128 x 128 on 128 threads: 128 accumulator registers each
    assert rule(dict(C3, num_warps=2), s=big) == "accumulator_spills"
    # rows of 100 fp16 elements are 200 bytes: no tensor descriptor; pointers are fine
    assert rule(dict(C2, TMA=1), s=make_shape(100, 128, 128, "fp16", "TN")) == "tma_unaligned"
    assert rule(C2, s=make_shape(100, 128, 128, "fp16", "TN")) is None
    assert rule(dict(C2, TMA=1), s=make_shape(104, 128, 128, "fp16", "TN")) is None
    assert rule(dict(C2, TMA=1, PERSISTENT=1), s=make_shape(128, 100, 128, "fp16", "TN")) == "tma_unaligned"


@pytest.mark.fresh_compile_cache  # a compile that the cache answers never times out
def test_a_compile_past_its_timeout_is_killed(tmp_path):
    compiler = TritonGpuCompiler(get("matmul"), targets()["gpu-node"], tmp_path)
    start = time.monotonic()
    res = compiler.compile(dict(C4, BLOCK_K=64), SHAPES[0], 0.2)
    assert res.status == "compile_timeout" and res.artifact is None
    assert time.monotonic() - start < 10
    assert not list((tmp_path / "artifacts").glob("*.cubin"))


@pytest.mark.slow
def test_tail_split_k_and_persistent_variants_compile_for_sm90(tmp_path):
    # masked K tails (K = 999: EVEN_K=0), the deterministic split-K (any count, TMA or pointers,
    # SWAP_AB) on a small M x N with a long K, and the persistent TMA winner on a big shape: the
    # rules leave them all and each compiles for sm90 within the device's shared memory
    target = targets()["gpu-node"]
    tail = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4, num_stages=3)
    split = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, SPLIT_K=6, num_warps=4, num_stages=4)
    tma_split = dict(split, TMA=1)
    swap_split = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=3, num_warps=4, num_stages=4, SWAP_AB=1)
    persistent = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=3, TMA=1,
                      PERSISTENT=1)
    odd, longk, big = (make_shape(1000, 1000, 999, "fp16", "NN"), make_shape(128, 1536, 7168, "bf16", "NN"),
                       make_shape(4096, 4096, 4096, "bf16", "TN"))
    configs = [tail, split, tma_split, swap_split, persistent]
    summary = build(get("matmul"), target, [odd, longk, big], tmp_path,
                    BuildOptions(jobs=2, only_configs=configs))
    m = summary.manifest
    ran = {}
    for job in m.jobs:
        v = next(v for v in m.variants if v.id == job.variant)
        assert v.status == "ok", (v.config, v.message)
        assert v.launch["shared"] <= target.shared_mem_max
        ran[(json.dumps(v.config, sort_keys=True), job.shape)] = (tuple(job.grid), v.specialization)
    key = lambda c: json.dumps(c, sort_keys=True)  # noqa: E731
    grid, spec = ran[(key(tail), odd.id)]
    assert grid == (16 * 16, 1, 1) and "EVEN_K=0" in spec and "K=x" in spec
    assert ran[(key(split), longk.id)][0] == (2 * 12, 6, 1)  # 24 tiles x 6 splits = 144 programs
    assert ran[(key(tma_split), longk.id)][0] == (24, 6, 1)
    assert ran[(key(swap_split), longk.id)][0] == (2 * 24, 3, 1)
    assert ran[(key(persistent), big.id)][0] == (132, 1, 1)


@pytest.mark.slow
def test_stream_k_variants_compile_for_sm90(tmp_path):
    # the wave-quantized prefill shape (320 tiles of 128 x 128 on 132 multiprocessors, 160 of
    # 128 x 256): the persistent kernel with its last tiles cut into K pieces (STREAM_K 1) compiles
    # for sm90 within the device's shared memory, on the full grid; the same configs on 4096^3
    # (1024 tiles: 3 % of the time idle) are pruned
    target = targets()["gpu-node"]
    base = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=4, TMA=1,
                PERSISTENT=1)
    configs = [dict(base, STREAM_K=1), dict(base, BLOCK_N=256, num_stages=3, STREAM_K=1)]
    prefill, square = make_shape(512, 10240, 8192, "bf16", "NT"), make_shape(4096, 4096, 4096, "fp16", "NN")
    summary = build(get("matmul"), target, [prefill, square], tmp_path, BuildOptions(jobs=2, only_configs=configs))
    m = summary.manifest
    assert {(p.shape, p.rule) for p in m.pruned} == {(square.id, "stream_k_little_idle")}
    assert len(m.jobs) == 2
    for job in m.jobs:
        v = next(v for v in m.variants if v.id == job.variant)
        assert v.status == "ok", (v.config, v.message)
        assert v.launch["shared"] <= target.shared_mem_max
        assert v.launch["constexprs"]["STREAM_K"] == v.config["STREAM_K"]
        assert tuple(job.grid) == (132, 1, 1)


@pytest.mark.slow
def test_the_support_kernels_compile_at_once_beside_the_variants(tmp_path, monkeypatch):
    """A tune's first round waits for its variants and the support kernels (fill, error and
    reference per dtype): they compile together, not one after another."""
    import threading

    monkeypatch.setenv("HARNESS_CACHE_DIR", "off")
    inside, most, lock = [0], [0], threading.Lock()
    real = TritonGpuCompiler._compile_job

    def counted(self, job, timeout):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            return real(self, job, timeout)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(TritonGpuCompiler, "_compile_job", counted)
    target = load_targets(ROOT / "targets.yaml")["gpu-node"]
    summary = build(get("matmul"), target, [make_shape(64, 64, 64, "fp16", "NN")], tmp_path,
                    BuildOptions(jobs=1, only_configs=[C1], support_dtypes=("bf16", "fp16")))
    support = summary.manifest.toolchain["support"]
    assert {"fill_fp16", "fill_bf16", "reference_fp16", "reference_bf16", "error_fp32"} <= set(support)
    assert most[0] >= len(support)  # every support kernel and the variant in flight at once
