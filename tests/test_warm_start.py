"""Warm start: the first round of every shape holds the kernel's configs for its shape class and the
winners of the nearest shapes already tuned; the default strategy on GPU targets is budgeted.

The search runs through ``harness.rounds.search`` with a session whose rounds return made-up
times instead of building (a GPU target cannot run here); the seeds, the pruning and the strategy
are the real ones.
"""

import json

import pytest

from harness import kernels
from harness.build import BuildOptions
from harness.kernels.matmul.seeds import shape_class
from harness.rounds import Session, search
from harness.run import RunOptions
from harness.shapes import parse_shape
from harness.space import first_pruning_rule
from harness.strategies import DEFAULT_BUDGET, default_for, get_strategy, key, tune_rounds
from harness.strategies.seeded import Seeded, nearest_tuned, warm_start
from harness.strategies.simulate import Replay, load_recorded
from harness.targets import Target
from remote_agent import contract

from tests.test_strategies import DATA, PRUNED_SHAPE

MATMUL = kernels.get("matmul")
H200 = Target(name="h200", backend="cuda", gpu_arch="90", multiprocessors=132)
MI300 = Target(name="mi300", backend="hip", gpu_arch="gfx942", multiprocessors=304)
CPU = Target(name="local")
PERSISTENT_TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, PERSISTENT=1, TMA=1)


class FakeSession(Session):
    """Rounds that record what they were asked and return a made-up time per pair."""

    def execute(self, pairs, fidelity=1, library_shapes=()):
        self.rounds += 1
        self.asked = getattr(self, "asked", []) + [list(pairs)]
        return [dict({contract.CONFIG_PREFIX + n: str(v) for n, v in cfg.items()}, shape_id=shape.id,
                     variant_id="v%d" % i, status="ok", time_ns_median=str(1000.0 + i))
                for i, (cfg, shape) in enumerate(pairs)]


def seeds_space(target, shapes, tuned=()) -> dict:
    """The kernel's space for ``target`` cut down to the values that the warm-start seeds of
    ``shapes`` take (the kernel's seeds and the nearest of the ``tuned`` entries). A first round
    holds only seeds (``Seeded``: the feasible ones, unmeasured, up to the batch), and each seed
    is in the cut space exactly when it is in the whole one, so the first round is the same; the
    space pruned before it has a few thousand configs instead of the sm90 space's 1.2 million."""
    space = MATMUL.space_for(target)
    seeds = [c for s in shapes for c in warm_start(MATMUL, target, parse_shape(s), list(tuned))]
    taken = {p: {c[p] for c in seeds if p in c} for p in space}
    cut = {p: [v for v in values if v in taken[p]] for p, values in space.items()}
    return {p: values or space[p][:1] for p, values in cut.items()}


def first_round(tmp_path, target, shapes, strategy, budget=DEFAULT_BUDGET, space=None, tuned=()):
    """The (config, shape) pairs of the search's first round and the session; the search runs
    over ``space``, by default the seeds' cut of the kernel's space (``seeds_space``)."""
    session = FakeSession(tmp_path, target, MATMUL, [parse_shape(s) for s in shapes], BuildOptions(), RunOptions())
    search(session, space or seeds_space(target, shapes, tuned), strategy, budget=budget, batch_size=8)
    return session.asked[0], session


def matches(cfg, want):
    return all(cfg[k] == v for k, v in want.items())


def test_default_is_a_budgeted_search_on_gpus_and_exhaustive_on_small_cpu_spaces():
    assert default_for(H200, MATMUL.space_for(H200)) == ("genetic", DEFAULT_BUDGET)
    assert default_for(MI300, MATMUL.space_for(MI300)) == ("genetic", DEFAULT_BUDGET)
    # the packed CPU matmul's space (MR x NR x KC x MC x NC x PACK_B) is over 1000 configs: budgeted too
    assert default_for(CPU, MATMUL.space_for(CPU)) == ("genetic", DEFAULT_BUDGET)
    small_cpu = {"MR": [1, 2, 4, 6], "NR": [16, 32], "KC": [64, 128, 256], "MC": [16, 64], "NC": [256, 1024],
                 "PACK_B": [1, 0]}  # 384 configs
    assert default_for(CPU, small_cpu) == ("exhaustive", None)


@pytest.mark.slow
def test_first_round_of_a_big_shape_holds_the_persistent_tma_tile(tmp_path):
    name, budget = default_for(H200, MATMUL.space_for(H200))
    asked, _ = first_round(tmp_path, H200, ["4096x4096x4096:fp16", "16x4096x4096:fp16"], name, budget)
    big = [cfg for cfg, s in asked if s.M == 4096]
    skinny = [cfg for cfg, s in asked if s.M == 16]
    assert big == MATMUL.seed_configs(parse_shape("4096x4096x4096:fp16"), H200)  # the first round: the seeds
    assert skinny == MATMUL.seed_configs(parse_shape("16x4096x4096:fp16"), H200)
    assert any(matches(c, dict(PERSISTENT_TILE, num_stages=3, GROUP_M=8)) for c in big)
    assert sum(c["PERSISTENT"] for c in big) >= 2
    assert any(matches(c, dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, SWAP_AB=1)) for c in skinny)
    # every seed passes the kernel's rules for its shape
    for cfg, shape in asked:
        assert first_pruning_rule(MATMUL.rules_for(H200), cfg, shape, H200) is None
    # without the warm start the same budget's first round has no persistent tile
    session = FakeSession(tmp_path, H200, MATMUL, [parse_shape("4096x4096x4096:fp16")], BuildOptions(), RunOptions())
    search(session, MATMUL.space_for(H200), name, budget=budget, warm_start=False)
    assert not any(matches(c, dict(PERSISTENT_TILE, num_stages=3, GROUP_M=8)) for c, _ in session.asked[0])


@pytest.mark.slow
def test_nearest_tuned_winners_are_seeded(tmp_path):
    space = MATMUL.space_for(H200)

    def entry(m, n, k, dtype, layout, **cfg):
        full = {p: v[0] for p, v in space.items()}
        full.update(cfg)
        return {"shape": "%dx%dx%d_%s_%s" % (m, n, k, dtype, layout), "M": m, "N": n, "K": k, "dtype": dtype,
                "layout": layout, "config": full}

    near = entry(2048, 2048, 2048, "fp16", "NN", BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=2, num_stages=6)
    second = entry(8192, 8192, 8192, "fp16", "NN", BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=2, num_stages=2)
    other_dtype = entry(3000, 3000, 3000, "bf16", "NN", BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, num_warps=2,
                        num_stages=5)
    far = entry(16, 64, 64, "fp16", "NN", BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, num_warps=2, num_stages=5)
    no_dims = {"shape": "?", "config": dict(near["config"], BLOCK_M=128)}  # not a tuned entry of this problem
    entries = [no_dims, far, other_dtype, second, near]
    shape = parse_shape("3000x3000x3072:fp16")
    assert nearest_tuned(shape, entries) == [near["config"], second["config"]]  # same dtype first, then log-distance
    tuned = tmp_path / "tuned" / H200.name
    tuned.mkdir(parents=True)
    (tuned / "matmul.json").write_text(json.dumps({"kernel": "matmul", "best": entries}))
    asked, _ = first_round(tmp_path, H200, ["3000x3000x3072:fp16"], "genetic", tuned=entries)
    first = [key(c) for c, _ in asked]
    assert key(near["config"]) in first and key(second["config"]) in first
    assert key(other_dtype["config"]) not in first and key(far["config"]) not in first


def test_seeds_respect_the_target():
    shapes = [parse_shape(s) for s in ("4096x4096x4096:fp16", "16x4096x4096:bf16", "128x1536x7168:bf16:TN",
                                       "1024x1024x1024:fp16:NT", "64x8192x8192:fp16")]
    assert [shape_class(s, 132) for s in shapes] == ["large", "skinny", "split_k", "medium", "skinny"]
    for shape in shapes:
        hip = MATMUL.seed_configs(shape, MI300)
        assert hip, shape
        for cfg in hip:
            assert not {"PERSISTENT", "TMA", "SWAP_AB"} & set(cfg) and set(cfg) == set(MATMUL.space_for(MI300))
            assert first_pruning_rule(MATMUL.rules_for(MI300), cfg, shape, MI300) is None
        cuda = MATMUL.seed_configs(shape, H200)
        assert cuda and all(first_pruning_rule(MATMUL.rules_for(H200), c, shape, H200) is None for c in cuda)
        cpu = MATMUL.seed_configs(shape, CPU)  # the packed CPU kernel's register tiles, in its own space
        assert cpu and all(set(c) == set(MATMUL.space_for(CPU)) for c in cpu)
        assert all(first_pruning_rule(MATMUL.rules_for(CPU), c, shape, CPU) is None for c in cpu)
    # split-K seeds split the long K of a small output; skinny ones swap A and B
    assert any(c["SPLIT_K"] > 1 for c in MATMUL.seed_configs(shapes[2], H200))
    assert all(c["SWAP_AB"] or c["BLOCK_M"] <= 64 for c in MATMUL.seed_configs(shapes[1], H200))
    # on the GPU without multiprocessors in targets.yaml no persistent seed survives the rules
    bare = Target(name="h100", backend="cuda", gpu_arch="90")
    assert not any(c["PERSISTENT"] for c in MATMUL.seed_configs(shapes[0], bare))


@pytest.mark.slow
def test_the_deep_pipeline_seed_is_asked_only_where_its_stages_fit_shared_memory(tmp_path):
    # 9 stages of 64 x 128 x 64 tiles: 216 KiB of bf16 fit the H200's 227 KiB, fp32 ones do not
    h200 = Target(name="h200", backend="cuda", gpu_arch="90", multiprocessors=132, shared_mem_max=232448)
    deep = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_stages=9, TMA=1)
    half, _ = first_round(tmp_path / "bf16", h200, ["512x2048x8192:bf16:NT"], "genetic")
    single, _ = first_round(tmp_path / "fp32", h200, ["512x2048x8192:fp32:NT"], "genetic")
    assert any(matches(c, deep) for c, _ in half)
    assert single and not any(matches(c, deep) for c, _ in single)
    assert any(matches(c, dict(deep, num_stages=4)) for c, _ in single)  # the shallow one stays


@pytest.mark.slow
def test_decode_seeds_pipeline_as_deep_as_the_devices_shared_memory_holds(tmp_path):
    # fp16 stages of 16 x 64 x 256 take 40 KiB and of 64 x 64 x 128 32 KiB: sm90's 227 KiB hold 5 and 7
    # (the arch says so where the target names no shared_mem_max), a 99 KiB device 2 and 3
    swapped = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, SWAP_AB=1, TMA=1)
    square = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, SWAP_AB=0, TMA=1)
    for target, stages in ((H200, (5, 7)), (Target(name="small", backend="cuda", gpu_arch="90", multiprocessors=132,
                                                     shared_mem_max=101376), (2, 3))):
        asked, _ = first_round(tmp_path / target.name, target, ["4x5120x13824:fp16:NT", "48x4096x14336:fp16:NT"],
                               "genetic")
        assert any(matches(c, dict(swapped, num_stages=stages[0])) and s.M == 4 for c, s in asked), target.name
        assert any(matches(c, dict(square, num_stages=stages[1])) and s.M == 48 for c, s in asked), target.name


def test_cpu_search_seeds_only_cpu_configs_from_its_own_tuned_file(tmp_path):
    space = MATMUL.space_for(CPU)
    tuned = tmp_path / "tuned" / CPU.name
    tuned.mkdir(parents=True)
    good = {"MR": 4, "NR": 32, "KC": 128, "MC": 64, "NC": 128, "PACK_B": 1}
    gpu_cfg = {p: v[0] for p, v in MATMUL.space_for(H200).items()}
    (tuned / "matmul.json").write_text(json.dumps({"best": [
        {"M": 64, "N": 64, "K": 64, "dtype": "fp32", "layout": "NN", "config": gpu_cfg},
        {"M": 128, "N": 128, "K": 128, "dtype": "fp32", "layout": "NN", "config": good}]}))
    asked, _ = first_round(tmp_path, CPU, ["96x96x96"], "random", budget=20, space=space)
    configs = [c for c, _ in asked]
    assert key(good) in [key(c) for c in configs]
    assert all(set(c) == set(space) and all(c[p] in space[p] for p in space) for c in configs)


@pytest.mark.parametrize("name", ["random", "genetic", "halving", "exhaustive"])
def test_seeded_strategy_leads_with_its_seeds_and_resumes(name):
    (rec,) = load_recorded(DATA, PRUNED_SHAPE)
    feasible = [dict(k) for k in rec.table]
    seeds = [feasible[-1], feasible[len(feasible) // 2], dict(next(iter(rec.pruned)))]  # the last is pruned
    strategy = Seeded(get_strategy(name, seed=5, batch_size=4), seeds)
    whole = tune_rounds(strategy, rec.space, rec.is_pruned, Replay(rec), budget=12)
    first = [key(t.config) for t in whole.history[:whole.round_sizes[0]]]
    assert first == [key(seeds[0]), key(seeds[1])]  # the pruned seed is left out
    assert len({key(t.config) for t in whole.history}) == len(whole.history) or name == "halving"
    part = tune_rounds(Seeded(get_strategy(name, seed=5, batch_size=4), seeds), rec.space, rec.is_pruned,
                       Replay(rec), budget=12, stop=lambda h: len(h) >= 6)  # stopped between rounds: 2 seeds, 4
    assert len(part.history) == 6
    rest = tune_rounds(Seeded(get_strategy(name, seed=5, batch_size=4), seeds), rec.space, rec.is_pruned,
                       Replay(rec), budget=12, history=part.history)
    assert [key(t.config) for t in rest.history] == [key(t.config) for t in whole.history]
