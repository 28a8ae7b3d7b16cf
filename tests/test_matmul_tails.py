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
from harness.shapes import make_shape
from harness.space import first_pruning_rule
from harness.targets import load_targets
from tests.conftest import REPO, needs

ODD = "24x40x56,1x1x1,7x13x1000,24x40x56:fp16"


@needs("qemu-riscv64", "clang", "riscv64-linux-gnu-ld")
def test_odd_shapes_on_an_rvv_board(workspace):
    ws = workspace
    (ws.path / "space.yaml").write_text("BLOCK_M: [4, 16]\nBLOCK_N: [8, 32]\nBLOCK_K: [8, 32]\nGROUP_M: [1]\n")
    ws.harness("build", "matmul", "--target", "rv", "--shapes", ODD, "--space", "space.yaml")
    ws.harness("push", "rv")
    ws.harness("run", "--remote", "rv", "--iters", "2")
    ws.harness("report")
    df = pd.read_csv(ws.path / "results/rv/matmul/results.csv")
    ok = df[df.status == "ok"]
    assert set(df.status) <= {"ok", "pruned"}
    assert not df.message.fillna("").str.contains("k_not_divisible").any()
    assert set(ok.shape_id) == {"24x40x56_fp32_NN", "1x1x1_fp32_NN", "7x13x1000_fp32_NN", "24x40x56_fp16_NN"}
    assert (ok[ok.dtype == "fp32"].rel_err < 1e-5).all() and (ok[ok.dtype == "fp16"].rel_err < 1e-2).all()
    # K = 56 with BLOCK_K 32 and K = 1000 with BLOCK_K 32: the masked K tail, checked (fp32: 4 tiles;
    # fp16: the 8-wide tiles are narrower than the 256-bit vector and pruned)
    tails = ok[(ok.cfg_BLOCK_K == 32) & ok.shape_id.isin(["24x40x56_fp32_NN", "24x40x56_fp16_NN"])]
    assert len(tails) == 4 + 2
    assert len(ok[ok.shape_id == "7x13x1000_fp32_NN"]) == 2
    best = {b["shape"] for b in json.loads((ws.path / "tuned/rv/matmul.json").read_text())["best"]}
    assert "1x1x1_fp32_NN" in best


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
}
# odd shapes; descriptors need 16-byte rows, so the TMA variants get rows of multiples of 8
POINTER_SHAPES = [(24, 40, 56), (7, 13, 1000), (1, 1, 1), (33, 1, 70)]
TMA_SHAPES = [(40, 48, 200), (24, 40, 56), (8, 72, 1000)]


def test_triton_variants_mask_every_tail():
    cases = []
    for name, config in VARIANTS.items():
        shapes = TMA_SHAPES if config.get("TMA") else POINTER_SHAPES
        for (M, N, K), layout in itertools.product(shapes, ("NN", "TN", "NT")):
            if config.get("SPLIT_K", 1) > 1 and -(-K // config["BLOCK_K"]) < config["SPLIT_K"]:
                continue  # split_k_too_deep prunes it
            cases.append(dict(M=M, N=N, K=K, layout=layout, config=config))
    assert len(cases) == 36
    for case, result in zip(cases, interp.run_cases(cases)):
        err = interp.rel_err(result)
        assert err < 1e-3, (case, err)  # fp16 inputs, fp32 sums; NaN where a tile was not written
        assert not result["locks"].any()  # the counters are zero again for the next launch


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
