"""Order statistics of per-sample times, and the noise of their median."""

import math


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


def summarize(times_ns, calls_per_sample=1):
    """Result columns of per-sample times (each the mean of ``calls_per_sample`` calls)."""
    values = sorted(float(t) for t in times_ns)
    if not values:
        return {"iterations": 0, "samples": 0}
    noise = median_noise(values)
    return {
        "time_ns_median": quantile(values, 0.5),
        "time_ns_min": values[0],
        "time_ns_p20": quantile(values, 0.2),
        "time_ns_p80": quantile(values, 0.8),
        "iterations": len(values) * int(calls_per_sample),
        "samples": len(values),
        "noise": None if noise is None else round(noise, 6),
    }
