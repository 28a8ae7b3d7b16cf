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
