"""The order in which the GPU benches interleave the methods they compare (bench/_gpu_common.py)."""

import pytest

from bench._gpu_common import palindromic


def mean_drift(orders, n):
    """Each method's mean slot in the sequence the orders make: what a steady drift of the GPU's
    speed adds to its mean time."""
    slots = [[] for _ in range(n)]
    for k, i in enumerate(i for order in orders for i in order):
        slots[i].append(k)
    return [sum(s) / len(s) for s in slots]


@pytest.mark.parametrize("n,rounds", [(2, 2), (2, 4), (3, 2), (3, 4)])
def test_a_steady_drift_weighs_on_every_method_alike(n, rounds):
    orders = list(palindromic(n, rounds))
    assert len(orders) == rounds and all(sorted(o) == list(range(n)) for o in orders)
    drift = mean_drift(orders, n)
    assert max(drift) == min(drift)


def test_the_same_order_every_round_charges_the_drift_to_the_later_method():
    drift = mean_drift([[0, 1]] * 4, 2)
    assert drift[1] - drift[0] == 1


def test_over_n_factorial_rounds_every_method_takes_every_place_equally_often():
    orders = list(palindromic(3, 6))
    for method in range(3):
        places = sorted(order.index(method) for order in orders)
        assert places == [0, 0, 1, 1, 2, 2]
    assert [order.index(1) for order in orders[:2]] == [1, 1]  # two rounds alone keep B in the middle


def test_many_methods_get_their_orders_without_listing_every_permutation():
    # 13 methods have 6.2e9 orders: listing them all hung a 13-way comparison on the GPU node
    orders = list(palindromic(13, 4))
    assert len(orders) == 4 and all(sorted(o) == list(range(13)) for o in orders)
    drift = mean_drift(orders, 13)
    assert max(drift) == min(drift)
