"""Search streams: each shape's search on its own, every device fed from all of them.

``strategies.driver.drive`` runs the shapes' searches in lockstep rounds: round k + depth is
asked only once round k (a batch of every shape) is told, so the slowest batch of a round holds
every shape back, and the work in flight does not grow with the devices. Here each shape is a
stream of its own (``ShapeStream``): its strategy asks its next batch as soon as one of its own
earlier batches is told, with up to ``ahead`` batches in flight (asked, building, queued or being
measured); each batch is a round of its own (one shape's pairs), built in a thread of its own and
handed to the agents as soon as it is built, whatever the other shapes are doing. The agents
measure GPU rounds as one stream (``remote_agent/serve.py``, ``Stream``): a device takes the
next queued job of any round as soon as it is free, so no device idles while any shape has a
config built and waiting.

Asking is deterministic: a shape's batch k is asked once its batches up to k - ``ahead`` are
told, with exactly those results and its batches in flight as pending trials, and a shape's
batches are told in the order they were asked (one that comes back early waits for the ones
asked before it). So the configs a search asks depend only on the times it measured, not on
which device or round came back first: a second tune that measures the same times asks the same
configs (and compiles nothing new: ``harness.compile.cache``). A shape whose warm-start seeds
went out before the pruning asks its batch 2 right after the pruning (with ``ahead`` at least
``AHEAD_MIN`` it sees nothing told under any device count), and its batches up to ``ahead`` once
the first batch of any shape is told: by then the agents have said how many devices measure. So
the compiles of the search's first batches overlap the seeds' build and measuring instead of
waiting for them (a genetic search samples until it has ``population`` results, so those
batches are the same either way).

``on_spent(search)`` is called as each shape's search is spent (stopped, nothing in flight), while
the others go on: a tune starts that shape's winners' re-measure there (``harness.remeasure``).

``ahead_for`` picks ``ahead`` from the devices and shapes: enough batches in flight to keep
every device busy while the next batches compile, no more (a batch asked with fewer results
known is a less informed one).

An evaluator has three calls: ``submit(asks, fidelity) -> handle`` (starts the round, returns at
once), ``wait(handle) -> waited`` (blocks until its rows are there; called in a thread per
round), ``finish(handle, waited) -> results per ask`` (called on the search's thread, one at a
time). ``SessionRounds`` is that for a ``rounds.Session`` with long-lived agents.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from .strategies.base import Trial, prepare_problems
from .strategies.driver import (PENDING, STOP_FINISHED, STOP_TIME, ShapeSearch, _evaluations_that_fit, _tell,
                                apply_preferences, batch_limit)

AHEAD_MIN = 2  # batches in flight per shape at least: one measured while the next is built
AHEAD_MAX = 8
DEVICE_BATCHES = 6  # batches in flight per device, over all shapes (covers a batch's compile)


def ahead_for(devices: int, shapes: int, in_flight: int = 0) -> int:
    """Batches in flight per shape: ``in_flight`` where given, else about ``DEVICE_BATCHES`` per
    device spread over the shapes, between ``AHEAD_MIN`` and ``AHEAD_MAX``. It depends on the
    counts only, so two tunes on the same node ask alike."""
    if in_flight:
        return max(1, int(in_flight))
    return max(AHEAD_MIN, min(AHEAD_MAX, math.ceil(DEVICE_BATCHES * max(1, devices) / max(1, shapes))))


@dataclass
class Flight:
    """One batch of one shape, asked and not yet told."""

    number: int  # the batch's number in its stream (1, 2, ...)
    fidelity: int
    batch: object  # a strategies.Batch
    handle: object = None
    results: Optional[list] = None  # this shape's results, once back
    back: bool = False


@dataclass
class ShapeStream:
    """A shape's search and its batches in flight, oldest first."""

    search: ShapeSearch
    flights: List[Flight] = field(default_factory=list)
    asked: int = 0


@dataclass
class StreamStats:
    """What the streams did: batches told, and the seconds the search's thread waited for
    results with nothing to ask (``waited``)."""

    told: int = 0
    waited: float = 0.0
    in_flight_max: int = 0  # batches in flight at once, at most
    ahead: int = 0  # batches in flight per shape allowed
    pruning: float = 0.0  # seconds the spaces took to prune (the seeds' batches measured meanwhile)


def drive_streams(searches: List[ShapeSearch], space: dict, evaluator, budget: Optional[int] = None,
                  time_limit: Optional[float] = None, *, ahead=AHEAD_MIN, on_round: Optional[Callable] = None,
                  clock: Callable[[], float] = time.monotonic, first_round: Optional[Callable] = None,
                  stats: Optional[StreamStats] = None, on_spent: Optional[Callable] = None) -> int:
    """Run every search as a stream of its own until each is spent; returns the batches told.

    Stops as ``strategies.driver.drive`` does (budget per shape with its history, a strategy with
    nothing left, a batch that brought nothing back, ``time_limit``: under it nothing is asked
    ahead of the first results, and a batch only where an evaluation is expected to fit).
    ``ahead``: batches in flight per shape (a strategy without ``asks_ahead``: one); a callable is
    asked before each ask (the devices are learned from the agents' first round: a shape with
    seeds asks past its batch 2 only once a batch is back, so on one node it gives one value to
    all those asks).
    ``first_round(searches) -> [(ShapeSearch, Batch)]``: batches known before any space is pruned
    (the warm start's seeds), each shape's submitted as its batch 1 before the pruning; that
    shape asks its batch 2 after the pruning, and up to ``ahead`` once any batch is told.
    ``on_round(number, fidelity, [(ShapeSearch, Batch)])`` after each batch is told;
    ``on_spent(ShapeSearch)`` once for each shape whose search is spent, as it is."""
    stats = stats if stats is not None else StreamStats()
    start = clock()
    arrivals: "queue.Queue" = queue.Queue()
    streams = {id(s): ShapeStream(s) for s in searches if s.stopped is None}
    flying = [0]

    def launch(st: ShapeStream, batch, fidelity: int) -> None:
        st.asked += 1
        flight = Flight(st.asked, fidelity, batch)
        st.search.pending += [dict(c) for c in batch.configs]
        flight.handle = evaluator.submit([(st.search, batch)], fidelity)
        st.flights.append(flight)
        flying[0] += 1
        stats.in_flight_max = max(stats.in_flight_max, flying[0])
        threading.Thread(target=_wait, args=(evaluator, st, flight, arrivals), daemon=True,
                         name="stream-wait").start()

    if first_round is not None:
        for s, batch in first_round([st.search for st in streams.values()]):
            if batch.configs and id(s) in streams:
                launch(streams[id(s)], batch, 1)
    live = [st.search for st in streams.values()]
    began = clock()
    prepare_problems([s.strategy for s in live], space, [s.is_pruned for s in live])
    apply_preferences(live, space)
    stats.pruning += clock() - began
    seeded = [st for st in streams.values() if st.flights]
    ask = lambda st, most=None: _ask(st, space, budget, time_limit, ahead, clock() - start, stats,  # noqa: E731
                                     streams, launch, most=most)
    spent = set()

    def if_spent(st: ShapeStream) -> None:
        if on_spent is not None and st.search.stopped is not None and not st.flights and id(st) not in spent:
            spent.add(id(st))
            on_spent(st.search)

    # the shapes' first batches in turn (one each, then a second each, ...): none waits behind another's
    _in_turn([st for st in streams.values() if not st.flights], ask)
    for st in seeded:  # batch 2 beside the seeds: under any depth of at least AHEAD_MIN it sees nothing told
        ask(st, most=AHEAD_MIN - 1)
    for st in streams.values():
        if_spent(st)
    while True:
        if not flying[0]:
            break
        began = clock()
        st, flight, waited, error = arrivals.get()
        stats.waited += clock() - began
        if hasattr(evaluator, "blocked"):
            evaluator.blocked(clock() - began)
        if error is not None:
            raise error
        flight.results = evaluator.finish(flight.handle, waited)[0]
        flight.back = True
        while st.flights and st.flights[0].back:  # told in the order asked
            done = st.flights.pop(0)
            flying[0] -= 1
            del st.search.pending[:len(done.batch.configs)]
            _tell([(st.search, done.batch)], [done.results], space)
            stats.told += 1
            if on_round is not None:
                on_round(stats.told, done.fidelity, [(st.search, done.batch)])
            # asked right after each batch is told: batch k sees exactly batches 1..k - ahead
            ask(st)
        if seeded:  # the first batch told: the agents said how many devices measure, the rest ask their depth
            _in_turn([x for x in seeded if x is not st], ask)
            seeded = []
        if_spent(st)
    for st in streams.values():
        if_spent(st)
    return stats.told


def _in_turn(sts: list, ask: Callable) -> None:
    """Ask each stream one batch at a time in turn until none has room: no stream's batches
    queue behind another's whole depth."""
    while sts:
        sts = [st for st in sts if ask(st, most=1)]


def _wait(evaluator, st: ShapeStream, flight: Flight, arrivals: "queue.Queue") -> None:
    try:
        arrivals.put((st, flight, evaluator.wait(flight.handle), None))
    except BaseException as exc:  # raised on the search's thread
        arrivals.put((st, flight, None, exc))


def _ask(st: ShapeStream, space: dict, budget, time_limit, ahead, elapsed: float, stats: StreamStats,
         streams: dict, launch: Callable, most: Optional[int] = None) -> int:
    """Ask ``st``'s strategy for batches while it has room in flight (``most`` at most); returns
    how many it asked."""
    s = st.search
    asked = 0
    stats.ahead = max(1, int(ahead() if callable(ahead) else ahead))
    room = stats.ahead if getattr(s.strategy, "asks_ahead", False) else 1
    if time_limit is not None and not stats.told:
        room = 1  # nothing is known of the pace yet
    while s.stopped is None and len(st.flights) < room and (most is None or asked < most):
        limit = batch_limit(s, budget)
        if not limit:
            return asked
        if time_limit is not None and stats.told:
            done = sum(len(x.search.new) for x in streams.values())
            fit = _evaluations_that_fit(elapsed, time_limit, done)
            if fit is not None:  # the evaluations that fit, shared so that the live shapes end even
                live = [x.search for x in streams.values() if x.search.stopped is None]
                share = (sum(len(x.new) for x in live) + fit) // max(1, len(live))
                room_left = share - len(s.new) - len(s.pending)
                if room_left < 1:
                    if not s.pending:
                        s.stopped = STOP_TIME
                    return asked
                limit = min(limit, room_left)
        batch = s.strategy.next_batch(s.history + [Trial(c, PENDING) for c in s.pending], space, s.is_pruned,
                                      limit, budget)
        if not batch.configs:
            if not s.pending:
                s.stopped = STOP_FINISHED
            return asked
        if len(batch.configs) > limit:
            from .strategies.base import StrategyError

            raise StrategyError("%s overran its limit" % s.strategy.name)
        launch(st, batch, batch.fidelity)
        asked += 1
    return asked


class SessionRounds:
    """The evaluator of ``drive_streams`` for a ``rounds.Session`` with long-lived agents: each
    batch a round of its own (``Session.submit``), the library reference joining each shape's
    first round (``library``: the shapes that still need it)."""

    def __init__(self, session, library=()):
        from .library import is_library_id

        self.session = session
        self.library = {s.id for s in library}
        self.is_library_id = is_library_id
        self.lock = threading.Lock()

    def submit(self, asks, fidelity):
        pairs = [(cfg, s.shape) for s, b in asks for cfg in b.configs]
        with self.lock:
            shapes = [s.shape for s, _ in asks if s.shape.id in self.library]
            self.library -= {s.id for s in shapes}
        return self.session.submit(pairs, fidelity, shapes), asks[0][0].shape.id

    def wait(self, handle):
        return self.session.wait(handle[0], count=False)  # many wait at once: ``blocked`` counts

    def blocked(self, seconds: float) -> None:
        """The search's thread waited ``seconds`` for results with nothing to ask."""
        if self.session._agents is not None:
            self.session._agents.stats.wait_seconds += seconds

    def finish(self, handle, waited):
        rows = self.session.finish(waited)
        return [[r for r in rows if r.get("shape_id") == handle[1] and not self.is_library_id(r.get("variant_id"))]]
