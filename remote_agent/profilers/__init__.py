"""Profilers: each wraps a variant's execution and returns a dict of counters.

CPU profilers (perf, wallclock) wrap the variant's process; GPU profilers (events, ncu,
rocprof) are used by the GPU runners. ``select(name, events, log)`` gives a usable profiler,
falling back to wall clock (and saying so) where the asked one cannot run here.
"""


def select(name, events, log):
    from . import perf, wallclock

    if name == "perf":
        profiler = perf.PerfProfiler.probe(events, log)
        if profiler is not None:
            return profiler
        return wallclock.WallclockProfiler(events)
    if name == "wallclock":
        return wallclock.WallclockProfiler(events)
    raise ValueError("profiler %r does not run CPU variants" % name)
