"""When to stop timing a job: the one rule every runner (CPU ELF, CUDA, HIP) uses.

A *sample* is the time of ``batch`` back-to-back kernel calls divided by ``batch``; ``batch`` is
chosen so that a sample lasts at least MIN_SAMPLE_NS and RESOLUTION_FACTOR times the timer's
resolution (``batch_size``). Samples are taken until the *noise* settles under ``max_noise``
or the job's time cap is spent (``Stopper``), after at least ``min_samples``.

Noise: the relative standard error of the median, estimated without assuming a distribution
from the order statistics around it: half the distance between the quantiles
0.5 - 0.5/sqrt(n) and 0.5 + 0.5/sqrt(n), divided by the median. For normal samples this is
1.2533 sigma / sqrt(n) / median, the textbook standard error of the median; a sample hit by a
preemption moves it far less than it moves a mean or a standard deviation.

The stopping rule follows nvbench's ``stdrel`` criterion (noise under ``max-noise``, a minimum
time or count first, a time cap): stop when
  1. at least ``min_samples`` samples are in and the noise has been under ``max_noise`` for
     SETTLE consecutive samples (it *settled*: one lucky estimate does not end the job), or
  2. at least ``min_samples`` samples are in and ``max_time`` seconds have passed since the
     first sample (the noise stays in the row, so a noisy job is visible), or
  3. MAX_SAMPLES samples are in.
Standard library only (the agent runs on boards with nothing else).
"""

import math
import time

from .stats import median_noise, summarize

DEFAULT_MAX_NOISE = 0.01  # 1 % relative standard error of the median
DEFAULT_MAX_TIME = 0.5  # seconds of sampling per job
DEFAULT_MIN_SAMPLES = 10
SETTLE = 3
MAX_SAMPLES = 100000
MIN_SAMPLE_NS = 1e6  # a sample lasts at least 1 ms ...
RESOLUTION_FACTOR = 100  # ... and 100 timer ticks
WARM_NS = 20e6  # warm-up: at least 20 ms of calls (and at least --warmup calls), for every variant


def batch_size(per_call_ns, resolution_ns=1.0, cap=1 << 20):
    """Calls per sample so that a sample lasts >= MIN_SAMPLE_NS and >= RESOLUTION_FACTOR ticks."""
    target = max(MIN_SAMPLE_NS, RESOLUTION_FACTOR * max(float(resolution_ns or 1.0), 1.0))
    if not per_call_ns or per_call_ns <= 0:
        return 1
    return int(max(1, min(cap, math.ceil(target / per_call_ns))))


def warmup_calls(per_call_ns, warmup):
    """Untimed calls before sampling: at least ``warmup`` and at least WARM_NS worth."""
    if not per_call_ns or per_call_ns <= 0:
        return max(0, int(warmup))
    return int(max(int(warmup), min(1 << 20, math.ceil(WARM_NS / per_call_ns))))


class Stopper(object):
    """Feed it samples (``add``); ``done()`` says when to stop and ``reason`` why."""

    def __init__(self, max_noise=DEFAULT_MAX_NOISE, max_time=DEFAULT_MAX_TIME, min_samples=DEFAULT_MIN_SAMPLES,
                 clock=time.monotonic):
        self.max_noise = float(max_noise)
        self.max_time = float(max_time)
        self.min_samples = max(1, int(min_samples))
        self.clock = clock
        self.samples = []
        self.noise = None
        self.under = 0  # consecutive samples with the noise under max_noise
        self.started = None
        self.reason = None

    def add(self, sample_ns):
        if self.started is None:
            self.started = self.clock()
        self.samples.append(float(sample_ns))
        self.noise = median_noise(self.samples)
        self.under = self.under + 1 if (self.noise is not None and self.noise < self.max_noise) else 0

    def done(self):
        n = len(self.samples)
        if n >= MAX_SAMPLES:
            self.reason = "count"
        elif n < self.min_samples:
            return False
        elif self.under >= SETTLE:
            self.reason = "noise"
        elif self.clock() - self.started >= self.max_time:
            self.reason = "time"
        return self.reason is not None

    def summary(self, calls_per_sample=1):
        """The result columns: median and quantiles of the samples, iterations, samples, noise."""
        return summarize(self.samples, calls_per_sample)


def clock_changed(before_mhz, after_mhz, drop=0.1):
    """True when the clock read after a job is more than ``drop`` below the one read before."""
    if not before_mhz or not after_mhz:
        return False
    return after_mhz < (1.0 - drop) * before_mhz
