"""When to stop timing a job: the one rule every runner (CPU ELF, CUDA, HIP) uses.

A *sample* is the time of ``batch`` back-to-back kernel calls divided by ``batch``; ``batch`` is
chosen so that a sample lasts at least MIN_SAMPLE_NS and RESOLUTION_FACTOR times the timer's
resolution (``batch_size``). Samples are taken until the *noise* of the deciding estimator
settles under ``max_noise`` or the job's time cap is spent (``Stopper``), after at least
``min_samples``.

Two estimators decide a job's time (remote_agent/stats.py):
- ``median`` (GPU targets): its noise is the relative standard error of the median, estimated
  without assuming a distribution from the order statistics around it: half the distance
  between the quantiles 0.5 - 0.5/sqrt(n) and 0.5 + 0.5/sqrt(n), divided by the median.
- ``min`` (CPU targets): on a shared machine the interference is additive (a neighbour only
  ever slows a sample down) and comes in stretches of up to a second or two, so the median
  measures the neighbours while the minimum of short samples reproduces. Its noise: the
  samples split in time order into halves (stats.MIN_BLOCKS), the difference of their minima
  relative to the smaller. A job it decides first warms up for MIN_WARM_NS (the first 0.1 to
  0.2 s of a fresh process run slower) and samples for at least MIN_SETTLE_TIME seconds before
  the noise may stop it (a shorter stretch is too often slow throughout; README, "How a result
  is judged", has the numbers measured on a 2-core VM).

A CPU program also says how often the OS took its core away during a sample (involuntary
context switches): such a sample timed another process too, so it is set aside
(``Stopper.add_preempted``, counted in the ``preempted`` column) and the minimum time counts the
undisturbed samples' own seconds. A job on a busy core therefore takes more samples than on a
quiet one before it may stop.

The stopping rule follows nvbench's ``stdrel`` criterion (noise under ``max-noise``, a minimum
time or count first, a time cap): stop when
  1. at least ``min_samples`` undisturbed samples are in, ``min_time`` seconds of them have been
     taken (where the runner does not give a sample's length: seconds since the first sample),
     and the noise has been under ``max_noise`` for SETTLE consecutive samples (it *settled*:
     one lucky estimate does not end the job), or
  2. at least ``min_samples`` samples are in and ``max_time`` seconds have passed since the
     first sample (the noise stays in the row, so a noisy job is visible; where fewer than
     ``min_samples`` were undisturbed, every sample taken decides), or
  3. MAX_SAMPLES samples are in, or
  4. (racing, ``Stopper.out_of_race``) the job is clearly out of the running: its minimum,
     lowered by its own noise, is still more than ``race`` above the best minimum of its shape
     so far, after at least ``min_samples`` undisturbed samples and RACE_MIN_TIME seconds of
     them. A minimum only falls as samples come in, so the leader only gets faster and the job
     could at best close its own noise; its row keeps the time it had (an upper bound: a loser
     is not timed to 1 %) and says ``raced`` in its message.
Standard library only (the agent runs on boards with nothing else).
"""

import math
import time

from .stats import MEDIAN, MIN, ESTIMATORS, median_noise, min_noise, noise_of, summarize  # noqa: F401

DEFAULT_MAX_NOISE = 0.01  # 1 % noise of the deciding estimator
DEFAULT_MAX_TIME = 0.5  # seconds of sampling per job (median)
MIN_MAX_TIME = 0.75  # ... and for the min estimator
MIN_SETTLE_TIME = 0.2  # min estimator: seconds of sampling before the noise may stop a job
DEFAULT_MIN_SAMPLES = 10
SETTLE = 3
MAX_SAMPLES = 100000
MIN_SAMPLE_NS = 1e6  # a sample lasts at least 1 ms ...
RESOLUTION_FACTOR = 100  # ... and 100 timer ticks
WARM_NS = 20e6  # warm-up: at least 20 ms of calls (and at least --warmup calls), for every variant
MIN_WARM_NS = 100e6  # ... 100 ms where the minimum decides (CPU)
REVISIT_WARM_NS = 0.2e6  # interleaved jobs: untimed calls before each sample (at least one), 0.2 ms worth:
# the other jobs ran on the core since its last sample and left their data in its caches
RACE_MIN_TIME = 0.03  # racing: seconds of undisturbed samples before a job may be dropped as out of the running
DEFAULT_INTERLEAVE = 8  # CPU: jobs of one shape measured interleaved, a sample of each in turn


def default_estimator(backend):
    """``min`` for CPU targets (native or under qemu), ``median`` for GPU targets."""
    return MIN if backend == "cpu" else MEDIAN


def default_max_time(estimator):
    """Seconds of sampling per job at most, when --max-time is not given."""
    return MIN_MAX_TIME if estimator == MIN else DEFAULT_MAX_TIME


def check_estimator(name):
    """``name`` if it is an estimator, else ValueError with one line saying which there are."""
    if name not in ESTIMATORS:
        raise ValueError("unknown estimator %r; choose min or median" % (name,))
    return name


def batch_size(per_call_ns, resolution_ns=1.0, cap=1 << 20):
    """Calls per sample so that a sample lasts >= MIN_SAMPLE_NS and >= RESOLUTION_FACTOR ticks."""
    target = max(MIN_SAMPLE_NS, RESOLUTION_FACTOR * max(float(resolution_ns or 1.0), 1.0))
    if not per_call_ns or per_call_ns <= 0:
        return 1
    return int(max(1, min(cap, math.ceil(target / per_call_ns))))


def warmup_calls(per_call_ns, warmup, warm_ns=WARM_NS):
    """Untimed calls before sampling: at least ``warmup`` and at least ``warm_ns`` worth."""
    if not per_call_ns or per_call_ns <= 0:
        return max(0, int(warmup))
    return int(max(int(warmup), min(1 << 20, math.ceil(warm_ns / per_call_ns))))


class Stopper(object):
    """Feed it samples (``add``); ``done()`` says when to stop and ``reason`` why."""

    def __init__(self, max_noise=DEFAULT_MAX_NOISE, max_time=None, min_samples=DEFAULT_MIN_SAMPLES,
                 clock=time.monotonic, estimator=MEDIAN, min_time=None):
        self.estimator = check_estimator(estimator)
        self.max_noise = float(max_noise)
        self.max_time = float(default_max_time(estimator) if max_time is None else max_time)
        self.min_time = min(self.max_time, MIN_SETTLE_TIME if (min_time is None and estimator == MIN)
                            else float(min_time or 0.0))
        self.min_samples = max(1, int(min_samples))
        self.clock = clock
        self.samples = []  # the undisturbed samples, in the order taken
        self.taken = []  # every sample, set-aside ones too (``preempted``: those set aside)
        self.sampled_s = None  # seconds of undisturbed samples, where the runner gives their lengths
        self.noise = None
        self.under = 0  # consecutive samples with the noise under max_noise
        self.started = None
        self.reason = None

    def add(self, sample_ns, seconds=None):
        """One sample (ns per call); ``seconds``: how long it lasted, where the runner knows (CPU
        programs: the batch's time). Given, the minimum time counts these undisturbed seconds."""
        self.add_many([sample_ns])
        if seconds is not None:
            self.sampled_s = (self.sampled_s or 0.0) + float(seconds)

    def add_many(self, samples_ns):
        """A chunk of samples timed back to back (GPU event pairs, read after one synchronize):
        the noise is estimated once, after the chunk, and counts for each of its samples. (Judged
        sample by sample, a chunk of 2000 cost 2000 sorts of up to 2000 samples: 0.24 s of host
        time on the 2-core VM, with the GPU idle; 900 samples, a 100 ms chunk of 100 us launches,
        45 ms.)"""
        chunk = [float(s) for s in samples_ns]
        if not chunk:
            return
        if self.started is None:
            self.started = self.clock()
        self.samples.extend(chunk)
        self.taken.extend(chunk)
        self.noise = noise_of(self.samples, self.estimator)
        self.under = self.under + len(chunk) if (self.noise is not None and self.noise < self.max_noise) else 0

    def add_preempted(self, sample_ns):
        """A sample during which the OS ran something else on the core (the CPU program counts its
        involuntary context switches): it timed that too, so it is set aside and its time does
        not count toward the minimum time. A job on a busy core thus samples on until it has had
        as much undisturbed sampling as on a quiet one."""
        if self.started is None:
            self.started = self.clock()
        self.taken.append(float(sample_ns))

    @property
    def preempted(self):
        """Samples set aside: the OS ran something else on the core during them."""
        return len(self.taken) - len(self.samples)

    def done(self):
        n, taken = len(self.samples), len(self.taken)
        if taken >= MAX_SAMPLES:
            self.reason = "count"
        elif taken < self.min_samples:
            return False
        else:
            elapsed = self.clock() - self.started
            sampled = elapsed if self.sampled_s is None else self.sampled_s
            if n >= self.min_samples and self.under >= SETTLE and sampled >= self.min_time:
                self.reason = "noise"
            elif elapsed >= self.max_time:
                self.reason = "time"
        return self.reason is not None

    def out_of_race(self, leader_ns, race):
        """True (and ``reason`` "race") when this job, a minimum-decided one, is clearly slower
        than ``leader_ns`` (the best minimum of its shape so far): its minimum less its own noise
        is more than ``race`` (0.25: 25 %) above the leader, with at least ``min_samples``
        undisturbed samples and RACE_MIN_TIME seconds of them in. Never for the median (a GPU's
        clock drift moves it both ways) nor for the leader itself."""
        if not race or race <= 0 or self.estimator != MIN or not leader_ns or len(self.samples) < self.min_samples:
            return False
        sampled = self.sampled_s if self.sampled_s is not None else self.clock() - self.started
        if sampled < min(RACE_MIN_TIME, self.max_time):
            return False
        best = min(self.samples)
        floor = best * (1.0 - (self.noise or 0.0))
        if floor > leader_ns * (1.0 + race):
            self.reason = "race"
            return True
        return False

    def samples_for_estimate(self):
        """The undisturbed samples; every sample taken where fewer than ``min_samples`` of them
        came in before the time cap (a core busy throughout)."""
        return self.samples if len(self.samples) >= min(self.min_samples, len(self.taken)) else self.taken

    def summary(self, calls_per_sample=1):
        """The result columns: the deciding time and its estimator, the quantiles of the samples,
        iterations, samples, noise."""
        return summarize(self.samples_for_estimate(), calls_per_sample, self.estimator)


def clock_changed(before_mhz, after_mhz, drop=0.1):
    """True when the clock read after a job is more than ``drop`` below the one read before."""
    if not before_mhz or not after_mhz:
        return False
    return after_mhz < (1.0 - drop) * before_mhz
