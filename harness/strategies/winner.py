"""Noise-aware winners: re-measure the top candidates interleaved, and call a winner only when it
beats the next by more than the measured spread.

Plan: ``plan_interleaved([A, B, C], repeats=5)`` -> A B C  B C A  C A B ... (every round measures
each candidate once; the order rotates so no candidate always runs first after a pause or last
before one). Slow drift (clocks, temperature, a neighbour's load) then hits every candidate
alike instead of whichever ran last.

Decision (``pick_winner``), with the time and the spread of every candidate, both of the
estimator that decided its repeats (results column ``estimator``; ``candidate_stats``):
- ``median`` (GPU targets, older rows): the time is the median of the repeats' times; the spread
  is p80 - p20 of them, or, when larger, what the repeats' own measurements say it should be at
  least (five or seven repeats alone underestimate it): for repeats that carry the noise of
  their median (results column ``noise``, the agent's adaptive measurement), NOISE_TO_SPREAD
  times the median noise in ns (p80 - p20 of normal medians is 1.68 of their standard error);
  for older rows without it, the median of their own p80 - p20.
- ``min`` (CPU targets): the time is the smallest of the repeats' minima (a neighbour only ever
  slows a measurement down, so the lowest floor seen is the kernel's); the spread is how well
  that floor reproduced: the second smallest repeat minus the smallest, and at least
  MIN_RESOLUTION of the time: how far apart the smallest of 5 repeats of one and the same config
  land from one measurement to the next (about their 90th percentile), so closer candidates tie.
  Measured on a 2-core VM with the re-measure's 0.3 s a job (40 fresh processes a config, one
  config each of 64x64x64, 128x128x128 and 256x256x128): two minima of 5 of them differ by a
  median 0.6 to 2.1 %, 2.5 to 4.7 % at the 80th percentile, 3.0 to 5.7 % at the 90th (with
  0.75 s a job, the earlier re-measure: 0.8, 1.75 and 2.4 %; docs/notes/2026-11-27-sift.md). A
  floor seen by one repeat only makes the spread as large as the slowdown the others suffered,
  and the candidate ties with everything within it.
The candidate's *noise* is the second smallest repeat minus the smallest, over the smallest, for
``min``; the median of its repeats' noise for ``median``.
  1. The leader is the candidate with the lowest time.
  2. A candidate is *tied* with the leader when the gap between their times is not more than
     the larger of their two spreads, unless the rounds order them (``behind_in_rounds``): with
     the median, each round measured every candidate once, so their times pair up round by
     round, and a candidate slower than the leader in so many rounds that a fair coin would be
     that one-sided with probability ROUNDS_ALPHA or less (a one-sided sign test: all 5 of 5
     rounds, 9 of 10) is behind it, however wide the spreads. Drift that the rounds share (a
     GPU's clock and temperature move between rounds, not within one) widens every spread but
     moves both times of a round alike: unpaired, spreads that wide tie a config a few percent
     slower with a leader that beat it in 9 of 10 rounds, and the config id may give it the win. The
     minimum (CPU targets) is not paired: its time is the lowest floor any repeat found, not a
     round's. With no tied candidate the leader wins outright ("clear", with its margin: how
     much slower the next candidate is, in percent of the winner's time; never negative). With
     tied candidates the result is a "tie" and has no margin.
  3. Tie rule (default, ``tie_rule="core"``): the smallest config id among the *core* of the tie
     wins: the leader and the tied candidates that this re-measure's own repeats cannot order
     against it, the gap between them no more than the larger of their spreads in this run (for
     the minimum, the spread before MIN_RESOLUTION's floor; the floor covers how far a later
     measurement may land, while interleaved repeats of one re-measure share their machine's
     state). They are indistinguishable by the measurements, so the rule must not depend on them:
     the config id never changes, so the same core gives the same winner run after run. Tied
     candidates outside the core are listed but do not win: whether the re-measure had them at
     all depends on the search's single measurements (with the smallest id of all tied candidates,
     two tunes that tied the same two configs disagreed over a third that only one run's search
     had put in the re-measure).
     ``tie_rule="id"`` takes the smallest id among all tied candidates. ``tie_rule="spread"``
     first prefers a tied candidate whose spread is at most a quarter of every other tied one's
     (clearly the steadier), then the smallest id; it can flip when true spreads differ by about
     that factor, because spread estimates from a handful of repeats are noisy themselves (with
     9 repeats and equal noise, one estimate is under half the other in about 8% of runs, under a
     quarter in under 1%).
A candidate that failed in any repeat (crash, wrong answer, timeout) cannot win.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from .base import Trial, config_id

TIE_SPREAD_RATIO = 0.25
MIN_RESOLUTION = 0.05  # min: the smallest spread, relative to the time (see the module docstring)
NOISE_TO_SPREAD = 1.68  # p80 - p20 of a normal sample, in standard deviations
NOISY_WINNER = 0.02  # a re-measured winner noisier than this gets as many rounds again (harness.rounds)
TIE_WON_BEHIND = 0.01  # ... and so does a tie won by a candidate this far behind the fastest
CLOSE_EXTRA = 2  # min: finalists past the top ones that lie within MIN_RESOLUTION of the fastest, at most
ROUNDS_ALPHA = 0.05  # behind_in_rounds: the sign test's one-sided level


def plan_interleaved(candidates: Sequence, repeats: int, rotate: bool = True) -> list:
    """The order to measure ``candidates`` in: ``repeats`` rounds of every candidate once."""
    return [c for rnd in interleaved_rounds(candidates, repeats, rotate) for c in rnd]


def interleaved_rounds(candidates: Sequence, repeats: int, rotate: bool = True) -> List[list]:
    """``repeats`` rounds, each measuring every candidate once (rotated by one each round)."""
    items = list(candidates)
    rounds = []
    for r in range(max(0, repeats)):
        shift = (r % len(items)) if (rotate and items) else 0
        rounds.append(items[shift:] + items[:shift])
    return rounds


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of a non-empty sequence."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass
class CandidateStats:
    id: str
    median: float  # its deciding time over the repeats: the median, or the min where the minimum decides
    spread: float  # see the module docstring
    repeats: int
    failed: int = 0
    samples: List[float] = field(default_factory=list)
    estimator: str = "median"
    noise: Optional[float] = None  # relative noise of its deciding time (module docstring)
    run_spread: Optional[float] = None  # min: the spread without MIN_RESOLUTION's floor (None: ``spread``)

    @property
    def rel_spread(self) -> float:
        return self.spread / self.median if self.median else 0.0

    @property
    def spread_in_run(self) -> float:
        """How far apart this re-measure's own repeats put it (the tie rule's core)."""
        return self.spread if self.run_spread is None else self.run_spread


@dataclass
class Winner:
    id: str
    median: float  # its deciding time (CandidateStats.median)
    spread: float
    decided: str  # "clear": beat every other candidate by more than the spread; "tie": tie rule
    tied: List[str]  # the leader and its tied candidates (just the winner when clear)
    runner_up: Optional[str]
    margin: Optional[float]  # clear: the runner-up's median minus the winner's (> 0); tie: None
    rule: str  # how it was decided, in words
    table: List[CandidateStats]  # every candidate, fastest first
    estimator: str = "median"
    noise: Optional[float] = None  # the winner's CandidateStats.noise
    leader: Optional[str] = None  # the fastest candidate that never failed (the winner unless a tie rule chose)

    @property
    def behind_leader(self) -> float:
        """How much slower than the leader the winner measured, relative (0 when it is the
        leader): a tie rule may give the win to a candidate the repeats put behind."""
        fastest = next((c.median for c in self.table if c.id == self.leader), self.median)
        return (self.median - fastest) / fastest if fastest > 0 else 0.0

    @property
    def unsure(self) -> bool:
        """Whether the re-measure should get more rounds: the winner's noise is over NOISY_WINNER,
        or the tie rule gave the win to a candidate TIE_WON_BEHIND or more behind the fastest: a
        wide re-measure can tie a slower config in, and more rounds order it behind."""
        return (self.noise or 0.0) > NOISY_WINNER or self.behind_leader >= TIE_WON_BEHIND

    @property
    def rel_spread(self) -> float:
        return self.spread / self.median if self.median else 0.0

    @property
    def margin_pct(self) -> Optional[float]:
        """Clear winners: how much slower the runner-up is, in percent of the winner's median."""
        return margin_percent(self.margin, self.median)

    def words(self) -> str:
        return decision_words(self.decided, self.margin_pct, [c for c in self.tied if c != self.id])


def margin_percent(margin_ns, median_ns) -> Optional[float]:
    if margin_ns is None or not median_ns or margin_ns < 0:
        return None
    return 100.0 * margin_ns / median_ns


def decision_words(decided: str, margin_pct: Optional[float], tied_with: Sequence[str]) -> str:
    """``clear by 12.3 %`` or ``tie with A, B``: how a winner was decided, in words."""
    if decided == "clear":
        return "clear by %.1f %%" % margin_pct if margin_pct is not None else "clear (no other candidate)"
    return "tie with %s" % ", ".join(tied_with) if tied_with else "tie"


def candidate_stats(cid: str, samples: Sequence) -> CandidateStats:
    """``samples``: times (floats) or Trials of one candidate's repeats. Trials whose minimum
    decided (``estimator == "min"``, all of them) are judged by their minimum; the rest (and
    plain floats) by their median."""
    times, inner, noise, rel_noise, failed = [], [], [], [], 0
    trials = [s for s in samples if isinstance(s, Trial) and s.ok]
    by_min = bool(trials) and all(t.estimator == "min" for t in trials)
    for s in samples:
        if isinstance(s, Trial):
            if not s.ok:
                failed += 1
                continue
            times.append(float(s.time_ns))
            if s.noise is not None:
                noise.append(NOISE_TO_SPREAD * float(s.noise) * float(s.time_ns))
                rel_noise.append(float(s.noise))
            elif s.spread_ns is not None:
                inner.append(float(s.spread_ns))
        elif s is None:
            failed += 1
        else:
            times.append(float(s))
    if not times:
        return CandidateStats(cid, float("inf"), float("inf"), 0, failed, [])
    if by_min:
        return min_stats(cid, times, failed)
    if len(times) >= 3:
        spread = quantile(times, 0.8) - quantile(times, 0.2)
    elif len(times) == 2:
        spread = abs(times[0] - times[1])
    else:
        spread = 0.0
    if noise:  # what the noise of the repeats' medians says their spread is at least
        spread = max(spread, statistics.median(noise))
    elif inner:  # older rows: their own p80 - p20 (over their iterations)
        spread = max(spread, statistics.median(inner))
    return CandidateStats(cid, statistics.median(times), spread, len(times), failed, times,
                          noise=statistics.median(rel_noise) if rel_noise else None)


def behind_in_rounds(leader: CandidateStats, other: CandidateStats, alpha: float = ROUNDS_ALPHA) -> bool:
    """Whether interleaved rounds put ``other`` behind ``leader`` (module docstring, step 2): both
    judged by the median, with as many repeats, so that their samples pair up round by round, and
    ``other`` the slower in so many of the rounds that tell them apart (equal times tell nothing)
    that a fair coin is that one-sided with probability ``alpha`` or less."""
    if leader.estimator != "median" or other.estimator != "median" or len(leader.samples) != len(other.samples):
        return False
    rounds = [(a, b) for a, b in zip(leader.samples, other.samples) if a != b]
    slower = sum(b > a for a, b in rounds)
    return bool(rounds) and sign_test(slower, len(rounds)) <= alpha


def sign_test(k: int, n: int) -> float:
    """The probability that a fair coin comes up heads ``k`` or more times in ``n`` tosses."""
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2.0 ** n


def min_stats(cid: str, times: Sequence[float], failed: int = 0) -> CandidateStats:
    """A candidate judged by its minimum: the smallest repeat, spread to the second smallest (at
    least MIN_RESOLUTION of it)."""
    low = sorted(times)
    reach = (low[1] - low[0]) if len(low) >= 2 else 0.0
    return CandidateStats(cid, low[0], max(reach, MIN_RESOLUTION * low[0]), len(low), failed, list(times), "min",
                          reach / low[0] if (low[0] and len(low) >= 2) else None, reach)


def pick_winner(samples: Mapping[str, Sequence], tie_rule: str = "core",
                tie_spread_ratio: float = TIE_SPREAD_RATIO) -> Winner:
    """``samples``: {candidate id: its repeated measurements (floats or Trials)}."""
    if tie_rule not in ("core", "id", "spread"):
        raise ValueError("tie_rule is 'core', 'id' or 'spread', not %r" % tie_rule)
    table = [candidate_stats(cid, s) for cid, s in samples.items()]
    table.sort(key=lambda c: (c.median, c.id))
    eligible = [c for c in table if c.failed == 0 and c.repeats > 0]
    if not eligible:
        raise ValueError("no candidate ran successfully in every repeat")
    leader = eligible[0]
    others = eligible[1:]
    within = [c for c in others if c.median - leader.median <= max(leader.spread, c.spread)]
    tied = [leader] + [c for c in within if not behind_in_rounds(leader, c)]
    if len(tied) == 1:
        win, decided = leader, "clear"
        rule = "beats every other candidate by more than the larger spread"
        if within:
            rule += " or, %d within it, in nearly every round (sign test)" % len(within)
    else:
        decided = "tie"
        steadiest = min(tied, key=lambda c: (c.spread, c.id))
        if tie_rule == "spread" and all(steadiest.spread <= tie_spread_ratio * c.spread
                                        for c in tied if c is not steadiest):
            win = steadiest
            rule = "tied with %d others within the spread; it has the clearly lowest spread" % (len(tied) - 1)
        elif tie_rule == "core":
            core = [c for c in tied if c.median - leader.median <= max(leader.spread_in_run, c.spread_in_run)]
            win = min(core, key=lambda c: c.id)
            rule = "tied with %d others within the spread; smallest config id of the %d its repeats cannot order" % (
                len(tied) - 1, len(core))
        else:
            win = min(tied, key=lambda c: c.id)
            rule = "tied with %d others within the spread; smallest config id" % (len(tied) - 1)
    rest = [c for c in eligible if c is not win]
    runner = min(rest, key=lambda c: (c.median, c.id)) if rest else None
    margin = (runner.median - win.median) if (runner and decided == "clear") else None
    return Winner(win.id, win.median, win.spread, decided, [c.id for c in tied],
                  runner.id if runner else None, margin, rule, table, win.estimator, win.noise, leader.id)


def entry_words(entry: Mapping, short=None) -> str:
    """A saved winner (a winners.json entry) decided in words; ``short`` writes a config."""
    write = short or (lambda cfg: " ".join("%s=%s" % kv for kv in cfg.items()))
    configs = {c.get("variant_id"): write(c.get("config") or {}) for c in entry.get("candidates") or []}
    tied = [configs.get(v, str(v)) for v in (entry.get("tied") or []) if v != entry.get("variant_id")]
    return decision_words(entry["decided"], margin_percent(entry.get("margin_ns"), entry.get("median_ns")), tied)


def top_candidates(history: Sequence[Trial], n: int = 3, problem=None, seeds: Sequence[dict] = ()) -> List[dict]:
    """The ``n`` fastest configs of a search's history, to re-measure interleaved, and where the
    times are minima (CPU targets) up to CLOSE_EXTRA more within MIN_RESOLUTION of the fastest;
    then, where it is not among them, the config that took the fewest SM cycles (time x clock, of
    the measurements that carry the SM clock); then the fastest of ``seeds`` (the warm start's
    configs) that ran ok.

    A GPU at its power cap changes its clock between the search's rounds, and a config measured at
    a low clock reads slow: a config that took the fewest SM cycles can miss the fastest by time.
    Under the cap the kernels run at one clock, so cycles rank them as a steady run would. Likewise
    for the seeds, measured in the first round, which may meet the GPU at another clock than the
    later rounds (docs/notes/2026-11-26-gpu-runs.md has the runs that showed both)."""
    from .base import Summary, key

    summary = Summary(history)
    ranked = summary.ranked(problem)
    chosen = [dict(cfg) for _, _, cfg in ranked[:n]]
    if not n:
        return chosen
    chosen += [dict(cfg) for _, _, cfg in _close_by_minimum(summary, ranked, n)]
    keys = {key(c) for c in chosen}
    fewest_cycles = min(((t.time_ns * t.clock_mhz, cid, cfg) for _, cid, cfg in ranked
                         for t in [summary.latest(key(cfg))] if t.clock_mhz), default=None)
    if fewest_cycles and key(fewest_cycles[2]) not in keys:
        chosen.append(dict(fewest_cycles[2]))
        keys.add(key(fewest_cycles[2]))
    seed_keys = {key(s) for s in seeds}
    fastest_seed = next((cfg for _, _, cfg in ranked if key(cfg) in seed_keys), None)
    if fastest_seed is not None and key(fastest_seed) not in keys:
        chosen.append(dict(fastest_seed))
    return chosen


def _close_by_minimum(summary, ranked: list, n: int) -> list:
    """Past the ``n`` fastest, the configs whose time is a minimum (CPU targets) within
    MIN_RESOLUTION of the fastest, at most CLOSE_EXTRA of them: the search's minima cannot tell
    them from the fastest (the re-measure's own repeats can barely), so which of them made the
    top ``n`` was the search's noise."""
    if not ranked or not all(t.estimator == "min" for t in summary.trials if t.ok):
        return []
    best = ranked[0][0]
    return [r for r in ranked[n:] if r[0] <= best * (1.0 + MIN_RESOLUTION)][:CLOSE_EXTRA]


def winner_from_trials(trials: Sequence[Trial], configs: Optional[Sequence[dict]] = None) -> Winner:
    """The winner among re-measured Trials (grouped by config id); ``configs`` limits the
    candidates (e.g. to the re-measured ones, leaving out earlier search trials)."""
    allowed = None if configs is None else {config_id(c) for c in configs}
    groups: Dict[str, list] = {}
    for t in trials:
        cid = config_id(t.config)
        if allowed is None or cid in allowed:
            groups.setdefault(cid, []).append(t)
    return pick_winner(groups)


def remeasure(configs: Sequence[dict], evaluate_batch, repeats: int = 7, rotate: bool = True) -> Winner:
    """Measure ``configs`` interleaved (one evaluate_batch call per round, in the planned order)
    and pick the winner. Returns the Winner; its ids are config ids (``config_id(config)``)."""
    from .driver import normalize_results
    from .base import Batch

    trials = []
    for rnd in interleaved_rounds(list(configs), repeats, rotate):
        trials += normalize_results(evaluate_batch(list(rnd)), Batch(list(rnd)), {})
    return winner_from_trials(trials, configs)
