"""Effort levels of ``harness tune`` and ``harness build``: each is a search budget and a
measurement policy, declared once in LEVELS and read by both commands, their --help and the
README's table.

- ``quick``: a small warm-started search per shape (on CPU boards the seeds alone: each register
  tile that fills the ISA's registers, with cache blocks after BLIS), losers raced out early, fewer
  finalists and re-measure rounds, each re-measured job sampled briefly. For a first look.
- ``default``: a warm-started genetic search with a budget per shape, on CPU boards as on GPUs
  (not every config), losers raced out once clearly behind their shape's leader; the top three
  re-measured interleaved, five rounds. On CPU boards the budget is small (16 a shape) because
  there a search is paced by its compiles (a packed-kernel config takes 1.3 to 1.7 s of a core to
  compile, its measurement well under one), and each re-measured job samples 0.3 s: the five
  rounds' smallest minimum decides, so one round's needs no more.
- ``full``: the same warm-started search with eight times the CPU budget (128 a shape) and four
  times the GPU one (384), each config timed to the noise rule (no racing); the top three
  re-measured, five rounds. The most a user would wait for: the reference the cheaper levels are
  judged against.
- ``exhaustive``: every config of the pruned space, each timed to the noise rule; the top three
  re-measured, five rounds. What ``harness build`` compiled before there were levels. On a CPU
  board's packed kernel that is up to 2,240 configs a shape: fifteen shapes of real models are
  33,600 compiles and 504,000 measurements, days of a 2-core machine.

An explicit ``--strategy``, ``--budget``, ``--top`` or ``--repeats`` wins over the level's, and
``--max-time`` sets every job's sampling, the re-measure's too.
``estimate`` turns a plan (compiles, measurements) into seconds with the rates the project saw
last time on this target (kept in .harness/rates.json, ``record_rates``), else the defaults
below, so that the line said before a long build or run, and the progress line's ETA, improve
from one run to the next.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import HarnessError


@dataclass(frozen=True)
class Effort:
    """One level: what is searched, how a config is timed, how the winners are re-measured."""

    name: str
    strategy: Optional[str]  # None: the target's search (genetic); "exhaustive": every config
    budget_cpu: Optional[int]  # evaluations per shape on CPU targets (None: no budget)
    budget_gpu: Optional[int]  # ... on GPU targets
    race: float  # CPU: drop a config once this far behind its shape's best (0: time every config in full)
    top: int  # finalists re-measured interleaved per shape
    repeats: int  # interleaved rounds of the re-measure
    remeasure_time_cpu: Optional[float]  # CPU: seconds of sampling per re-measured job (None: the run's --max-time)
    words: str  # one line for --help and the README
    cost: str  # what it cost here (README's first command), for --help and the README


LEVELS = {
    "quick": Effort("quick", None, 8, 32, 0.15, 2, 3, 0.25,
                    "genetic search warm-started, 8 configs a shape on CPUs (the register-tile seeds; 32 on GPUs), "
                    "losers raced out 15 % behind, top 2 re-measured 3 rounds",
                    "the README's first command: 24 configs, 31 s with its compiles cached on an idle 2-core VM, "
                    "326 s from empty caches at a load of 13 (compile-bound)"),
    "default": Effort("default", None, 16, 96, 0.25, 3, 5, 0.3,
                      "genetic search warm-started, 16 configs a shape on CPUs (96 on GPUs), losers raced out 25 % "
                      "behind, top 3 re-measured 5 rounds",
                      "the README's first command: 48 configs, 91 to 132 s from empty caches on an idle 2-core VM "
                      "(compile-bound), 55 to 88 s with its compiles cached"),
    "full": Effort("full", None, 128, 384, 0.0, 3, 5, None,
                   "genetic search warm-started, 128 configs a shape on CPUs (384 on GPUs), each timed to the noise "
                   "rule (no racing), top 3 re-measured 5 rounds",
                   "the README's first command: 384 configs, 289 s on an idle 2-core VM with most compiles cached; the "
                   "CPU bench's 15 shapes: 1,920 configs, 34 min"),
    "exhaustive": Effort("exhaustive", "exhaustive", None, None, 0.0, 3, 5, None,
                         "every config of the pruned space, each timed to the noise rule, top 3 re-measured 5 rounds",
                         "the README's first command: 1,530 compiles (the three shapes share them), 52 min on an idle "
                         "2-core VM, 27 of them compiling"),
}
DEFAULT = "default"


def get(name: Optional[str]) -> Effort:
    """The level called ``name`` (None: the default); one line naming the levels otherwise."""
    key = name or DEFAULT
    if key not in LEVELS:
        raise HarnessError("--effort %s: choose %s" % (name, ", ".join(LEVELS)))
    return LEVELS[key]


def help_text() -> str:
    """--effort's help: every level's line."""
    return "; ".join("%s: %s (%s)" % (e.name, e.words, e.cost) for e in LEVELS.values()) + \
        ". --strategy, --budget, --top, --repeats override the level's"


def budget_for(effort: Effort, is_gpu: bool) -> Optional[int]:
    return effort.budget_gpu if is_gpu else effort.budget_cpu


# ---- how long a plan takes ------------------------------------------------------------------

RATES_FILE = "rates.json"
# seconds per compile (wall, all cores of this machine), per config evaluated by a search (its
# compile and measurement, pipelined), per measured job and per re-measured job, before the project
# has seen any: on a 2-core VM, a packed CPU matmul config takes 1.3 to 1.7 s of one core to compile
# (so 0.75 s of wall time on both), a search of the README's first command about 1.2 s a config
# idle and 4 s under a load of 10 (compile-bound), a re-measured job 0.75 s (0.3 s of sampling, its
# warm-up and start, and per job counted the sift before it, the finalists past the top 3 and the
# noisy shapes' extra rounds: 0.58 to 0.96 s over twelve README tunes of 2026-11-27); on a GPU node, a
# Triton config on one core (1 s), a config of a search or a measured job 0.075 s of one device (one
# H200, tune's default --min-time-ms 25: 960 configs in a search phase of 69 to 72 s, its start and
# the re-measure beside it included; 2026-11-27), and per re-measured job what is left after the
# search, 0.03 s (3.6 to 5.3 s for 150 jobs, on one to four H200s)
DEFAULT_RATES = {"cpu": {"compile_s": 0.75, "eval_s": 2.0, "measure_s": 0.7, "remeasure_s": 0.75},
                 "gpu": {"compile_s": 1.0, "eval_s": 0.075, "measure_s": 0.075, "remeasure_s": 0.03}}
DEVICE_RATES = ("eval_s", "measure_s")  # GPU defaults that are per device: over the target's devices
# the compile pool runs on every core of the machine that builds: DEFAULT_RATES' compile_s is the
# seconds of one core a compile takes (DEFAULT_COMPILE_CORES of them on the machine it was seen on),
# and the default wall time per compile here is that over this machine's cores (an H200 node's 16
# cores built 179 Triton configs in 12.3 s, where 1.0 s each said 3 min)
DEFAULT_COMPILE_CORES = {"cpu": 2, "gpu": 1}


def _rates_path(root: Path) -> Path:
    return Path(root) / ".harness" / RATES_FILE


def rates(root: Path, target) -> dict:
    """Seconds per compile, per measured job and per re-measured job on ``target``: those this
    project saw last (``record_rates``), else DEFAULT_RATES for its backend (compiles spread over
    this machine's cores, a GPU's jobs over the devices its ``devices:`` lists: one where it lists
    none)."""
    kind = "gpu" if target.is_gpu else "cpu"
    rate = dict(DEFAULT_RATES[kind])
    rate["compile_s"] *= DEFAULT_COMPILE_CORES[kind] / max(1, os.cpu_count() or 1)
    if target.is_gpu:
        for name in DEVICE_RATES:
            rate[name] /= target.device_count()
    try:
        seen = json.loads(_rates_path(root).read_text()).get(target.name, {})
    except (OSError, ValueError):
        seen = {}
    rate.update({k: float(v) for k, v in seen.items() if k in rate and isinstance(v, (int, float)) and v > 0})
    return rate


def record_rates(root: Path, target, **seen) -> None:
    """Keep the rates seen in this run (seconds per compile / measured job / re-measured job)."""
    path = _rates_path(root)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    mine = data.setdefault(target.name, {})
    mine.update({k: round(float(v), 4) for k, v in seen.items() if v is not None and v > 0})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp%d" % os.getpid())
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def estimate(root: Path, target, compiles: int = 0, evals: int = 0, measures: int = 0, remeasures: int = 0) -> float:
    """Seconds for ``compiles`` compiles, ``evals`` configs of a search (compiled and measured,
    pipelined), ``measures`` measured jobs and ``remeasures`` re-measured jobs on ``target``."""
    r = rates(root, target)
    return (compiles * r["compile_s"] + evals * r["eval_s"] + measures * r["measure_s"]
            + remeasures * r["remeasure_s"])


def remeasure_jobs(shapes: int, top: int, repeats: int, library: bool) -> int:
    """The re-measure's jobs as the estimates count them: the top candidates (and the library)
    of each shape, once per round. Extra finalists and the noisy shapes' extra rounds are not
    counted: the re-measure rate recorded (``remeasure_s``) is per counted job, so it holds them."""
    return shapes * (top + int(bool(library))) * repeats if top else 0


class Eta:
    """The time left of a search and the re-measure after it, for the progress line.

    The search is paced by whichever of its two pipelines is slower: the compiles (a CPU search
    on a small machine: each config's compile takes longer than its measurement, and the agent
    waits) or the measurements. Once compiles have been made, the compile pipeline's pace is the
    wall time since the search began over the compiles made (or taken from the compile cache),
    which holds from the first round on because the build never stops while configs are left;
    its configs left to compile at that pace, plus the last round's measurements, is one bound.
    The other is the configs left to measure at the measurements' own pace (the agents' seconds
    over the configs measured). Before either is known, the rate this project saw last
    (``eval_s``). Plus the re-measure at ``remeasure_s``."""

    def __init__(self, root: Path, target, todo: int, remeasures: int, clock=None):
        import time

        self.clock = clock or time.monotonic
        self.began = self.clock()
        self.rate = rates(root, target)
        self.todo, self.remeasures = todo, remeasures

    def left(self, done: int, compiled: int = 0, measure_s: float = 0.0, round_size: int = 0) -> float:
        """Seconds left with ``done`` configs measured, ``compiled`` compiled or taken from the
        compile cache since the search began, ``measure_s`` seconds of the agents' measuring and
        ``round_size`` configs a round."""
        elapsed = self.clock() - self.began
        to_measure = max(0, self.todo - done)
        per_measure = measure_s / done if done and measure_s > 0 else None
        bounds = []
        if compiled and elapsed > 0:
            tail = min(to_measure, round_size or to_measure) * (per_measure or 0.0)
            bounds.append(max(0, self.todo - compiled) * (elapsed / compiled) + tail)
        if per_measure is not None:
            bounds.append(to_measure * per_measure)
        search = max(bounds) if bounds else to_measure * self.rate["eval_s"]
        return search + self.remeasures * self.rate["remeasure_s"]


def plan_line(what: str, compiles: int, measures: int, remeasures: int, seconds: float) -> str:
    """The one line said before a long build or run."""
    parts = ["%d compiles" % compiles] if compiles else []
    if measures:
        parts.append("%d measurements" % measures)
    if remeasures:
        parts.append("%d re-measurements of the finalists" % remeasures)
    return "%s: %s coming, about %s" % (what, ", ".join(parts) or "nothing to do", duration(seconds))


def duration(seconds: float) -> str:
    """90 -> '1 min 30 s', 12.3 -> '12 s'."""
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return "%.0f s" % seconds
    minutes, rest = divmod(int(round(seconds)), 60)
    return "%d min %02d s" % (minutes, rest)


def eta(elapsed: float, done: float, total: float) -> Optional[float]:
    """Seconds left at the rate so far (None before anything is done)."""
    if done <= 0 or total <= 0:
        return None
    return max(0.0, elapsed / done * (total - done))
