"""Order statistics of per-iteration times."""


def quantile(sorted_values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(times_ns):
    values = sorted(float(t) for t in times_ns)
    if not values:
        return {"iterations": 0}
    return {
        "time_ns_median": quantile(values, 0.5),
        "time_ns_min": values[0],
        "time_ns_p20": quantile(values, 0.2),
        "time_ns_p80": quantile(values, 0.8),
        "iterations": len(values),
    }
