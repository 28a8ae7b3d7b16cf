"""The matmul's warp-specialized Gluon kernel (harness/kernels/matmul/gluon_kernel.py): the 192 x 192
tile on the persistent grid. Its rules, its descriptor plan and its seeds; host builds for sm90 in
three layouts and an odd shape; and those real artifacts run by the GPU agent on the stand-in API,
which checks each of the five tensor descriptors against its operand. Gluon has no interpreter: the
kernel's own answers are checked on a GPU (docs/notes/2026-11-26-gpu-runs.md, "Gluon")."""

import dataclasses

import pytest

from harness.kernels import get
from harness.kernels.matmul import GLUON_SOURCE, descriptors
from harness.shapes import make_shape
from harness.targets import load_targets
from tests.conftest import REPO
from tests.test_matmul_tails import node_rule

WS = dict(BLOCK_M=192, BLOCK_N=192, BLOCK_K=32, GROUP_M=8, SPLIT_K=1, num_warps=4, num_stages=6, TMA=1,
          PERSISTENT=1, SWAP_AB=0, STREAM_K=0)
FEW_WAVES = make_shape(768, 6144, 16384, "fp16", "NN")  # 4 x 32 = 128 tiles: one wave of 132


def node():
    return load_targets(REPO / "targets.yaml")["gpu-node"]


def test_the_persistent_tile_in_parts_is_the_gluon_kernel_and_its_rules_keep_it_to_what_it_runs():
    kernel = get("matmul")
    assert kernel.triton_source(WS) == GLUON_SOURCE
    assert kernel.triton_source(dict(WS, PERSISTENT=0)) == kernel.triton_module  # Triton's tile in parts
    assert kernel.triton_source(dict(WS, BLOCK_M=128, BLOCK_N=256)) == kernel.triton_module
    for layout in ("NN", "NT", "TN", "TT"):
        for dtype in ("fp16", "bf16"):
            assert node_rule(WS, make_shape(768, 6144, 16384, dtype, layout)) is None
    assert node_rule(dict(WS, BLOCK_K=64, num_stages=3), FEW_WAVES) is None
    for change, rule in ((dict(BLOCK_N=128), "warp_specialized_tile"), (dict(BLOCK_M=128), "warp_specialized_tile"),
                         (dict(num_warps=8), "warp_specialized_tile"), (dict(STREAM_K=1), "warp_specialized_tile"),
                         (dict(TMA=0), "persistent_needs_tma"), (dict(SPLIT_K=2), "persistent_one_split"),
                         # a ring of 7 slots of 24 KiB and the 72 KiB C tile: over the 227 KiB of sm90
                         (dict(num_stages=7), "warp_specialized_over_shared"),
                         (dict(BLOCK_K=64, num_stages=4), "warp_specialized_over_shared")):
        assert node_rule(dict(WS, **change), FEW_WAVES) == rule, change
    assert node_rule(WS, make_shape(768, 6144, 16384, "fp32", "NN")) == "warp_specialized_tile"  # tf32 MMAs: no
    rules = get("matmul").gpu_rules
    for arch in ("80", "100"):  # wgmma is Hopper's
        target = dataclasses.replace(node(), gpu_arch=arch)
        assert any(r.name == "warp_specialized_tile" and r.prunes(WS, FEW_WAVES, target) for r in rules)


def test_its_descriptors_are_a_in_64_row_blocks_and_b_and_c_in_two_parts():
    def blocks(a_t, b_t):
        return {d.name: (d.operand, d.block) for d in descriptors.tensor_descriptors(WS, a_t, b_t)}

    assert blocks(False, False) == {"a_desc": ("a", (64, 32)), "b_desc": ("b", (32, 128)), "b2_desc": ("b", (32, 64)),
                                    "c_desc": ("c", (64, 128)), "c2_desc": ("c", (64, 64))}
    nt, tn = blocks(False, True), blocks(True, False)
    assert (nt["a_desc"], nt["b_desc"], nt["b2_desc"]) == (("a", (64, 32)), ("b", (128, 32)), ("b", (64, 32)))
    assert (tn["a_desc"], tn["b_desc"]) == (("a", (32, 64)), ("b", (32, 128)))


def test_seeded_where_its_waves_hold_no_more_than_the_128_row_tiles():
    kernel, target = get("matmul"), node()

    def seeded(m, n, k, dtype="bf16", layout="NN", on=target):
        return any(descriptors.warp_specialized(c) for c in kernel.seed_configs(make_shape(m, n, k, dtype, layout), on))

    assert seeded(768, 6144, 16384) and seeded(3072, 3072, 4096, layout="TN")  # 128 and 256 tiles
    assert seeded(1536, 3072, 8192, "fp16", "NT")
    assert seeded(1536, 6144, 6144, "fp16", "NT")  # 256 tiles: as much work a wave as 384 of 128 x 192
    assert not seeded(768, 2048, 5632)  # 44 tiles in one wave, where 48 of 128 x 256 hold less
    assert not seeded(1024, 5120, 13824, layout="NT")  # 162 tiles: two waves, as 160 of 128 x 256
    # M = 1024: six rows of 192-row tiles, the last a third full; 256 tiles of 128 x 256 fill the same
    # two waves with less work (the tile lost there in runs h38 and h38b)
    assert not seeded(1024, 8192, 3584, layout="NT") and not seeded(1024, 4096, 16384, layout="TN")
    assert not seeded(4096, 4096, 4096)  # 484 tiles in four waves, as 512 of 128 x 256
    assert seeded(1536, 8960, 4096, layout="TN")  # 376 tiles in three waves, where 128 x 256 takes four
    assert not seeded(768, 6144, 16384, "fp32")  # its rules: 16-bit inputs only
    assert not seeded(768, 6144, 16384, on=dataclasses.replace(target, gpu_arch="100"))


@pytest.fixture(scope="module")
def ws_build(tmp_path_factory):
    pytest.importorskip("triton")
    from harness.build import BuildOptions, build

    target = dataclasses.replace(node(), multiprocessors=5)
    shapes = [make_shape(384, 576, 96, "fp16", "NN"), make_shape(384, 384, 64, "bf16", "TN"),
              make_shape(200, 408, 72, "fp16", "NT")]  # 6, 4 and 6 tiles, with M, N and K tails in NT
    root = tmp_path_factory.mktemp("ws")
    summary = build(get("matmul"), target, shapes, root / "build", BuildOptions(jobs=2, only_configs=[WS]))
    return root, target, summary


def test_it_builds_for_sm90_with_its_warps_and_five_host_made_descriptors(ws_build):
    _, target, summary = ws_build
    m = summary.manifest
    assert len(m.jobs) == 3 and not m.pruned
    for job in m.jobs:
        v = next(v for v in m.variants if v.id == job.variant)
        assert v.status == "ok", v.message
        launch = v.launch
        assert launch["entry"] == "matmul_ws_kernel"
        assert launch["num_warps"] >= 13 and launch["threads"] == 32 * launch["num_warps"]  # 3 x 4 + the loader
        assert 6 * 384 * 32 * 2 < launch["shared"] <= target.shared_mem_max  # the ring and C's tile
        maps = [p for p in launch["params"] if p["type"] == "tensormap"]
        assert [(p["name"], p["operand"]) for p in maps] == [("a_desc", "a"), ("b_desc", "b"), ("b2_desc", "b"),
                                                              ("c_desc", "c"), ("c2_desc", "c")]
        assert launch["constexprs"]["STAGES"] == 6 and launch["constexprs"]["A_T"] == job.shape.endswith("TN")
        assert job.grid == [{"384x576x96_fp16_NN": 5, "384x384x64_bf16_TN": 4, "200x408x72_fp16_NT": 5}[job.shape], 1, 1]
        # persistent: one program a multiprocessor, never more than the tiles


def test_the_compiler_refuses_a_config_the_kernel_does_not_take(tmp_path):
    # FIXED in gluon_kernel.py: values its configs all have (the rules keep them so); a config that
    # reaches the compiler with another one is an error, not a kernel built with the value ignored
    pytest.importorskip("triton")
    from harness.compile.triton_gpu import TritonGpuCompiler
    from harness.errors import HarnessError

    compiler = TritonGpuCompiler(get("matmul"), node(), tmp_path)
    spec = compiler.specialization(WS, FEW_WAVES)
    job = compiler._job(WS, spec)
    assert (job["fn"], job["language"], job["constexprs"]["STAGES"]) == ("matmul_ws_kernel", "gluon", 6)
    assert "TMA" not in job["constexprs"] and job["options"] == {"num_warps": 4, "num_stages": 6}
    with pytest.raises(HarnessError, match="takes only num_warps=4"):
        compiler._job(dict(WS, num_warps=8), spec)
    with pytest.raises(HarnessError, match="takes only STREAM_K=0"):
        compiler._job(dict(WS, STREAM_K=1), spec)


def test_a_kernel_source_that_cannot_be_imported_is_a_clear_error(tmp_path):
    # as the Gluon kernel is on a Triton without Gluon: one line that names the config and the source
    pytest.importorskip("triton")
    from harness.compile.triton_gpu import TritonGpuCompiler
    from harness.errors import HarnessError

    kernel = dataclasses.replace(get("matmul"), other_source=lambda c: "harness.kernels.matmul.no_such_kernel:k")
    compiler = TritonGpuCompiler(kernel, node(), tmp_path)
    with pytest.raises(HarnessError, match="no_such_kernel:k, which this Triton .* cannot import"):
        compiler.specialization(WS, FEW_WAVES)


@pytest.mark.slow
def test_its_artifacts_run_through_the_gpu_agent(ws_build, monkeypatch):
    from tests.test_gpu_supervisor import options, run_agent

    root, _, summary = ws_build
    rows, _ = run_agent(summary.bundle, root / "results.csv", options(), monkeypatch, devices=("cuda:0",))
    assert len(rows) == 3
    for r in rows:
        assert r["status"] == "ok", r
        assert float(r["rel_err"]) < 1e-2
