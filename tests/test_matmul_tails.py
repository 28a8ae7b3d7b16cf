"""Any M, N, K is a valid matmul shape: the kernels mask their tails, the rules leave configs for
every shape, and split-K reduces deterministically.

* the C++ kernel for boards, cross-compiled for RVV and run under qemu over the loopback sshd;
* the Triton kernel, run in Triton's interpreter (tests/triton_interp.py): every variant on odd
  shapes and layouts, the split-K workspace and counters, bit-identical output whatever order the
  programs run in.
"""

import itertools
import json
import random

import numpy as np
import pandas as pd
import pytest

from harness.kernels import get
from harness.kernels.matmul import descriptors
from harness.shapes import make_shape
from harness.space import first_pruning_rule
from harness.targets import load_targets
from tests.conftest import ANSWERS_ONLY, REPO, needs

ODD = "24x40x56,1x1x1,7x13x1000,24x40x56:fp16"


@pytest.mark.slow
@needs("qemu-riscv64", "clang", "riscv64-linux-gnu-ld")
def test_odd_shapes_on_an_rvv_board(workspace):
    ws = workspace
    (ws.path / "space.yaml").write_text("MR: [1, 4]\nNR: [8, 32]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1]\n")
    ws.harness("build", "matmul", "--target", "rv", "--shapes", ODD, "--space", "space.yaml")
    ws.harness("push", "rv")
    ws.harness("run", "--remote", "rv", "--iters", "2", *ANSWERS_ONLY)
    ws.harness("report")
    df = pd.read_csv(ws.path / "results/rv/matmul/results.csv")
    ok = df[df.status == "ok"]
    assert set(df.status) <= {"ok", "pruned"}
    assert set(ok.shape_id) == {"24x40x56_fp32_NN", "1x1x1_fp32_NN", "7x13x1000_fp32_NN", "24x40x56_fp16_NN"}
    assert (ok[ok.dtype == "fp32"].rel_err < 1e-5).all() and (ok[ok.dtype == "fp16"].rel_err < 1e-2).all()
    # K = 56 inside one KC 64 block and K = 1000 with a 40-step tail: zero-padded packing, checked
    # (fp16 is packed to fp32: its tiles are as wide as fp32's); N = 13 keeps only NR 8
    assert len(ok[ok.shape_id.isin(["24x40x56_fp32_NN", "24x40x56_fp16_NN"])]) == 4 + 4
    assert len(ok[ok.shape_id == "7x13x1000_fp32_NN"]) == 2
    best = {b["shape"] for b in json.loads((ws.path / "tuned/rv/matmul.json").read_text())["best"]}
    assert "1x1x1_fp32_NN" in best


@pytest.mark.slow
def test_every_shape_has_configs_left_by_the_rules():
    # the full spaces against random shapes of 1 to 65536 (and the corners): no shape is left
    # without a config, on a board with vectors or on the GPU node
    kernel = get("matmul")
    targets = load_targets(REPO / "targets.yaml")
    rng = random.Random(11)
    dims = [1, 2, 7, 13, 999, 1000, 65535, 65536]
    shapes = [make_shape(*d, dtype=dt) for d, dt in zip(itertools.product(dims[:4], repeat=3), itertools.cycle(
        ["fp16", "fp32", "bf16"]))]
    shapes += [make_shape(rng.randint(1, 65536), rng.randint(1, 65536), rng.randint(1, 65536),
                          dtype=rng.choice(["fp16", "bf16", "fp32"]), layout=rng.choice(["NN", "NT", "TN", "TT"]))
               for _ in range(12)]
    shapes += [make_shape(65536, 65536, 65536, "bf16"), make_shape(1000, 1000, 999, "fp16")]
    for target in (targets["laptop"], targets["gpu-node"]):
        space = kernel.space_for(target)
        configs = [dict(zip(space, v)) for v in itertools.product(*space.values())]
        rules = kernel.rules_for(target)
        for shape in shapes:
            assert any(first_pruning_rule(rules, c, shape, target) is None for c in configs), (target.name, shape.id)


def test_split_k_rules_use_the_multiprocessors():
    kernel = get("matmul")
    target = load_targets(REPO / "targets.yaml")["gpu-node"]  # 132 multiprocessors
    shape = make_shape(128, 1536, 7168, "bf16")
    base = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=4)

    def rule(**change):
        found = first_pruning_rule(kernel.gpu_rules, dict(base, **change), shape, target)
        return found.name if found else None

    assert rule(SPLIT_K=6) is None and rule(SPLIT_K=12) is None  # 24 tiles: 144 and 288 programs
    assert rule(SPLIT_K=16) is None
    assert rule(BLOCK_N=64, SPLIT_K=12) == "split_k_overfills"  # 48 tiles x 12: over 4 per multiprocessor
    assert rule(BLOCK_N=64, SPLIT_K=8) is None
    assert rule(BLOCK_M=16, BLOCK_N=64, SPLIT_K=2) == "split_k_on_full_grid"  # 192 tiles fill 132 alone
    assert rule(BLOCK_K=256, SPLIT_K=16) == "split_k_too_deep"  # 28 steps: 16 splits of 2 use 14
    assert rule(BLOCK_K=256, SPLIT_K=14) is None
    odd = make_shape(1000, 1000, 999, "fp16")
    assert first_pruning_rule(kernel.gpu_rules, dict(base, BLOCK_K=128), odd, target) is None  # K tail masked


# ---- the Triton kernel, interpreted ------------------------------------------------------------------
interp = pytest.importorskip("tests.triton_interp")
pytest.importorskip("triton")

VARIANTS = {
    "pointers": dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32),
    "split3": dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, SPLIT_K=3),
    "swap_split5": dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, SPLIT_K=5, SWAP_AB=1),
    "tma_split3": dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, SPLIT_K=3, TMA=1),
    "persistent": dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, TMA=1, PERSISTENT=1),
    "wide": dict(BLOCK_M=16, BLOCK_N=48, BLOCK_K=32, GROUP_M=2, TMA=1),  # two MMAs, 32 + 16 wide
    "wide5": dict(BLOCK_M=16, BLOCK_N=40, BLOCK_K=32, GROUP_M=2, TMA=1),  # 32 + 8 wide, C in five pieces
    "wide9": dict(BLOCK_M=16, BLOCK_N=72, BLOCK_K=32, GROUP_M=2, TMA=1),  # 64 + 8 wide, C in nine pieces
    "tall": dict(BLOCK_M=48, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, TMA=1),  # 32 + 16 rows: two A tiles
    "tall_wide": dict(BLOCK_M=48, BLOCK_N=48, BLOCK_K=32, GROUP_M=2, TMA=1),  # four MMAs, C in 16 x 16 pieces
}
# odd shapes; descriptors need 16-byte rows, so the TMA variants get rows of multiples of 8
POINTER_SHAPES = [(24, 40, 56), (7, 13, 1000), (1, 1, 1), (33, 1, 70)]
TMA_SHAPES = [(40, 48, 200), (24, 40, 56), (8, 72, 1000)]


@pytest.mark.slow
def test_triton_variants_mask_every_tail():
    cases = []
    for name, config in VARIANTS.items():
        shapes = TMA_SHAPES if config.get("TMA") else POINTER_SHAPES
        for (M, N, K), layout in itertools.product(shapes, ("NN", "TN", "NT")):
            if config.get("SPLIT_K", 1) > 1 and -(-K // config["BLOCK_K"]) < config["SPLIT_K"]:
                continue  # split_k_too_deep prunes it
            cases.append(dict(M=M, N=N, K=K, layout=layout, config=config))
    assert len(cases) == 81
    for case, result in zip(cases, interp.run_cases(cases)):
        err = interp.rel_err(result)
        assert err < 1e-3, (case, err)  # fp16 inputs, fp32 sums; NaN where a tile was not written
        assert not result["locks"].any()  # the counters are zero again for the next launch


@pytest.mark.slow
def test_split_k_reduction_is_deterministic_and_uses_every_split():
    # fp32 output keeps every bit of the fp32 sums: any change of summation order would show
    config = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, SPLIT_K=6)
    runs = interp.run_cases([dict(M=40, N=72, K=1000, layout="NN", config=config, c_dtype="fp32", order_seed=s)
                             for s in (None, 1, 2, 3)])
    assert len({tuple(r["order"]) for r in runs}) == 4  # the programs really ran in four orders
    first = runs[0]["C"].view(np.uint32)
    for r in runs[1:]:
        assert np.array_equal(r["C"].view(np.uint32), first)
    # each split wrote its own partial (K = 1000: 32 steps, 6 per split, the last split gets 2)
    ws = runs[0]["ws"]
    assert not np.isnan(ws).any()
    A, B = runs[0]["A"].astype(np.float64), runs[0]["B"].astype(np.float64)
    assert np.allclose(ws[5], A[:, 960:] @ B[960:, :], rtol=1e-5, atol=1e-5)
    total = np.zeros_like(ws[0])
    for part in ws:  # split order, as the kernel sums
        total += part
    assert np.array_equal(runs[0]["C"].view(np.uint32), total.view(np.uint32))


@pytest.mark.slow
def test_odd_shapes_and_split_k_through_the_gpu_agent(tmp_path, monkeypatch):
    # a real sm90 bundle built here (odd shapes, split-K 3) run by the real GPU agent and worker on
    # the stand-in API (tests/gpu_standin.py), which follows the kernel's split-K plan: it checks
    # the grid, the workspace (SPLIT_K x M x N fp32) and zeroed counters the worker provides
    from harness.build import BuildOptions, build
    from tests.test_gpu_supervisor import options, run_agent

    target = load_targets(REPO / "targets.yaml")["gpu-node"]
    plain = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, SPLIT_K=1, num_warps=2, num_stages=2)
    split = dict(plain, SPLIT_K=3)
    shapes = [make_shape(24, 40, 56, "fp16"), make_shape(1, 1, 1, "fp16"), make_shape(7, 13, 1000, "bf16", "TN")]
    summary = build(get("matmul"), target, shapes, tmp_path / "build", BuildOptions(jobs=2, only_configs=[plain, split]))
    m = summary.manifest
    assert {(p.shape, p.rule) for p in m.pruned if p.config == split} == {
        ("24x40x56_fp16_NN", "split_k_too_deep"), ("1x1x1_fp16_NN", "split_k_too_deep")}
    grids = {(j.variant, j.shape): j.grid for j in m.jobs}
    split_variant = next(v for v in m.variants if v.config == split)
    assert grids[(split_variant.id, "7x13x1000_bf16_TN")] == [1, 3, 1]
    rows, _ = run_agent(summary.bundle, tmp_path / "results.csv", options(), monkeypatch, devices=("cuda:0",))
    measured = [r for r in rows if r["status"] != "pruned"]
    assert len(measured) == len(m.jobs) == 4 and len(rows) == 6  # the two pruned pairs have their rows
    for r in measured:
        assert r["status"] == "ok", r
        assert float(r["rel_err"]) < 1e-2 and float(r["err_ratio"]) == 0.0


# ---- stream-K (PERSISTENT + STREAM_K), interpreted ----------------------------------------------------
STREAM_K = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, TMA=1, PERSISTENT=1)


@pytest.mark.slow
def test_stream_k_masks_every_tail_on_few_programs():
    # tiles not a multiple of the programs, K off BLOCK_K, M and N tails, three layouts; the last
    # wave cut into 2 and 4 K pieces, left whole (over half full, or K of one step), fewer tiles than
    # programs with programs left idle, and whole waves: within 1e-3 of fp64, counters zero
    from harness.kernels.matmul.stream_k import pieces_per_tile

    plans = [((40, 48, 200), 4, 2),   # 6 tiles: 2 left over on 4 programs, 2 pieces each
             ((72, 80, 1000), 7, 4),  # 15 tiles: 1 left over, 4 pieces, 3 programs idle
             ((8, 72, 1000), 13, 4),  # 3 tiles on 13 programs: all shared, 1 program idle
             ((16, 32, 40), 5, 2),    # 1 tile of 2 K steps: 2 pieces at most
             ((24, 40, 56), 5, 1),    # 4 tiles on 5 programs: one piece each, stored directly
             ((40, 64, 72), 3, 1)]    # 6 tiles on 3: whole waves, no stream-K tile
    cases = []
    for (M, N, K), programs, pieces in plans:
        assert pieces_per_tile(-(-M // 16) * -(-N // 32), programs, -(-K // 32)) == pieces, (M, N, K)
        for layout in ("NN", "TN", "NT"):
            cases.append(dict(M=M, N=N, K=K, layout=layout, config=dict(STREAM_K, STREAM_K=1), programs=programs))
    for case, result in zip(cases, interp.run_cases(cases)):
        err = interp.rel_err(result)
        assert err < 1e-3, (case, err)
        assert not result["locks"].any(), case


def _tile_rows_cols(tile, M, N, cfg):
    """The GROUP_M swizzle of the kernel's _tile_of: tile index -> (rows, cols) of C."""
    bm, bn, group = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["GROUP_M"]
    grid_m, grid_n = -(-M // bm), -(-N // bn)
    width = group * grid_n
    first_m = (tile // width) * group
    size = min(grid_m - first_m, group)
    pm, pn = first_m + tile % size, (tile % width) // size
    return slice(pm * bm, min(M, (pm + 1) * bm)), slice(pn * bn, min(N, (pn + 1) * bn))


@pytest.mark.slow
@pytest.mark.parametrize("programs", [11, 13])
def test_stream_k_is_deterministic_and_follows_its_plan(programs):
    # 72x80x1000: 5 x 3 = 15 tiles of 16 x 32, 32 K steps each; on 11 programs 4 tiles left over,
    # 2 pieces each (3 programs idle), on 13 programs 2 left over, 4 pieces each (5 idle). fp32 C
    # keeps every bit of the sums: any change of summation order would show
    from harness.kernels.matmul.stream_k import pieces_per_tile, stream_k_pieces, stream_k_tiles

    M, N, K, tiles, k_tiles = 72, 80, 1000, 15, 32
    cfg = dict(STREAM_K, STREAM_K=1)
    runs = interp.run_cases([dict(M=M, N=N, K=K, layout="NT", config=cfg, c_dtype="fp32", programs=programs,
                                  order_seed=s) for s in (None, 2, 4, 6)])  # 6: reversed
    assert len({tuple(r["order"]) for r in runs}) == 4  # the programs really ran in four orders
    first = runs[0]["C"].view(np.uint32)
    for r in runs[1:]:
        assert np.array_equal(r["C"].view(np.uint32), first)
    sk, pieces = stream_k_tiles(tiles, programs), pieces_per_tile(tiles, programs, k_tiles)
    assert (sk, pieces) == {11: (4, 2), 13: (2, 4)}[programs]
    plan = stream_k_pieces(tiles, programs, k_tiles)
    assert len(plan) == sk * pieces and [p for p, _, _, _ in plan] == list(range(sk * pieces))
    A, B, ws, C = (runs[0]["A"].astype(np.float64), runs[0]["B"].astype(np.float64), runs[0]["ws"],
                   runs[0]["C"])
    assert np.isnan(ws[sk * pieces:]).all()  # the idle programs wrote no partial
    for t in range(sk):
        rows, cols = _tile_rows_cols(tiles - sk + t, M, N, cfg)
        parts = [(p, lo, hi) for p, tile, lo, hi in plan if tile == t]  # in piece order
        assert [lo for _, lo, _ in parts] == [0] + [hi for _, _, hi in parts[:-1]] and parts[-1][2] == k_tiles
        total = None
        for p, lo, hi in parts:  # the partial of steps [lo, hi) in the program's slot
            k0, k1 = lo * 32, min(K, hi * 32)
            part = ws[p]
            want = A[rows, k0:k1] @ B[k0:k1, cols]
            assert np.allclose(part[:want.shape[0], :want.shape[1]], want, rtol=1e-5, atol=1e-4), (t, p)
            total = part.copy() if total is None else total + part
        got = C[rows, cols]
        assert np.array_equal(got.view(np.uint32), total[:got.shape[0], :got.shape[1]].view(np.uint32)), t


def test_stream_k_rules():
    kernel = get("matmul")
    targets = load_targets(REPO / "targets.yaml")
    node, laptop = targets["gpu-node"], targets["laptop"]  # 132 multiprocessors; a CPU board
    base = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=4, TMA=1,
                PERSISTENT=1, SWAP_AB=0)

    def rule(shape, **change):
        found = first_pruning_rule(kernel.gpu_rules, dict(base, **change), shape, node)
        return found.name if found else None

    prefill = make_shape(512, 10240, 8192, "bf16", "NT")  # 320 tiles: 2.42 waves, 56 left over in 2 pieces
    assert rule(prefill, STREAM_K=1) is None
    assert rule(prefill, STREAM_K=1, PERSISTENT=0) == "stream_k_needs_persistent"
    assert rule(make_shape(1024, 16896, 4096, "fp16"), STREAM_K=1) == "stream_k_little_idle"  # 1056 = 8 x 132
    assert rule(make_shape(4096, 4096, 4096, "fp16"), STREAM_K=1) == "stream_k_little_idle"  # 1024 tiles: 3 % idle
    assert rule(make_shape(1024, 3584, 18944, "bf16"), STREAM_K=1) == "stream_k_unsplit"  # 224 tiles: 92 left over
    few = make_shape(128, 1536, 7168, "bf16")  # 12 tiles for 132 programs: all shared out, 4 pieces each
    assert rule(few, STREAM_K=1, GROUP_M=1) is None
    assert rule(make_shape(128, 1536, 64, "bf16"), STREAM_K=1, GROUP_M=1) == "stream_k_unsplit"  # one K step
    assert kernel.space_for(node)["STREAM_K"] == [0, 1]
    assert "STREAM_K" not in kernel.space_for(laptop) and "STREAM_K" in kernel.space_for(node)
    assert kernel.grid(dict(base, STREAM_K=1), few, node) == (132, 1, 1)
    assert kernel.grid(base, few, node) == (12, 1, 1)


@pytest.mark.slow
def test_stream_k_through_the_gpu_agent(tmp_path, monkeypatch):
    # a real sm90 stream-K bundle (5 multiprocessors: 6 tiles of 16 x 32 on 5 programs) run by the
    # GPU agent and worker on the stand-in API, which refuses a workspace shorter than one
    # BLOCK_M x BLOCK_N fp32 slot per program or counters that are not zero
    import dataclasses

    from harness.build import BuildOptions, build
    from tests.test_gpu_supervisor import options, run_agent

    target = dataclasses.replace(load_targets(REPO / "targets.yaml")["gpu-node"], multiprocessors=5)
    cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=3, TMA=1,
               PERSISTENT=1, STREAM_K=1)
    # 6 tiles: 1 left over in 4 pieces; 2 tiles: 2 pieces each; 9 tiles: 4 left over, one piece each (pruned)
    shapes = [make_shape(40, 64, 200, "fp16", "NT"), make_shape(16, 64, 512, "bf16"), make_shape(48, 96, 64, "bf16")]
    summary = build(get("matmul"), target, shapes, tmp_path / "build", BuildOptions(jobs=2, only_configs=[cfg]))
    m = summary.manifest
    assert [j.grid for j in m.jobs] == [[5, 1, 1], [5, 1, 1]]
    assert [(p.shape, p.rule) for p in m.pruned] == [("48x96x64_bf16_NN", "stream_k_unsplit")]
    assert all(v.launch["constexprs"]["STREAM_K"] == 1 for v in m.variants)
    rows, _ = run_agent(summary.bundle, tmp_path / "results.csv", options(), monkeypatch, devices=("cuda:0",))
    assert sorted(r["status"] for r in rows) == ["ok", "ok", "pruned"]
    for r in rows:
        if r["status"] == "ok":
            assert float(r["rel_err"]) < 1e-2 and float(r["err_ratio"]) == 0.0


def node_rule(config, shape):
    """The first of matmul's GPU rules that prunes ``config`` for ``shape`` on targets.yaml's gpu-node, or None."""
    node = load_targets(REPO / "targets.yaml")["gpu-node"]
    found = first_pruning_rule(get("matmul").gpu_rules, config, shape, node)
    return found.name if found else None


def test_wide_tiles_are_tma_tiles_seeded_where_their_waves_are_shorter():
    # the 3, 5 or 9 x 2^k-wide tiles are on the TMA path only (one tile a program), store C through a
    # descriptor (16-byte rows of C too), are in the NVIDIA space only; 128 x 192 is seeded where it
    # needs no more waves of tiles than the 128 x 256 tile, 64 x 192, 64 x 320 and 128 x 320 where
    # their waves hold less work than those of the 128-row tiles 128 to 256 wide, 64 x 288 where it
    # does in one wave and B is stored N x K
    kernel = get("matmul")
    targets = load_targets(REPO / "targets.yaml")
    node = targets["gpu-node"]
    wide = dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=4, TMA=1,
                PERSISTENT=0, SWAP_AB=0, STREAM_K=0)
    shape = make_shape(512, 6144, 4096, "bf16", "NT")

    def rule(shape, **change):
        return node_rule(dict(wide, **change), shape)

    assert rule(shape) is None and rule(shape, BLOCK_N=320, num_stages=3) is None
    assert rule(shape, BLOCK_N=144) is None  # 128 + 16
    assert rule(shape, BLOCK_M=64, BLOCK_N=288, num_warps=4) is None  # 256 + 32, 144 a thread
    for change in (dict(TMA=0), dict(SPLIT_K=2), dict(SWAP_AB=1, BLOCK_M=16),
                   dict(BLOCK_N=224), dict(BLOCK_N=144, TMA=0), dict(BLOCK_N=320, TMA=0)):  # 224 = 7 x 32
        assert rule(shape, **change) == "wide_tile_needs_tma", change
    assert rule(shape, PERSISTENT=1) == "warp_specialized_tile"  # the Gluon kernel's tile is 192 x 192
    rows_of_c_unaligned = make_shape(512, 6148, 4096, "bf16", "NT")  # A and B rows of K: aligned
    assert rule(rows_of_c_unaligned) == "tma_unaligned"
    assert rule(rows_of_c_unaligned, BLOCK_N=256) is None  # a plain TMA tile stores C through pointers
    assert rule(shape, num_warps=4) is None  # 128 x 192 fp32 on 4 warps: 192 a thread
    assert rule(shape, BLOCK_N=320, num_warps=4) == "accumulator_spills"  # 320 a thread
    assert rule(shape, BLOCK_M=64, BLOCK_N=320, num_warps=4) is None  # 160 a thread
    space = kernel.space_for(node)["BLOCK_N"]
    assert {144, 192, 288, 320} <= set(space)
    assert not {144, 192, 288, 320} & set(kernel.space_for(targets["mi300"])["BLOCK_N"])
    assert "BLOCK_N" not in kernel.space_for(targets["laptop"])  # CPU boards: the packed kernel's MR x NR

    def wide_seeds(text, layout="NT"):
        s = make_shape(*(int(x) for x in text.split("x")), dtype="bf16", layout=layout)
        return [(c["BLOCK_M"], c["BLOCK_N"], c["GROUP_M"], c["num_warps"], c["num_stages"])
                for c in kernel.seed_configs(s, node) if c["BLOCK_N"] in (144, 192, 288, 320)
                and not descriptors.warp_specialized(c)]  # (the Gluon kernel's seeds: test_warp_specialized.py)

    wide, wider = (128, 192, 8, 4, 4), (128, 320, 8, 8, 5)  # 128 x 320 with BLOCK_K 32
    # 128 x 192 and 128 x 320 where the 192-wide tile needs no more waves than the 256-wide one
    assert wide_seeds("512x6144x4096") == [wide, wider]  # 128 tiles against 96: one wave each
    assert wide_seeds("3072x3072x4096") == [wide, wider]  # 384 tiles against 288: three waves each
    assert wide_seeds("4096x3584x3584") == []  # 608 tiles: 5 waves against 448 tiles: 4
    assert wide_seeds("2048x2048x8192") == []  # 176 tiles: 2 waves against 128 tiles: 1
    assert wide_seeds("64x6144x4096") == []  # skinny: the SWAP_AB tiles
    # 64 x 192 where its waves hold less work: 128 tiles, one full wave, against 64 (and 48) in half a wave
    assert wide_seeds("512x3072x8192") == [wide, wider, (64, 192, 8, 4, 7)]
    assert wide_seeds("128x6144x4096") == [(128, 192, 1, 4, 4), (128, 320, 1, 8, 5), (64, 192, 8, 4, 7)]  # one row of 128: no swizzle
    # two waves of 64 x 192 hold as much as one of 128 x 192 (512x6144x4096 above): not seeded
    # 320 wide: 128 tiles of 64 x 320 in one wave, where 160 of 128 x 128 take two, 108 of 128 x 192 one
    assert wide_seeds("512x5120x14336") == [wide, wider, (64, 320, 8, 4, 4)]
    # 128 tiles of 128 x 320 (256 of 64 x 320: two waves of half the work), against 320, 216, 160 tiles
    assert wide_seeds("512x10240x8192") == [wide, wider, (64, 320, 8, 4, 4)]
    # 128 x 320 by its own waves alone: 640 tiles (5 waves) hold less than 1600 of 128 x 128 (13 waves),
    # 1072 of 128 x 192 (9) and 800 of 128 x 256 (7), where the 192-wide tile needs two waves more
    assert wide_seeds("2048x12800x4096") == [(64, 192, 8, 4, 7), (64, 320, 8, 4, 4), wider]
    # 64 x 288: 128 tiles in one wave, where 96 of 128 x 192 leave a quarter of it idle and 144 of
    # 128 x 128 take two; with B stored N x K only (the 64 x 320 tile won where B is stored K x N)
    assert wide_seeds("1024x2304x9216") == [wide, wider, (64, 288, 8, 4, 5), (64, 320, 8, 4, 4)]
    assert wide_seeds("2048x1152x6912") == [wide, wider, (64, 288, 8, 4, 5), (64, 320, 8, 4, 4)]
    for layout in ("NN", "TN"):
        assert wide_seeds("1024x2304x9216", layout) == [wide, wider, (64, 320, 8, 4, 4)]
    assert (64, 288, 8, 4, 5) not in wide_seeds("768x6144x16384")  # 264 tiles: two waves


def test_tall_tiles_are_tma_tiles_seeded_where_their_waves_hold_less_than_the_widest():
    # BLOCK_M = 192 (128 + 64 rows: two A tiles, an MMA each) is on the TMA path only, in the NVIDIA
    # space only; its 192 x 256 tile (192 accumulator registers a thread on 8 warps) is seeded where
    # its waves hold less work a multiprocessor than those of the 128 x 256 and 128 x 320 tiles, its
    # 192 x 128 tile on 4 warps (192 a thread too) where its tiles fit one wave holding no more
    kernel = get("matmul")
    targets = load_targets(REPO / "targets.yaml")
    tall = dict(BLOCK_M=192, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=3, TMA=1,
                PERSISTENT=0, SWAP_AB=0, STREAM_K=0)

    def rule(**change):
        return node_rule(dict(tall, **change), make_shape(1536, 4096, 14336, "bf16", "NN"))

    assert rule() is None and rule(BLOCK_N=192) is None and rule(BLOCK_N=144) is None
    assert rule(BLOCK_N=144, num_warps=4) == "accumulator_spills"  # 216 a thread
    assert rule(BLOCK_N=128, num_warps=4) is None  # 192 a thread
    for change in (dict(TMA=0), dict(SPLIT_K=2), dict(BLOCK_M=320), dict(BLOCK_M=320, BLOCK_N=64)):
        assert rule(**change) == "wide_tile_needs_tma", change  # 320 rows: 5 x 64
    assert rule(PERSISTENT=1) == "warp_specialized_tile"  # the Gluon kernel's tile is 192 x 192
    assert rule(BLOCK_N=320) == "accumulator_spills"  # 240 a thread
    assert rule(BLOCK_M=256) == "accumulator_spills"  # 256 a thread
    blocks = {d.name: d.block for d in descriptors.tensor_descriptors(tall, a_t=False, b_t=True)}
    assert blocks == {"a_desc": (128, 64), "a2_desc": (64, 64), "b_desc": (256, 64), "c_desc": (64, 256)}
    blocks = {d.name: d.block for d in descriptors.tensor_descriptors(dict(tall, BLOCK_N=192), a_t=True, b_t=False)}
    assert blocks == {"a_desc": (64, 128), "a2_desc": (64, 64), "b_desc": (64, 128), "b2_desc": (64, 64),
                      "c_desc": (64, 64)}  # C in 64 x 64 pieces
    assert 192 in kernel.space_for(targets["gpu-node"])["BLOCK_M"]
    assert 192 not in kernel.space_for(targets["mi300"])["BLOCK_M"]
    assert "BLOCK_M" not in kernel.space_for(targets["laptop"])  # CPU boards: the packed kernel's MR x NR

    def tall_seeds(text, layout="NT"):
        s = make_shape(*(int(x) for x in text.split("x")), dtype="bf16", layout=layout)
        return [(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_warps"], c["num_stages"], c["TMA"])
                for c in kernel.seed_configs(s, targets["gpu-node"]) if c["BLOCK_M"] == 192
                and not descriptors.warp_specialized(c)]  # (the Gluon kernel's seeds: test_warp_specialized.py)

    seeded = [(192, 256, 64, 8, 3, 1)]
    # 8 x 16 = 128 tiles, one wave, where 128 x 256 (192 tiles) and 128 x 320 (156) take two
    assert tall_seeds("1536x4096x14336", "NN") == seeded
    assert tall_seeds("4096x4096x8192") == []  # 352 tiles, three waves, against 512 in four of 2/3 the work
    assert tall_seeds("512x10240x8192") == []  # one wave of 128 x 320 tiles holds less
    assert tall_seeds("2304x2048x8192") == []  # 126 tiles of 128 x 320: one wave
    assert tall_seeds("64x4096x14336") == []  # skinny
    # 192 x 128 on 4 warps where its tiles fit one wave holding no more than the 128-row tiles' waves
    one_wave = [(192, 128, 64, 4, 4, 1)]
    assert tall_seeds("768x4096x11008", "NN") == one_wave  # 128 tiles, where 128 x 192 takes 132
    assert tall_seeds("1536x2048x8192") == one_wave and tall_seeds("384x8192x8192", "TN") == one_wave
    assert tall_seeds("768x6144x16384", "NN") == []  # 192 tiles: two waves


def node_seeds(text):
    """The seeds of the bf16 NT shape MxNxK on targets.yaml's gpu-node, each checked against the rules."""
    kernel = get("matmul")
    node = load_targets(REPO / "targets.yaml")["gpu-node"]
    shape = make_shape(*(int(x) for x in text.split("x")), dtype="bf16", layout="NT")
    seeds = kernel.seed_configs(shape, node)
    assert all(first_pruning_rule(kernel.rules_for(node), c, shape, node) is None for c in seeds)
    return seeds


def test_few_tiles_over_64_rows_are_seeded_split_so_that_one_wave_holds_them():
    # 64 x 128 and 64 x 256 TMA tiles as deep as shared memory holds, with the most splits (2 to 4)
    # that keep tiles x splits within a wave of 132 and 32 K steps a split; M over 64 only
    def split_seeds(text):
        return {(c["BLOCK_M"], c["BLOCK_N"], c["SPLIT_K"], c["num_stages"]) for c in node_seeds(text)
                if c.get("TMA") and c["SPLIT_K"] > 1}

    assert split_seeds("96x2560x10240") == {(64, 128, 3, 9), (64, 256, 4, 5)}  # 40 tiles x 3, 20 x 4
    assert split_seeds("192x3584x18944") == {(64, 256, 3, 5)}  # 84 of 64 x 128 fill most of a wave
    assert split_seeds("112x2048x5632") == {(64, 128, 2, 9), (64, 256, 2, 5)}  # 88 K steps: 2 splits of 44
    assert split_seeds("384x3072x8192") == set()  # 144 and 72 tiles: no split fits one wave
    assert split_seeds("64x2048x8192") == set()  # M <= 64: the decode seeds


def test_wave_quantized_shapes_are_seeded_with_stream_k():
    # seeds from the geometry: persistent tiles whose stream-K pieces spare each busy program at
    # least 64 K steps of the last wave get STREAM_K = 1, and every seed passes the rules; a last
    # wave over half full, a short K, whole or many waves get none
    from harness.kernels.matmul.stream_k import steps_saved

    def stream_k_seeds(text):
        return {(c["BLOCK_M"], c["BLOCK_N"], c["num_warps"]) for c in node_seeds(text) if c.get("STREAM_K")}

    # 320 tiles, 56 left over in 2 pieces of 64 of 128 steps; 160 tiles, 28 in 4 pieces of 32
    assert steps_saved(320, 132, 128) == 64 and steps_saved(160, 132, 128) == 96
    assert steps_saved(264, 132, 128) == 0 and steps_saved(224, 132, 296) == 0  # whole waves; 92 left over
    assert stream_k_seeds("512x10240x8192") == {(128, 128, 4), (128, 256, 8)}
    assert stream_k_seeds("512x5120x14336") == {(128, 128, 4)}  # 80 tiles of 128 x 256: one piece each
    assert stream_k_seeds("128x1536x7168") == {(128, 128, 4), (128, 256, 8)}  # 12 and 6 tiles in 4 pieces
    assert stream_k_seeds("1024x4608x3584") == set()  # 56 steps a tile: 42 spared
    assert stream_k_seeds("512x6144x4096") == set()  # 60 of 192 tiles left over, 2 pieces: 32 spared
    assert stream_k_seeds("4096x4096x4096") == set()  # 1024 / 512 tiles: 3 % idle
    assert stream_k_seeds("1024x16896x4096") == set()  # 1056 = 8 x 132 tiles of 128 x 128, 528 = 4 x 132
    assert stream_k_seeds("16x4096x4096") == set()  # skinny: the SWAP_AB tiles
    laptop = load_targets(REPO / "targets.yaml")["laptop"]
    board_seeds = get("matmul").seed_configs(make_shape(512, 10240, 8192, "bf16"), laptop)
    assert board_seeds and not any("STREAM_K" in c for c in board_seeds)  # the packed CPU kernel's register tiles
