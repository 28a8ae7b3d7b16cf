"""GPU events (CUDA / HIP): the default GPU profiler, and the registry of GPU profilers.

Per (variant, shape), in the worker that owns the device, the way triton.testing.do_bench
measures (so that the two agree; docs/gpu.md, "Current numbers", says how closely):
  1. one launch, then an estimate over 5 launches each after an L2 flush;
  2. warm-up: back-to-back launches for ``warmup_ms`` (25 ms, as do_bench; at least ``warmup``
     launches), so clocks and power settle where a sustained run puts them;
  3. count: enough flushed launches for ``min_time_ms`` (flush included, as do_bench's ``rep``),
     at least ``iters``, at most MAX_ITERS; then more, CHUNK at a time, until remote_agent/measure.py's
     Stopper is done (the noise of the deciding estimator, the median unless the run says
     ``estimator: min``, settled under ``max_noise``, or ``max_time`` spent):
     the rule every runner uses. A sample is one launch (the flush between launches is what makes
     it read DRAM, as do_bench); the event timer's resolution is about 0.5 us;
  4. each timed launch: write the flush buffer (larger than L2, so every launch reads its inputs
     from device memory; HARNESS_GPU_FLUSH=read reads it instead, runners/gpu_flush.py), record a
     start event, launch, record an end event, all on one stream;
     with the flush off (HARNESS_GPU_FLUSH=0) the runner rotates copies of inputs that fit in L2
     instead;
  5. one synchronize; per-launch times from event pairs; the runner takes the estimator and quantiles.

Counter columns for events are the function's registers and local (spill) bytes, read from the
driver (CUDA; empty on HIP, never 0).
"""

from .. import measure

MAX_ITERS = 2000
CHUNK = 100


class EventsProfiler(object):
    name = "events"
    counter_names = ["regs", "local_bytes"]
    wraps_process = False

    def __init__(self, api=None, options=None):
        self.api = api
        self.options = options or {}
        self.events = []

    def _events(self, n):
        while len(self.events) < 2 * n:
            self.events.append(self.api.event())
        return self.events

    def measure(self, worker, launch, kernel, variant, shape, grid):
        api = self.api
        warmup = int(self.options.get("warmup", 2))
        warmup_ms = float(self.options.get("warmup_ms", 25.0))
        iters = max(1, int(self.options.get("iters", 10)))
        min_ms = float(self.options.get("min_time_ms", 100.0))
        flush = worker.flush_enabled
        launch(0)
        api.synchronize()
        start, end = self._events(1)[0], self._events(1)[1]
        api.record(start)
        for i in range(5):
            if flush:
                worker.flush()
            launch(i)
        api.record(end)
        per = api.elapsed_ms(start, end) / 5  # ms, flush included
        n_warm = max(warmup, int(warmup_ms / per) if per > 0 else warmup)
        for i in range(min(n_warm, 10 * MAX_ITERS)):
            launch(i)
        n = max(iters, int(min_ms / per) if per > 0 else iters)
        n = min(n, MAX_ITERS)
        stopper = measure.Stopper(float(self.options.get("max_noise", measure.DEFAULT_MAX_NOISE)),
                                  float(self.options.get("max_time", measure.DEFAULT_MAX_TIME)), min_samples=n,
                                  estimator=self.options.get("estimator") or measure.MEDIAN)
        done = 0
        while not stopper.done():
            chunk = n if done == 0 else CHUNK
            stopper.add_many(self._timed(worker, launch, chunk, flush, done))
            done += chunk
        return {"times_ns": stopper.samples, "counters": {}}

    def _timed(self, worker, launch, n, flush=True, first=0):
        api = self.api
        ev = self._events(n)
        for i in range(n):
            if flush:
                worker.flush()
            api.record(ev[2 * i])
            launch(first + i)
            api.record(ev[2 * i + 1])
        api.synchronize()
        return [api.elapsed_ms(ev[2 * i], ev[2 * i + 1]) * 1e6 for i in range(n)]


class BracketProfiler(object):
    """In the child process that ncu or rocprof wraps: launches ``iters`` times (at most 5 under
    ncu, whose replays are slow) between cuProfilerStart and cuProfilerStop; the times come
    from the wrapping profiler's own output."""

    name = "bracket"
    counter_names = []
    wraps_process = False

    def __init__(self, api=None, options=None):
        self.api = api
        self.options = options or {}

    def measure(self, worker, launch, kernel, variant, shape, grid):
        n = max(1, int(self.options.get("profile_launches", 5)))
        launch(0)
        self.api.synchronize()
        self.api.profiler_start()
        for i in range(n):
            launch(i)
        self.api.synchronize()
        self.api.profiler_stop()
        return {"times_ns": [], "counters": {}}


def gpu_profiler_class(name):
    if name == "events":
        return EventsProfiler
    if name == "ncu":
        from .ncu import NcuProfiler

        return NcuProfiler
    if name == "rocprof":
        from .rocprof import RocprofProfiler

        return RocprofProfiler
    if name == "bracket":
        return BracketProfiler
    raise ValueError("profiler %r does not run GPU variants (events, ncu, rocprof)" % name)


def gpu_profiler(name, api, options):
    return gpu_profiler_class(name)(api, options)
