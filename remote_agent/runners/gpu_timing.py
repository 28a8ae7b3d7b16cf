"""How a GPU worker times a job: the check around the measurement
(poison C, launch once and check; time with the profiler; poison, launch and check again).
The sample loop itself (warm-up, launch count, event pairs) is the profiler's:
remote_agent/profilers/events.py; the L2 flush is gpu_flush.py's. Standard library only."""

from .. import contract
from ..stats import MEDIAN, summarize
from .gpu_clocks import Clocks, reason_words, throttled


MAX_REMEASURE = 2


def timed_unthrottled(worker, launch, kernel, variant, shape, grid, result):
    """The profiler's measurement, with the SM clock read before and after and the throttle
    reasons seen during it (NVML, where present); measured again (at most MAX_REMEASURE times)
    when a thermal or hardware slowdown showed. Fills the clock columns of ``result``."""
    clocks = getattr(worker, "clocks", None)
    if clocks is None:
        clocks = worker.clocks = Clocks()
    remeasured = 0
    while True:
        before = clocks.sm_mhz()
        measured = worker.profiler.measure(worker, launch, kernel, variant, shape, grid)
        mask = clocks.reasons()
        after = clocks.sm_mhz()
        if throttled(mask) and remeasured < MAX_REMEASURE:
            remeasured += 1
            continue
        result.update(clock_mhz_before=before, clock_mhz_after=after, throttle=reason_words(mask),
                      remeasured=remeasured)
        return measured


def check_and_time(worker, data, shape, launch, counters, kernel, variant, grid):
    """Poison the outputs, launch once and check; time with the profiler; poison, launch and check
    again. ``launch(i)`` runs the kernel once on input copy ``i`` (a variant, or the library)."""
    tol = worker.tolerances["rel_err"][shape["dtype"]]

    def check():
        return worker.check(data)

    data.poison()
    launch(0)
    worker.api.synchronize()
    rel, maxabs, ratio = check()
    result = dict(counters, rel_err=rel, max_abs_err=maxabs, err_ratio=ratio)
    if not rel <= tol:
        result.update(status=contract.WRONG_ANSWER,
                      message="relative error %.3g over tolerance %.3g (%.3g%% of elements outside)"
                      % (rel, tol, 100 * ratio))
        return result

    measured = timed_unthrottled(worker, launch, kernel, variant, shape, grid, result)
    result.update(summarize(measured["times_ns"], estimator=worker.options.get("estimator") or MEDIAN))
    for k, v in measured.get("counters", {}).items():
        result["ctr:" + k] = v
    # the last timed launch's C must still be right (split-K races, stale workspace)
    data.poison()
    launch(0)
    worker.api.synchronize()
    rel2, maxabs2, ratio2 = check()
    if not rel2 <= tol:
        result.update(status=contract.WRONG_ANSWER, rel_err=rel2, max_abs_err=maxabs2, err_ratio=ratio2,
                      message="right once, wrong after timing: relative error %.3g (a race?)" % rel2)
        return result
    result["status"] = contract.OK
    notes = []
    if data.sets > 1:
        notes.append("inputs rotated over %d copies" % data.sets)
    if data.crosscheck is not None:
        notes.append("ref torch (kernel ref rel %.1e)" % data.crosscheck)
    result["message"] = "; ".join(notes)
    return result
