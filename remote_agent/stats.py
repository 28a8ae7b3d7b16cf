"""Order statistics of per-sample times, the two estimators of the time that decides (the
minimum or the median of the samples), and the noise of each."""

import math

MIN, MEDIAN = "min", "median"
ESTIMATORS = (MIN, MEDIAN)
MIN_BLOCKS = 2  # min_noise: the samples split in time order into this many blocks (halves)


def quantile(sorted_values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median_noise(samples):
    """Relative standard error of the median, from the order statistics around it: half the
    distance between the quantiles 0.5 -/+ 0.5/sqrt(n), divided by the median (for normal
    samples 1.2533 sigma / sqrt(n) / median). None for fewer than 3 samples or a zero median."""
    values = sorted(float(s) for s in samples)
    n = len(values)
    if n < 3:
        return None
    med = quantile(values, 0.5)
    if not med:
        return None
    half = 0.5 / math.sqrt(n)
    return (quantile(values, 0.5 + half) - quantile(values, 0.5 - half)) / 2.0 / med


def min_noise(samples, blocks=MIN_BLOCKS):
    """How far the minimum is from reproducing itself: the samples (in the order they were
    taken) split into ``blocks`` consecutive blocks, the largest block minimum minus the
    smallest, divided by the smallest. 0.004: every stretch of the measurement came within 0.4 %
    of the same floor; a stretch slowed by a neighbour the whole time shows up as a large value.
    None for fewer than 2 samples per block or a zero minimum."""
    values = [float(s) for s in samples]
    n = len(values)
    if n < 2 * blocks:
        return None
    mins = [min(values[i * n // blocks:(i + 1) * n // blocks]) for i in range(blocks)]
    low = min(mins)
    if not low:
        return None
    return (max(mins) - low) / low


def noise_of(samples, estimator):
    """The noise of ``estimator`` (``min`` or ``median``) over ``samples`` (in time order)."""
    return min_noise(samples) if estimator == MIN else median_noise(samples)


def summarize(times_ns, calls_per_sample=1, estimator=MEDIAN):
    """Result columns of per-sample times (each the mean of ``calls_per_sample`` calls), in the
    order they were taken: the quantiles, the deciding time ``time_ns`` (the ``estimator``
    of the samples), the estimator's name and its noise."""
    ordered = [float(t) for t in times_ns]
    values = sorted(ordered)
    if not values:
        return {"iterations": 0, "samples": 0, "estimator": estimator}
    noise = noise_of(ordered, estimator)
    median = quantile(values, 0.5)
    return {
        "estimator": estimator,
        "time_ns": values[0] if estimator == MIN else median,
        "time_ns_median": median,
        "time_ns_min": values[0],
        "time_ns_p20": quantile(values, 0.2),
        "time_ns_p80": quantile(values, 0.8),
        "iterations": len(values) * int(calls_per_sample),
        "samples": len(values),
        "noise": None if noise is None else round(noise, 6),
    }
