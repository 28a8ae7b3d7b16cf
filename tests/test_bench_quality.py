"""What bench/gpu_quality.py makes of its per-shape times: issue 11's weighted speedup and the
ceilings a kernel at the roofline would reach (no GPU needed: the table is given)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

from gpu_quality import against_the_goal  # noqa: E402


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
    from _gpu_common import candidate_rows
    from harness.rounds import save_winners

    rows = [row("s", "v1", 0.276), row("s", "v2", 0.287), row("s", "v1", 0.316), row("s", "v3", 0.295),
            row("s", "v4", 0.298), row("s", "v9", 0.300), row("s", "lib:torch.matmul", 0.298)]
    results = tmp_path / "results.csv"
    without = candidate_rows(rows, 3, results)
    assert [r["variant_id"] for r in without["s"]] == ["v1", "v2", "v3"]
    assert without["s"][0]["time_ns_median"] == str(0.276 * 1e6)
    listed = [{"variant_id": v} for v in ("v1", "v2", "v3", "v9")]
    save_winners(results, {"s": {"shape": "s", "candidates": listed}}, [])
    assert [r["variant_id"] for r in candidate_rows(rows, 3, results)["s"]] == ["v1", "v2", "v3", "v9"]
