"""The winners' re-measure: each shape's finalists measured again, interleaved, and a noise-aware
winner picked; the winners file (results/<target>/<kernel>/winners.json), which ``harness
report`` reads.

A shape's finalists are its ``top`` configs of the search, with its config of the fewest SM
cycles and the fastest of its seeds where they are not among them
(``strategies.winner.top_candidates``). They are measured in ``repeats`` rounds, the order
rotating each round (A B C, B C A, C A B, ...), all on one device so that their times compare,
and the winner must beat the next by more than the spread, else the tie rule decides
(``strategies.winner.pick_winner``). A shape whose winner's noise is over
``winner.NOISY_WINNER``, or whose tie went to a candidate ``winner.TIE_WON_BEHIND`` or more behind
the fastest, gets ``repeats`` more rounds, once, of the candidates they can still order
(``contenders``: the others were beaten by more than the spread). Every job is timed for at least
``REMEASURE_MIN_TIME_MS`` however briefly the search measured. Before the finalists of a CPU
search are picked, its doubtful configs get two more processes (``sift``).

Two ways to run it:
- ``remeasure_winners``: after the search, every shape's round r together (the shapes spread over
  the devices by their jobs, ``spread_shapes``);
- ``ShapeRemeasures``: a GPU tune whose shapes are streams (``harness.streams``) starts a shape's
  re-measure as soon as its search is spent, on the device with the least re-measure work so
  far, while the other shapes still search: its rounds join the agents' stream there
  (remote_agent/serve.py), and the other devices go on measuring the search's batches.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from . import ui
from .errors import HarnessError

WINNERS_FILE = "winners.json"
REMEASURE_MIN_TIME_MS = 100.0  # GPU: the winners' re-measure times each job at least this long
SIFT_RANGE = 2.0  # CPU: configs within this factor of their shape's best are timed again (sift) ...
SIFT_MAX = 16  # ... among its this many fastest (the default's whole search of a shape)
SIFT_READS = 3  # ... until this many processes have timed each (the search's and two more)
SIFT_TIME_SHARE = 1 / 3  # ... each process for this share of a re-measure job's time: a floor, not the last per cent


# ---- after the search: every shape's round r together -------------------------------------------


def remeasure_winners(session, space: dict, histories: Dict[str, list], top: int = 3,
                      repeats: int = 5, seeds: Optional[Dict[str, list]] = None) -> dict:
    """Re-measure the finalists of every shape of ``histories`` (the module docstring says how),
    round r of every shape together, and save the winners to winners.json. Returns {shape_id:
    entry}."""
    shapes = {s.id: s for s in session.shapes}
    cands = {sid: finalists(h, top, (seeds or {}).get(sid, ())) for sid, h in histories.items() if sid in shapes}
    cands = {sid: c for sid, c in cands.items() if c}
    if not cands:
        return {}
    plans = {sid: plan_rounds(c, repeats) for sid, c in cands.items()}
    samples = {sid: empty_samples(cs) for sid, cs in cands.items()}
    variant_of: Dict[tuple, str] = {}
    first_row = len(session.rows())
    devices = session.pinned_devices() if hasattr(session, "pinned_devices") else 1  # (a stand-in session: one)
    slots = spread_shapes({sid: len(c) for sid, c in cands.items()}, devices)
    measure = lambda sids, first: _remeasure_rounds(  # noqa: E731
        session, space, {sid: plans[sid][first:first + repeats] for sid in sids}, samples, variant_of, slots)
    measure(list(plans), 0)
    noisy = [sid for sid, groups in samples.items() if unsure_winner(groups)]
    if noisy:
        say_unsure(noisy, repeats)
        for sid in noisy:
            plans[sid][repeats:] = more_rounds(plans[sid][repeats:], samples[sid])
        measure(noisy, repeats)
    rows_added = list(range(first_row, len(session.rows())))
    entries = {}
    for sid, groups in samples.items():
        entry = winner_entry(sid, groups, cands[sid], variant_of, 2 * repeats if sid in noisy else repeats)
        if entry is not None:
            entries[sid] = entry
    save_winners(session.results_path, entries, rows_added)
    return entries


def spread_shapes(jobs: Dict[str, int], devices: int) -> dict:
    """{shape id: device slot} for a winners' re-measure: every job of a shape on one device (its
    candidates' times compare), the shapes spread over ``devices`` so that each gets about as many
    jobs (``jobs``: a shape's jobs per round), the most first."""
    load = [0] * max(1, devices)
    slots = {}
    for sid in sorted(jobs, key=lambda s: (-jobs[s], s)):
        slot = load.index(min(load))
        slots[sid] = slot
        load[slot] += jobs[sid]
    return slots


def _remeasure_rounds(session, space: dict, plans: Dict[str, list], samples: dict, variant_of: dict,
                      slots: Optional[dict] = None) -> None:
    """Measure the rounds of ``plans`` ({shape_id: [round, ...]}, round r of every shape
    together) and add each candidate's Trials to ``samples`` ({shape_id: {config id: [...]}}),
    on one machine, each shape's jobs on one device (``slots``: {shape id: device slot}; None:
    all on the first device), so that the candidates' times compare (long-lived agents take all
    the rounds at once and run them back to back)."""
    shapes = {s.id: s for s in session.shapes}
    timing = remeasure_timing(session)
    count = max(len(p) for p in plans.values())
    pin = {sid: slots[sid] for sid in plans} if slots and len(set(slots.values())) > 1 else True
    handles = [session.submit(remeasure_pairs(plans, shapes, r, session.library), 1, (), pin=pin, timing=timing)
               for r in range(count)]
    for handle in handles:
        add_samples(session.collect(handle), space, samples, variant_of)


# ---- before the finalists are picked, on a CPU: more processes for the doubtful -----------------


def sift(session, space: dict, histories: Dict[str, list]) -> Dict[str, list]:
    """A CPU search (configs decided by their minimum) times each config in one process, and one
    process's minimum can read far above the config's floor: on a 2-core VM, eight processes of
    one config at 0.3 s each put their minima up to 45 % apart (docs/notes/2026-11-27-sift.md),
    and one config of the README's shapes read 1.3x to 1.7x its floor in about one process of
    four, all through the process, while the jobs interleaved with it read their floors
    (docs/notes/2026-11-27-sift-reads.md); racing drops such a config after a few samples. So
    before the finalists are picked, every config whose time is within SIFT_RANGE of its
    shape's best and that fewer than SIFT_READS processes have timed is timed in more processes
    until that many have: each round one process of each, each shape's configs interleaved on
    one device, the order reversed in the next round, no racing, for a third of a re-measure
    job's time. A config's time is then the lowest of its minima
    (``strategies.base.Summary.value``). The rows are recorded in winners.json (``sift_rows``):
    a resumed search leaves them out (they are not its evaluations), a second run's sift takes
    them in, and so picks the same finalists without measuring them again. Returns the
    histories with the sifts' Trials added (those of a GPU, median-decided, unchanged)."""
    searched = histories
    histories = with_sift_rows(session, space, searched)
    shapes = {s.id: s for s in session.shapes}
    todo = {sid: reads_wanted(history) for sid, history in histories.items() if sid in shapes}
    todo = {sid: wanted for sid, wanted in todo.items() if wanted}
    if not todo:
        return histories
    ui.out.print("sifting: %d configs of %d shapes timed again until %d processes have timed each, before the "
                 "finalists are picked (within %gx of their shape's best)"
                 % (sum(map(len, todo.values())), len(todo), SIFT_READS, SIFT_RANGE))
    devices = session.pinned_devices() if hasattr(session, "pinned_devices") else 1
    slots = spread_shapes({sid: len(c) for sid, c in todo.items()}, devices)
    pin = {sid: slots[sid] for sid in todo} if len(set(slots.values())) > 1 else True
    timing = remeasure_timing(session)
    timing.max_time *= SIFT_TIME_SHARE
    first_row = len(session.rows())
    handles = []
    for r in range(max(n for wanted in todo.values() for _, n in wanted)):
        pairs = [(cfg, shapes[sid]) for sid, wanted in todo.items() for cfg, n in wanted if n > r]
        handles.append(session.submit(pairs if r % 2 == 0 else pairs[::-1], 1, (), pin=pin, timing=timing))
    for handle in handles:
        session.collect(handle)
    save_sift_rows(session.results_path, list(range(first_row, len(session.rows()))))
    return with_sift_rows(session, space, searched)


def with_sift_rows(session, space: dict, histories: Dict[str, list]) -> Dict[str, list]:
    """The histories with the Trials of the sifts already in the results (a second run of the
    same command then finds nothing left to sift and the same finalists)."""
    from .strategies.history import in_space, row_trial

    recorded = frozenset(load_winners(session.results_path)["sift_rows"])
    out = {sid: list(history) for sid, history in histories.items()}
    for i, row in enumerate(session.rows()):
        sid = row.get("shape_id")
        if i in recorded and sid in out and in_space(row, space):
            out[sid].append(row_trial(row, space))
    return out


def reads_wanted(history: list) -> List[tuple]:
    """[(config, how many more processes it wants)] of a minimum-decided search: of its SIFT_MAX
    fastest configs, those within SIFT_RANGE of the best time that fewer than SIFT_READS
    processes have timed ok (a raced one too). After a sift none is left: their times only
    fall, so the same configs stay the fastest."""
    from .strategies.base import Summary, key

    summary = Summary(history)
    ranked = summary.ranked()[:SIFT_MAX]
    out = []
    for time_ns, _, cfg in ranked:
        trials = [t for t in summary.by_key[key(cfg)] if t.ok]
        minima = all(t.estimator == "min" for t in trials)
        if time_ns <= SIFT_RANGE * ranked[0][0] and minima and len(trials) < SIFT_READS:
            out.append((dict(cfg), SIFT_READS - len(trials)))
    return out


# ---- while the search goes on: each shape as its search ends ------------------------------------


@dataclass
class _ShapeState:
    """One shape's re-measure: its finalists, rounds, samples and device slot."""

    sid: str
    cands: list
    plan: list
    slot: int
    samples: dict
    first_row: int  # its rows in the results file from here on are the re-measure's
    variant_of: dict = field(default_factory=dict)
    repeats: int = 0
    thread: Optional[threading.Thread] = None
    error: Optional[BaseException] = None


class ShapeRemeasures:
    """The winners' re-measure of a tune whose shapes are streams: ``start(shape id, history,
    seeds)`` as each shape's search is spent (its rounds go to the agents at once, pinned to the
    device slot with the fewest re-measure jobs still to run: a device runs its pinned jobs
    first, so that is the one that ends them first); ``finish()`` waits for every shape, picks
    the winners and saves them. Each shape runs in a thread of its own: its first ``repeats``
    rounds, then, where its winner is unsure, ``repeats`` more on the same device."""

    def __init__(self, session, space: dict, top: int = 3, repeats: int = 5):
        self.session = session
        self.space = space
        self.top = top
        self.repeats = repeats
        self.shapes: Dict[str, _ShapeState] = {}
        self.load: List[int] = []  # per device slot: re-measure jobs submitted and not yet back
        self.noisy: List[str] = []
        self.lock = threading.Lock()
        self.timing = remeasure_timing(session)

    def start(self, sid: str, history: list, seeds=()) -> bool:
        """Start re-measuring shape ``sid`` (its search is spent); False where it has no finalist."""
        cands = finalists(history, self.top, seeds)
        if not cands or sid in self.shapes:
            return False
        with self.lock:  # (the shapes' threads change the load as their rounds come back)
            if not self.load:
                self.load = [0] * max(1, self.session.pinned_devices())
            slot = self.load.index(min(self.load))
        state = _ShapeState(sid, cands, plan_rounds(cands, self.repeats), slot, empty_samples(cands),
                            first_row=len(self.session.rows()))
        self.shapes[sid] = state
        state.thread = threading.Thread(target=self._run, args=(state,), daemon=True, name="remeasure-" + sid)
        state.thread.start()
        return True

    def _run(self, state: _ShapeState) -> None:
        try:
            self._rounds(state, 0)
            if unsure_winner(state.samples):
                with self.lock:
                    self.noisy.append(state.sid)
                state.plan[self.repeats:] = more_rounds(state.plan[self.repeats:], state.samples)
                self._rounds(state, self.repeats)
        except BaseException as exc:  # raised by finish(), on the tune's thread
            state.error = exc

    def _rounds(self, state: _ShapeState, first: int) -> None:
        shape = next(s for s in self.session.shapes if s.id == state.sid)
        plans = {state.sid: state.plan[first:first + self.repeats]}
        rounds = [remeasure_pairs(plans, {state.sid: shape}, r, self.session.library)
                  for r in range(len(plans[state.sid]))]
        with self.lock:
            self.load[state.slot] += sum(len(pairs) for pairs in rounds)
        handles = [self.session.submit(pairs, 1, (), pin={state.sid: state.slot}, timing=self.timing)
                   for pairs in rounds]
        for handle, pairs in zip(handles, rounds):
            rows = self.session.collect(handle)
            with self.lock:
                self.load[state.slot] -= len(pairs)
            add_samples(rows, self.space, {state.sid: state.samples}, state.variant_of)
        state.repeats += len(plans[state.sid])

    def finish(self) -> dict:
        """Wait for every shape started, pick and save the winners. Returns {shape_id: entry}."""
        for state in self.shapes.values():
            state.thread.join()
        for state in self.shapes.values():
            if state.error is not None:
                raise state.error
        if self.noisy:
            say_unsure(self.noisy, self.repeats)
        rows = self.session.rows()
        rows_added = [i for i, r in enumerate(rows) if r.get("shape_id") in self.shapes
                      and i >= self.shapes[r["shape_id"]].first_row]
        entries = {}
        for sid, state in self.shapes.items():
            entry = winner_entry(sid, state.samples, state.cands, state.variant_of, state.repeats)
            if entry is not None:
                entries[sid] = entry
        save_winners(self.session.results_path, entries, rows_added)
        return entries


# ---- the parts both use --------------------------------------------------------------------------


def finalists(history: list, top: int, seeds=()) -> list:
    from .strategies.winner import top_candidates

    return top_candidates(history, top, seeds=seeds)


def plan_rounds(cands: list, repeats: int) -> list:
    """Twice ``repeats`` rounds of ``cands``, the order rotating (the second half for an unsure
    winner)."""
    from .strategies.winner import interleaved_rounds

    return interleaved_rounds(cands, 2 * repeats)


def empty_samples(cands: list) -> dict:
    from .strategies import config_id

    return {config_id(c): [] for c in cands}


def remeasure_timing(session):
    """The run options of a re-measure round: at least REMEASURE_MIN_TIME_MS of timing per job;
    on a CPU the level's sampling time per job (``remeasure_max_time``), whose rounds' minima
    decide."""
    searched = session.run_options
    timing = dataclasses.replace(searched, min_time_ms=max(REMEASURE_MIN_TIME_MS, searched.min_time_ms))
    if getattr(session, "remeasure_max_time", None) and not session.target.is_gpu:
        timing.max_time = session.remeasure_max_time
    return timing


def add_samples(rows: list, space: dict, samples: dict, variant_of: dict) -> None:
    """Add each row of a re-measure round to its candidate's Trials in ``samples`` ({shape_id:
    {config id: [...]}}); ``variant_of``: {(shape id, config id): variant id}."""
    from .strategies import config_id
    from .strategies.history import in_space, row_trial

    for row in rows:
        sid = row.get("shape_id")
        if sid not in samples or not in_space(row, space):
            continue
        trial = row_trial(row, space)
        cid = config_id(trial.config)
        if cid in samples[sid]:
            samples[sid][cid].append(trial)
            variant_of[(sid, cid)] = row.get("variant_id")


def remeasure_pairs(plans: Dict[str, list], shapes: dict, r: int, library: bool) -> list:
    """Round ``r``'s (config, Shape) pairs, each shape's in its plan's (rotated) order. With
    ``library`` the library joins every round, so that the uplift compares times taken in the same
    window (a library row from the first round met a cool GPU: up to 16 % faster on large
    products), at a place that moves by one each round (None in its pair): on a GPU the first job
    of a round meets the GPU cool from the pause before it, the last one at its power cap."""
    pairs = []
    for sid, plan in plans.items():
        mine = [(cfg, shapes[sid]) for cfg in plan[r]]
        if library:
            mine.insert(r % (len(mine) + 1), (None, shapes[sid]))
        pairs += mine
    return pairs


def say_unsure(sids: list, repeats: int) -> None:
    from .strategies.winner import NOISY_WINNER, TIE_WON_BEHIND

    ui.out.print("%d shape(s) with a winner's noise over %g %% or a tie won %g %% or more behind the fastest: "
                 "%d more rounds (%s)" % (len(sids), 100 * NOISY_WINNER, 100 * TIE_WON_BEHIND, repeats,
                                          ", ".join(sids)))


def unsure_winner(groups: dict) -> bool:
    """Whether the winner ``groups`` ({config id: Trials}) would give needs more rounds
    (``Winner.unsure``); False where no candidate can win."""
    from .strategies.winner import pick_winner

    try:
        return pick_winner(groups).unsure
    except ValueError:
        return False


def contenders(groups: dict) -> frozenset:
    """The candidates an unsure winner's more rounds measure (config ids): the winner, the
    fastest, those tied with them and the runner-up, which the rounds are to order. The others
    were each beaten by more than the larger spread in the first rounds; timing them again would
    lengthen the rounds that run on one device after a tune's search. The winner is then picked
    as before (``winner.pick_winner``), from every candidate's samples."""
    from .strategies.winner import pick_winner

    win = pick_winner(groups)
    return frozenset(c for c in [win.id, win.leader, win.runner_up, *win.tied] if c is not None)


def more_rounds(planned: list, groups: dict) -> list:
    """An unsure winner's more rounds: the ``planned`` rounds (their order rotating on from the
    first rounds') with only its ``contenders``."""
    from .strategies import config_id

    keep = contenders(groups)
    return [[c for c in rnd if config_id(c) in keep] for rnd in planned]


def winner_entry(sid: str, groups: dict, cands: list, variant_of: dict, repeats: int) -> Optional[dict]:
    """The winners.json entry of shape ``sid`` from its candidates' samples; None (said) where no
    candidate can win."""
    from .strategies import config_id
    from .strategies.winner import pick_winner

    by_id = {config_id(c): c for c in cands}
    try:
        win = pick_winner(groups)
    except ValueError as exc:
        ui.console.print("[yellow]%s: no winner re-measured (%s)[/]" % (sid, exc))
        return None
    vid = lambda cid: variant_of.get((sid, cid))  # noqa: E731
    return {
        "shape": sid, "variant_id": vid(win.id), "config": by_id[win.id],
        "median_ns": win.median, "spread_ns": win.spread, "rel_spread": win.rel_spread,
        "noise": win.noise, "estimator": win.estimator,
        "decided": win.decided, "rule": win.rule, "tied": [vid(c) for c in win.tied],
        "runner_up": vid(win.runner_up) if win.runner_up else None,
        "margin_ns": win.margin, "repeats": repeats,
        "candidates": [{"variant_id": vid(c.id), "config": by_id[c.id], "median_ns": _num(c.median),
                        "spread_ns": _num(c.spread), "repeats": c.repeats, "failed": c.failed}
                       for c in win.table],
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _num(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


# ---- the winners file ----------------------------------------------------------------------------


def winners_path(results_path: Path) -> Path:
    return Path(results_path).with_name(WINNERS_FILE)


def load_winners(results_path: Path) -> dict:
    path = winners_path(results_path)
    if not path.exists():
        return {"shapes": {}, "remeasure_rows": [], "sift_rows": []}
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise HarnessError("malformed winners file: %s" % exc, where=str(path))
    data.setdefault("shapes", {})
    data.setdefault("remeasure_rows", [])
    data.setdefault("sift_rows", [])
    return data


def library_times(results_path: Path, winners: Optional[dict] = None) -> Dict[str, float]:
    """{shape id: the library's time over the winners' re-measure}: the library joins every round
    of a shape's re-measure (remeasure_pairs), and its time is taken from those rows as the
    winner's is from its own (the median of the rounds; the minimum where the minimum decides),
    so that the uplift compares like with like. Without this a report reads the library's latest
    row, one round: against a winner's median over ten rounds on an H200 that row alone made a
    winner 4 % faster than the library's median read as no faster, and the library was kept.
    ``winners``: the winners file's data where the caller has read it (load_winners)."""
    from remote_agent.contract import OK, deciding_estimator, deciding_time

    from .strategies.history import read_rows

    data = winners if winners is not None else load_winners(results_path)
    wanted = set(data["remeasure_rows"])
    if not wanted or not data["shapes"]:
        return {}
    times: Dict[str, list] = {}
    by_min: Dict[str, bool] = {}
    for i, row in enumerate(read_rows(results_path)):
        sid = row.get("shape_id")
        if i not in wanted or sid not in data["shapes"] or not str(row.get("variant_id", "")).startswith("lib:"):
            continue
        t = deciding_time(row)
        if row.get("status") != OK or t is None:
            continue
        times.setdefault(sid, []).append(t)
        by_min[sid] = by_min.get(sid, True) and deciding_estimator(row) == "min"
    return {sid: (min(ts) if by_min[sid] else statistics.median(ts)) for sid, ts in times.items() if len(ts) >= 2}


def not_search_rows(results_path: Path) -> frozenset:
    """The indices of the results rows that no search asked for: the winners' re-measures and the
    sifts. A resumed search leaves them out of its history (its budget and a halving's rungs
    count the search's own measurements)."""
    data = load_winners(results_path)
    return frozenset(data["remeasure_rows"]) | frozenset(data["sift_rows"])


def save_sift_rows(results_path: Path, rows_added: list) -> None:
    data = load_winners(results_path)
    data["sift_rows"] = sorted(set(data["sift_rows"]) | set(rows_added))
    _write_winners(results_path, data)


def save_winners(results_path: Path, entries: dict, rows_added: list) -> Path:
    data = load_winners(results_path)
    data["shapes"].update(entries)
    data["remeasure_rows"] = sorted(set(data["remeasure_rows"]) | set(rows_added))
    return _write_winners(results_path, data)


def _write_winners(results_path: Path, data: dict) -> Path:
    from .bundle import write_atomic

    path = winners_path(results_path)
    write_atomic(path, json.dumps(data, indent=1).encode())
    return path
