"""What bench/gpu_quality.py makes of its per-shape times: issue 11's weighted speedup and the
ceilings a kernel at the roofline would reach (no GPU needed: the table is given)."""

import pytest

from bench.gpu_quality import against_the_goal


def entry(triton_ms, cublas_ms, cublas_roofline, weight=1.0):
    return {"triton_ms": triton_ms, "cublas_ms": cublas_ms, "cublas_roofline": cublas_roofline, "weight": weight}


def test_a_shape_where_cublas_is_faster_falls_back_to_it_in_the_weighted_speedup():
    goal = against_the_goal([entry(0.5, 1.0, 0.8), entry(4.0, 2.0, 0.5)])
    assert goal["weighted_speedup"] == pytest.approx(3.0 / (0.5 + 2.0))


def test_the_ceilings_are_what_a_kernel_at_each_roofline_floor_would_score():
    goal = against_the_goal([entry(0.5, 1.0, 0.8), entry(4.0, 2.0, 0.5)])
    assert goal["ceiling_weighted"] == pytest.approx(3.0 / (0.8 + 1.0))
    assert goal["ceiling_geomean"] == pytest.approx((1.25 * 2.0) ** 0.5)


def test_weights_count_calls():
    goal = against_the_goal([entry(0.5, 1.0, 0.8, weight=3.0), entry(4.0, 2.0, 0.5)])
    assert goal["weighted_speedup"] == pytest.approx((3.0 + 2.0) / (1.5 + 2.0))


def row(shape, variant, ms):
    return {"shape_id": shape, "variant_id": variant, "status": "ok", "estimator": "median",
            "time_ns": str(ms * 1e6), "time_ns_median": str(ms * 1e6)}


def test_the_candidates_timed_again_are_the_variants_the_tune_re_measured(tmp_path):
    # the tune re-measured v1, v2, v3 (its top 3) and the seed v9, which its first round had timed
    # slowest; the search's rows and the re-measure's rows list v1 twice
    from bench._gpu_common import candidate_rows
    from harness.remeasure import save_winners

    rows = [row("s", "v1", 0.276), row("s", "v2", 0.287), row("s", "v1", 0.316), row("s", "v3", 0.295),
            row("s", "v4", 0.298), row("s", "v9", 0.300), row("s", "lib:torch.matmul", 0.298)]
    results = tmp_path / "results.csv"
    without = candidate_rows(rows, 3, results)
    assert [r["variant_id"] for r in without["s"]] == ["v1", "v2", "v3"]
    assert without["s"][0]["time_ns_median"] == str(0.276 * 1e6)
    listed = [{"variant_id": v} for v in ("v1", "v2", "v3", "v9")]
    save_winners(results, {"s": {"shape": "s", "candidates": listed}}, [])
    assert [r["variant_id"] for r in candidate_rows(rows, 3, results)["s"]] == ["v1", "v2", "v3", "v9"]


def test_a_tie_won_behind_the_leader_is_compared_with_it_by_the_quality_runs_times():
    from bench.tie_cost import summary, tie_costs

    def cand(v, ns):
        return {"variant_id": v, "median_ns": ns}

    winners = {"shapes": {
        "s1": {"decided": "tie", "variant_id": "v2", "candidates": [cand("v1", 100.0), cand("v2", 103.0)]},
        "s2": {"decided": "tie", "variant_id": "v4", "candidates": [cand("v4", 50.0), cand("v5", 50.2)]},  # the leader won
        "s3": {"decided": "clear", "variant_id": "v6", "candidates": [cand("v6", 10.0), cand("v7", 12.0)]},
        "s4": {"decided": "tie", "variant_id": "v9", "candidates": [cand("v8", 20.0), cand("v9", 20.1)]},
        # the fastest median failed once, so it led nothing: the leader is the next
        "s5": {"decided": "tie", "variant_id": "v12",
               "candidates": [dict(cand("v10", 90.0), failed=1), cand("v11", 100.0), cand("v12", 102.0)]},
    }}
    quality = {"shapes": [
        {"shape": "s1", "candidates": [{"variant": "v1", "remeasured_ms": 0.100}, {"variant": "v2", "remeasured_ms": 0.105}]},
        {"shape": "s4", "candidates": [{"variant": "v9", "remeasured_ms": 0.020}]},  # the leader was not timed again
        {"shape": "s5", "candidates": [{"variant": v, "remeasured_ms": 0.1} for v in ("v10", "v11", "v12")]},
    ]}
    costs = tie_costs(winners, quality)
    assert [(c.shape, round(c.behind, 3), round(c.ratio, 3)) for c in costs] == [("s1", 0.03, 1.05), ("s5", 0.02, 1.0)]
    assert summary(costs).startswith("2 ties, the leader faster by do_bench in 1")
