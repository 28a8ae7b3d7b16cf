"""Rounds: build, push, run and bring home exactly the (config, shape) pairs asked for.

A search strategy (``harness.strategies``) asks for a few configs per shape at a time.
``Session.execute(pairs)`` builds only those pairs (``BuildOptions.only_pairs``), keeps in the
manifest only the asked pairs in the asked order (plus the library reference where wanted),
pushes what the remote lacks, runs them and returns the results rows of this round. The agent
runs with ``--all``: the manifest holds nothing else, so a pair asked again (a halving rung, a
winner re-measure) is measured again instead of skipped, and the rows are appended.

``search`` sets up one strategy per shape, resumed from the rows already in the results CSV, and
hands them to the one search loop, ``strategies.driver.drive``, with ``Session.execute`` as its
evaluator (one build, push and run per round for all shapes). With long-lived agents a round is
``submit``-ted and built in a thread of its own while earlier rounds build or are measured (as
many rounds in flight as there are measuring devices, plus one), and ``collect``-ed later; the
rounds reach the agents in the order they were asked. On a GPU target with long-lived agents each
shape's search is a stream of its own instead (``harness.streams``): each batch a round of one
shape, sent as soon as it is built. The winners' re-measure that follows (or, with streams,
starts as each shape's search ends) is ``harness.remeasure``'s.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from remote_agent.contract import OK, PRUNED

from . import state, ui
from .compile import cache
from .errors import HarnessError
from .library import is_library_id
from .targets import count_devices


@dataclass
class Session:
    """Where rounds are built and run: a project root, a target and a kernel."""

    root: Path
    target: object
    kernel: object
    shapes: list
    build_options: object  # harness.build.BuildOptions (only_pairs is set per round)
    run_options: object  # harness.run.RunOptions (iters scaled by fidelity, rerun_all set)
    library: bool = False
    quiet: bool = False
    rounds: int = 0
    long_lived: bool = False  # rounds go to agents kept up across rounds (harness.agent_session)
    in_flight: int = 0  # long_lived: rounds in flight at most (building, queued, measured); 0: devices + 1
    streams: bool = False  # each shape's search a stream of its own (harness.streams): rounds sent as built
    remeasure_max_time: Optional[float] = None  # CPU: seconds of sampling per re-measured job (None: the run's)
    build_seconds: float = 0.0  # building rounds (wall time while at least one was building)
    run_seconds: float = 0.0  # without long_lived: running rounds (agent start, push, run, fetch)
    _transport: object = None
    _agents: object = None
    _builds: object = None  # long_lived: the threads that build rounds (harness.rounds.Builds)
    stream_stats: object = None  # streams: harness.streams.StreamStats of the search
    _finish_lock: object = dataclasses.field(default_factory=threading.Lock)

    @property
    def results_path(self) -> Path:
        from .run import local_results_path

        return local_results_path(self.root, self.target.name, self.kernel.name)

    def rows(self) -> list:
        from .strategies import read_rows

        return read_rows(self.results_path)

    # ---- the remote ------------------------------------------------------------------------
    def transport(self):
        if self._transport is None:
            from .transport import for_target

            hosts = self.target.host_list() if hasattr(self.target, "host_list") else []
            if len(hosts) > 1:  # a fleet: rounds and re-measures run on its first machine
                self._transport = for_target(self.target, *hosts[0]).open()
            else:
                self._transport = for_target(self.target).open()
        return self._transport

    def close(self) -> None:
        if self._builds is not None:
            self._builds.close()
            self._builds = None
        if self._agents is not None:
            self._agents.close()
            self._agents = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def sync(self) -> int:
        """Bring home rows the remote has and this machine lacks (resume). Returns new rows."""
        if not self.target.is_remote:
            return 0
        _, facts = state.get(self.root, self.target.name)
        if not (facts.get("pushed") or facts.get("results_remote")):
            return 0  # nothing was ever sent there from this project
        from .transport.fetch import fetch_and_merge

        return fetch_and_merge(self.transport(), self.target.name, self.kernel.name, self.results_path)

    # ---- one round -----------------------------------------------------------------------
    def execute(self, pairs: list, fidelity: int = 1, library_shapes=(), pin: bool = False) -> list:
        """Build, push, run and fetch the (config, Shape) ``pairs`` (in that order) and the
        library reference for ``library_shapes``; returns this round's results rows. ``pin``:
        on one device of one machine, each shape's pairs measured in the order given, and a pair
        (None, Shape) the place of the library's job among them (a winners' re-measure)."""
        return self.collect(self.submit(pairs, fidelity, library_shapes, pin))

    def warm_up(self, config_names: list):
        """Start the agents and their GPU workers now, with a round of no jobs (every shape and
        the support kernels, built before any config): a worker's start (the driver, torch, the
        reference kernel's self-check: seconds, more with several devices) then runs beside the
        first configs' compiles instead of after them. ``config_names``: the space's parameters
        (the results file's columns, as every round's). Its handle, for ``collect`` (a thread may
        wait for it); None without long-lived agents."""
        if not self.long_lived:
            return None
        if self._builds is None:
            self._builds = Builds(self, ordered=not self.streams)
        return self._builds.submit([], (), self._round_options(1), False, warm=list(config_names))

    def submit(self, pairs: list, fidelity: int = 1, library_shapes=(), pin: bool = False, timing=None):
        """Start the round: with ``long_lived``, built in a thread and handed to the long-lived
        agents (returns at once; ``collect`` brings its rows); otherwise built and run to the end
        here. ``timing``: the round's run options where they are not the search's (a winners'
        re-measure); any thread may submit."""
        run_options = self._round_options(fidelity, timing)
        if pin:  # a winners' re-measure times every finalist in full: no racing
            run_options.race = 0.0
        if self.long_lived:
            if self._builds is None:
                self._builds = Builds(self, ordered=not self.streams)
            return self._builds.submit(pairs, library_shapes, run_options, pin)
        began = time.monotonic()
        prepared = self._prepare(pairs, library_shapes, listed=pin)
        self.build_seconds += time.monotonic() - began
        if prepared is None:
            return []
        bundle, manifest = prepared
        self.rounds += 1
        if pin and run_options.devices:
            run_options.devices = str(run_options.devices).split(",")[0]
        began = time.monotonic()
        try:
            return self._run_round(bundle, manifest, run_options)
        finally:
            self.run_seconds += time.monotonic() - began

    def _round_options(self, fidelity: int, timing=None):
        """The run options of a round of ``fidelity`` (taken when it is submitted), from
        ``timing`` or the search's."""
        base = timing or self.run_options
        run_options = dataclasses.replace(base, iters=int(base.iters * fidelity), min_time_ms=base.min_time_ms * fidelity,
                                          max_time=base.max_time * fidelity, rerun_all=True)
        if run_options.devices is None:
            run_options.devices = getattr(self.target, "devices", None)
        return run_options

    def collect(self, handle) -> list:
        """The rows of a submitted round."""
        return self.finish(self.wait(handle))

    def wait(self, handle, count: bool = True):
        """Block until a submitted round is measured (any thread may wait; ``count``: the wait
        counts as the search blocked on results); ``finish`` takes what it returns."""
        if isinstance(handle, list):
            return handle
        ticket = self._builds.sent(handle)
        if ticket is None:
            return []
        return ticket, self.agents().wait(ticket, count=count)

    def finish(self, waited) -> list:
        """The rows of a round ``wait`` returned, merged into the results file and recorded
        (one thread at a time: the search's and the re-measure's threads finish rounds)."""
        if isinstance(waited, list):
            return waited
        from .build import _bundle_lock

        ticket, replies = waited
        with self._finish_lock:  # the search's thread and the re-measure's threads
            rows = self.agents().take(ticket, replies, self.results_path)
            with _bundle_lock:  # rounds being built record their bundle in the same state file
                state.record(self.root, self.target.name, kernel=self.kernel.name,
                             results_remote=self.target.is_remote)
        return rows

    def depth(self) -> int:
        """Rounds in flight at most: ``in_flight``, else one per measuring device plus one (so
        that every device has a round queued while the next is built)."""
        return self.in_flight or self.measuring_devices() + 1

    def pinned_devices(self) -> int:
        """Devices a pinned round (a winners' re-measure) may spread over: those of the first
        machine (pinned rounds run there), one where a round runs an agent of its own."""
        if not self.long_lived:
            return 1
        per_machine = self.measuring_devices()
        if self._agents is not None and self._agents.stats.devices:
            first = self._agents.lanes[0].label
            return max(1, self._agents.stats.devices.get(first, 1))
        hosts = self.target.host_list() if self.target.is_remote and hasattr(self.target, "host_list") else []
        return max(1, per_machine // max(1, len(hosts)))

    def measuring_devices(self) -> int:
        """Devices that measure rounds: those the agents reported (after the first round), else
        the target's ``devices`` (one where it lists none) on each machine."""
        if self._agents is not None and self._agents.stats.devices:
            return sum(self._agents.stats.devices.values())
        per_machine = count_devices(self.run_options.devices or getattr(self.target, "devices", None))
        hosts = self.target.host_list() if self.target.is_remote and hasattr(self.target, "host_list") else []
        return per_machine * max(1, len(hosts))

    def timing(self) -> dict:
        """Where the time went so far (``ui.throughput_line``)."""
        out = {"build": self.build_seconds, "waited": self.run_seconds}
        if self._agents is not None:
            st = self._agents.stats
            out.update(waited=st.wait_seconds, measure=st.measure_seconds, machines=len(self._agents.lanes),
                       busy=dict(st.busy_seconds), agent_starts=st.agent_starts, start=st.start_seconds,
                       push=st.push_seconds, restarts=st.restarts)
        else:
            out.update(measure=self.run_seconds)
        if self.stream_stats is not None:  # each shape a stream (harness.streams)
            st = self.stream_stats
            out.update(pruning=st.pruning, ahead=st.ahead, in_flight_max=st.in_flight_max)
        return out

    def agents(self):
        """The long-lived agents of this tune: one per machine (every host of a fleet)."""
        if self._agents is None:
            from .agent_session import AgentSession
            from .transport import for_hosts

            if self.target.is_remote:
                transports = [t.open() for t in for_hosts(self.target)]
            else:
                from .transport.local import LocalTransport

                transports = [LocalTransport(self.target)]
            self._agents = AgentSession(self.root, self.target, self.kernel.name, transports,
                                        standby=standby_spec(self.target, self.run_options.devices))
        return self._agents

    def adopt(self, agents) -> None:
        """Take the agents ``start_gpu_agent`` started (None: none were)."""
        if agents is not None and self.long_lived and self._agents is None:
            self._agents = agents

    def _prepare(self, pairs: list, library_shapes=(), listed: bool = False, warm: Optional[list] = None):
        """Build the round's configs; the bundle's manifest then holds only the asked pairs in
        the asked order (and the library reference where wanted). ``listed``: the manifest's
        ``order`` tells the agent to measure each shape's jobs in that order, a pair (None,
        Shape) placing the library's job. ``warm``: the space's parameter names of a round of no
        configs, every shape and the support kernels (``warm_up``). (bundle, manifest) or None
        when nothing is left to run."""
        from .build import compile_bundle, save_bundle
        from .bundle import bundle_dir
        from .library import add_library
        from .strategies import key

        asked = pairs
        library_shapes = list(library_shapes) + [s for cfg, s in asked if cfg is None and s not in library_shapes]
        pairs = [(cfg, s) for cfg, s in asked if cfg is not None]
        configs, seen = [], set()
        for cfg, _ in pairs:
            if key(cfg) not in seen:
                seen.add(key(cfg))
                configs.append(dict(cfg))
        wanted = {s.id for _, s in pairs} | {s.id for s in library_shapes} | ({s.id for s in self.shapes} if warm else set())
        shapes = [s for s in self.shapes if s.id in wanted]
        if not configs and not warm:
            return None
        options = dataclasses.replace(self.build_options, only_pairs=[(cfg, s.id) for cfg, s in pairs],
                                      progress=self.build_options.progress and not self.long_lived,
                                      support_dtypes=tuple(sorted({s.dtype for s in self.shapes})))
        manifest = compile_bundle(self.kernel, self.target, shapes, self.root, options).manifest
        bundle = bundle_dir(self.root, self.target.name, self.kernel.name)
        variants = {v.id: v for v in manifest.variants}
        planned = {(key(variants[p.variant].config), p.shape): p for p in manifest.jobs + manifest.failed}
        jobs, failed, library_at = [], [], {}
        for cfg, shape in asked:
            if cfg is None:  # the library's job comes after the shape's jobs asked so far
                library_at[shape.id] = len([j for j in jobs if j.shape == shape.id])
                continue
            pair = planned.get((key(cfg), shape.id))
            if pair is None:
                continue  # pruned by the build's own rules for this shape
            # a failed compile stays a pair of the round: the agent records its row
            (jobs if variants[pair.variant].status == OK else failed).append(pair)
        used = {p.variant for p in jobs + failed}
        manifest.jobs, manifest.failed, manifest.pruned = jobs, failed, []
        if warm:
            manifest.config_names = list(warm)
        manifest.variants = [v for v in manifest.variants if v.id in used]
        manifest.shapes = [s for s in manifest.shapes if s.id in wanted]
        library_ids = []
        if self.library and library_shapes:
            library_ids = add_library(self.kernel, self.target, library_shapes, manifest, bundle,
                                      compile_timeout=self.build_options.compile_timeout,
                                      frontend=self.build_options.frontend, from_ir=self.build_options.from_ir,
                                      say=lambda line: ui.console.print(line))
        if listed:
            manifest.order = listed_order(jobs, library_ids, library_at)
        save_bundle(manifest, self.root, self.target)  # what a GPU worker started later reads
        if not manifest.jobs and not any(v.status != OK for v in manifest.variants) and not warm:
            return None
        return bundle, manifest

    def _run_round(self, bundle, manifest, run_options) -> list:
        """The round with an agent started for it (without ``long_lived``)."""
        before = len(self.rows())
        with _quiet(self.quiet):
            if self.target.is_remote:
                from .push import push
                from .transport.fetch import fetch_and_merge
                from .run import run_remote

                transport = self.transport()
                push(bundle, manifest, transport)
                run_remote(self.target, self.kernel.name, run_options, transport)
                fetch_and_merge(transport, self.target.name, self.kernel.name, self.results_path)
            else:
                from .run import run_local

                run_local(self.root, self.target, self.kernel.name, run_options)
        state.record(self.root, self.target.name, kernel=self.kernel.name, results_remote=self.target.is_remote)
        return self.rows()[before:]


class Builds:
    """The rounds of a long-lived tune being built: each in a thread of its own (their compiles
    share one pool, oldest round first), handed to the agents in the order they were submitted."""

    def __init__(self, session: Session, ordered: bool = True):
        from concurrent.futures import ThreadPoolExecutor

        self.session = session
        self.ordered = ordered  # else each round goes to the agents as soon as it is built (streams)
        # a build mostly waits on its compiles (the shared compile pool): streams have many in flight
        self.pool = ThreadPoolExecutor(max_workers=8 if ordered else 64, thread_name_prefix="round")
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.last_sent = None  # the Event set once the last submitted round reached the agents
        self.warmed = None  # set once a warm-up round reached the agents: the other rounds' builds wait for it
        self.building = 0
        self.began = 0.0
        self.closed = False

    def submit(self, pairs, library_shapes, run_options, pin, warm=None):
        """A Future of the round's Ticket (None: nothing to run); any thread may submit."""
        with self.lock:
            before, sent = self.last_sent, threading.Event()
            self.last_sent = sent
            if warm is not None:
                self.warmed = sent
            return self.pool.submit(self._build_and_send, pairs, library_shapes, run_options, pin, before, sent, warm)

    def sent(self, handle):
        """The round's Ticket once it reached the agents (a build's error is raised here)."""
        return handle.result()

    def _build_and_send(self, pairs, library_shapes, run_options, pin, before, sent, warm=None):
        s = self.session
        try:
            if warm is None and self.warmed is not None:
                # the support kernels first: the GPU workers' start (the longest wait of a tune's
                # first seconds) needs them, and the configs' compiles would share the cores with
                # them, the pruning and the standby workers' torch import (tried when every compile
                # worker still imported Triton itself: the start took 1.5 s longer,
                # docs/throughput.md part six)
                self.warmed.wait()
            self._count(+1)
            try:
                prepared = s._prepare(pairs, library_shapes, listed=pin, warm=warm)
            finally:
                self._count(-1)
            if before is not None and self.ordered:
                before.wait()  # the rounds reach the agents in the order they were asked
            if prepared is None or self.closed:
                return None
            bundle, manifest = prepared
            with self.send_lock:  # one round at a time reaches the agents (the first starts them)
                s.rounds += warm is None
                return s.agents().submit(bundle, manifest, dataclasses.asdict(run_options), pin)
        finally:
            sent.set()

    def _count(self, step: int) -> None:
        """Count the builds in progress; ``build_seconds`` is the wall time with at least one."""
        with self.lock:
            now = time.monotonic()
            if step > 0 and not self.building:
                self.began = now
            self.building += step
            if not self.building:
                self.session.build_seconds += now - self.began

    def close(self) -> None:
        """No round is sent any more: the rounds not started are dropped, the compiles not
        started cancelled (a tune stopped early), and the builds in progress waited for."""
        from .build import cancel_compiles
        from .bundle import bundle_dir

        s = self.session
        self.closed = True
        self.pool.shutdown(wait=False, cancel_futures=True)
        cancel_compiles(bundle_dir(s.root, s.target.name, s.kernel.name))
        self.pool.shutdown(wait=True)


class _quiet:
    """Silence the per-round build and run lines (progress bars stay on stderr)."""

    def __init__(self, on: bool):
        self.on = on

    def __enter__(self):
        self.was = ui.out.quiet
        ui.out.quiet = self.was or self.on

    def __exit__(self, *exc):
        ui.out.quiet = self.was


# ---- history ------------------------------------------------------------------------------


def shape_history(rows: list, shape_id: str, space: dict, skip: frozenset = frozenset()) -> list:
    """The Trials of one shape a search resumes from: its rows of configs in ``space`` in file
    order, without pruned rows, and without the rows of winner re-measures (``skip``: indices)."""
    from .strategies import trials_from_rows
    from .strategies.history import in_space

    mine = [r for i, r in enumerate(rows) if i not in skip and r.get("shape_id") == shape_id
            and r.get("status") != PRUNED and in_space(r, space)]
    return trials_from_rows(mine, space, shape_id=shape_id)


# ---- search -------------------------------------------------------------------------------


def uses_streams(session: Session, time_limit: Optional[float] = None) -> bool:
    """Whether ``search`` runs each shape's search as a stream of its own (a GPU target with
    long-lived agents, no time limit: under one the shapes keep in step in rounds, since a stream
    whose first batch came back first would take the time before the others were told)."""
    return session.long_lived and getattr(session.target, "is_gpu", False) and time_limit is None


def search(session: Session, space: dict, strategy_name: str, seed: int = 0, batch_size: int = 8,
           budget: Optional[int] = None, time_limit: Optional[float] = None, on_round: Optional[Callable] = None,
           clock: Callable[[], float] = time.monotonic, warm_start: bool = True, on_spent: Optional[Callable] = None,
           **strategy_options) -> list:
    """One strategy per shape, resumed from the rows already in the results CSV and driven by
    ``strategies.driver.drive`` (budget, time limit, stop reasons); each round is one
    ``session.execute`` per fidelity asked, the library reference joining the first. With
    ``warm_start`` the first round of each shape holds the seeds of ``strategies.seeded``: the
    kernel's configs for the shape's class and the winners of the nearest shapes in
    tuned/<target>/<kernel>.json. ``on_spent(ShapeSearch)``: with streams (``uses_streams``), called
    as each shape's search is spent. Returns the ``ShapeSearch`` of every shape."""
    from .build import compiler_for
    from .bundle import bundle_dir
    from .remeasure import not_search_rows
    from .strategies import StrategyError, get_strategy, pruning_predicate
    from .strategies.driver import AskAhead, ShapeSearch, drive
    from .strategies.seeded import Seeded, read_tuned, warm_start as seeds_for

    tgt, kern = session.target, session.kernel
    compiler = compiler_for(kern, tgt, bundle_dir(session.root, tgt.name, kern.name),
                            session.build_options.frontend, from_ir=session.build_options.from_ir)
    rules = kern.rules_for(tgt)
    rows = session.rows()
    skip = not_search_rows(session.results_path)
    tuned = read_tuned(Path(session.root) / "tuned" / tgt.name / ("%s.json" % kern.name)) if warm_start else []
    built = cache.built_for(kern.name, tgt, [s.id for s in session.shapes])  # an earlier tune's configs: first
    searches = []
    for shape in session.shapes:
        try:
            strategy = get_strategy(strategy_name, seed=seed, batch_size=batch_size, **strategy_options)
        except (ValueError, TypeError) as exc:
            raise HarnessError(str(exc))
        if warm_start:
            strategy = Seeded(strategy, seeds_for(kern, tgt, shape, tuned))
        history = shape_history(rows, shape.id, space, skip)
        searches.append(ShapeSearch(strategy, pruning_predicate(rules, [shape], tgt, compiler.resource_rule),
                                    history, shape=shape, resumed=len(history), prefer=built[shape.id]))
    have_lib = {r.get("shape_id") for r in rows if is_library_id(r.get("variant_id"))}
    library_todo = [s.shape for s in searches if s.shape.id not in have_lib] if session.library else []

    def submit(asks, fidelity, run=False):
        nonlocal library_todo
        pairs = [(cfg, s.shape) for s, b in asks for cfg in b.configs]
        handle = session.execute(pairs, fidelity, library_todo) if run else \
            session.submit(pairs, fidelity, library_todo)
        library_todo = []
        return handle, asks

    def per_shape(round_rows, asks):
        return [[r for r in round_rows if r.get("shape_id") == s.shape.id and not is_library_id(r.get("variant_id"))]
                for s, _ in asks]

    if uses_streams(session, time_limit):  # each shape a stream (harness.streams)
        return _search_streams(session, searches, space, budget, time_limit, on_round, clock, warm_start,
                               library_todo, strategy_name, on_spent)
    first = None
    if session.long_lived:  # the next rounds are built while this one is measured
        evaluate = AskAhead(submit, lambda submitted: per_shape(session.collect(submitted[0]), submitted[1]),
                            depth=session.depth)
        if warm_start:  # the seeds' round is built, and the agents started, while the spaces are pruned
            first = lambda live: seeds_round(live, space, budget)  # noqa: E731
    else:
        evaluate = lambda asks, fidelity: per_shape(*submit(asks, fidelity, run=True))  # noqa: E731
    try:
        drive(searches, space, evaluate, budget, time_limit, on_round=on_round, clock=clock, first_round=first)
    except StrategyError as exc:
        raise HarnessError("strategy %s: %s" % (strategy_name, exc))
    return searches


def _search_streams(session: Session, searches: list, space: dict, budget, time_limit, on_round, clock,
                    warm_start: bool, library_todo: list, strategy_name: str, on_spent=None) -> list:
    """``search`` on a GPU target with long-lived agents: every shape's search a stream of its
    own (``streams.drive_streams``), each batch a round sent to the agents as soon as it is built;
    the seeds' batches go out before the spaces are pruned."""
    from .strategies import StrategyError
    from .streams import SessionRounds, StreamStats, ahead_for, drive_streams

    session.streams = True
    ahead = lambda: ahead_for(session.measuring_devices(), len(searches), session.in_flight)  # noqa: E731
    first = (lambda live: seeds_round(live, space, budget)) if warm_start else None  # noqa: E731
    stats = session.stream_stats = StreamStats()
    every = max(1, len(searches))
    warm = session.warm_up(list(space))  # the agents and their GPU workers start while the seeds compile
    warming = threading.Thread(target=_collect_quietly, args=(session, warm), daemon=True, name="warm-up")
    warming.start()

    def told(number, fidelity, group):  # a batch per shape: the progress lines once per shapes' worth
        if number % every == 0:
            on_round(number, fidelity, group)
        else:
            with _quiet(True):
                on_round(number, fidelity, group)

    try:
        drive_streams(searches, space, SessionRounds(session, library_todo), budget, time_limit, ahead=ahead,
                      on_round=told if on_round is not None else None, clock=clock, first_round=first,
                      stats=stats, on_spent=on_spent)
    except StrategyError as exc:
        raise HarnessError("strategy %s: %s" % (strategy_name, exc))
    warming.join()  # (done long ago; its failure, if any, the rounds met too)
    return searches


def _collect_quietly(session: Session, handle) -> None:
    """Collect a round whose failure the next rounds meet too (and raise where it counts)."""
    try:
        session.collect(handle)
    except Exception:
        pass


def standby_spec(target, devices=None) -> Optional[str]:
    """``serve --standby`` for a GPU target: its backend and the devices the rounds use."""
    backend = getattr(target, "backend", "cpu")
    if backend not in ("cuda", "hip"):
        return None
    devices = devices or getattr(target, "devices", None)
    return "%s:%s" % (backend, devices) if devices else backend


def start_gpu_agent(root: Path, target, kernel_name: str):
    """A GPU tune's first step on the node itself: its long-lived agent, started before Triton's
    import, the spaces and the first compiles, with a standby worker per device (driver, context
    and torch loaded meanwhile: seconds). The AgentSession, for ``Session.adopt``; it is stopped
    at exit if no session took it."""
    import atexit

    from .agent_session import AgentSession
    from .transport.local import LocalTransport

    agents = AgentSession(root, target, kernel_name, [LocalTransport(target)], standby=standby_spec(target))
    agents.start_here()
    atexit.register(agents.close)
    return agents


def seeds_round(searches: list, space: dict, budget: Optional[int] = None) -> list:
    """The first round of a warm-started search, known before any space is pruned: each shape's
    seeds (``strategies.seeded.Seeded``) that lie in ``space``, that its predicate keeps and that
    it has not measured, in the seeds' order, up to its batch size and budget: what the
    strategy's first ask would give. [(ShapeSearch, Batch)]."""
    from .strategies import Batch, key

    values = {name: {str(v) for v in vals} for name, vals in space.items()}
    out = []
    for s in searches:
        seeds = getattr(s.strategy, "seeds", None)
        if not seeds or not getattr(s.strategy, "asks_ahead", False):
            continue  # a strategy that waits for its results asks its seeds itself
        limit = s.strategy.batch_size
        if budget is not None:
            limit = min(limit, budget - len(s.history) - len(s.pending))
        measured = {key(t.config) for t in s.history}
        todo, seen = [], set()
        for cfg in seeds:
            if len(todo) >= limit:
                break
            if set(cfg) != set(space) or any(str(cfg[n]) not in values[n] for n in space):
                continue
            k = key(cfg)
            if k in measured or k in seen or s.is_pruned(cfg):
                continue
            seen.add(k)
            todo.append({n: _space_value(space[n], cfg[n]) for n in space})
        if todo:
            out.append((s, Batch(todo)))
    return out


def _space_value(values: list, value):
    """``value`` as the space spells it (a seed's 4 for the space's 4.0, or "4" for 4)."""
    return next((v for v in values if str(v) == str(value)), value)


def listed_order(jobs: list, library_ids: list, library_at: dict) -> dict:
    """The manifest's ``order``: {shape id: variant ids}, each shape's jobs in the order asked,
    the library's (``library_ids``) after the first ``library_at[shape id]`` of them."""
    order = {}
    for job in jobs:
        order.setdefault(job.shape, []).append(job.variant)
    for sid, at in library_at.items():
        ids = order.setdefault(sid, [])
        ids[at:at] = [lib for lib in library_ids if lib not in ids]
    return order
