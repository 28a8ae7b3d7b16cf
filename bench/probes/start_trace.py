"""One-off probe (issue 43): when a GPU tune's first seconds happen on the host, function by function.

Runs ``python -m harness ARGS`` in this process with a few functions wrapped to log their start
and end (seconds since this process began) to $HARNESS_START_TRACE (default start_trace.txt):
the tune, the search, the warm-up, each round's build (and whether it waited for the warm-up),
the support kernels, the compile bundles, the pruning, the seeds' round, the Triton import.

    python3 bench/probes/start_trace.py tune matmul --target node --shapes-file F --budget 96 --min-time-ms 25
"""

import functools
import os
import sys
import threading
import time

T0 = time.monotonic()
OUT = open(os.environ.get("HARNESS_START_TRACE", "start_trace.txt"), "w", buffering=1)


def log(text):
    OUT.write("%8.3f %-14s %s\n" % (time.monotonic() - T0, threading.current_thread().name[:14], text))


def wrap(module, owner, name, label=None):
    holder = getattr(module, owner) if owner else module
    fn = getattr(holder, name)

    @functools.wraps(fn)
    def timed(*a, **k):
        log("> " + (label or name))
        try:
            return fn(*a, **k)
        finally:
            log("< " + (label or name))
    setattr(holder, name, timed)


def main():
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
    log("start")
    import harness.api.tune as tune
    import harness.rounds as rounds
    import harness.streams as streams
    import harness.build as build
    import harness.compile.triton_gpu as tg
    import harness.strategies.base as base
    log("imports done")
    wrap(tune, None, "tune")
    wrap(rounds, None, "search")
    wrap(rounds, None, "start_gpu_agent")
    wrap(rounds, None, "seeds_round")
    wrap(rounds, "Session", "warm_up")
    wrap(rounds, "Session", "_prepare", "round build")
    wrap(streams, None, "prepare_problems", "pruning")
    wrap(tg, "TritonGpuCompiler", "support", "support kernels")
    wrap(tg, None, "prestart_compile_workers")
    wrap(build, None, "compile_all")
    wrap(tune, None, "require_triton")
    sys.argv = ["harness"] + sys.argv[1:]
    from harness.cli import main as cli_main
    try:
        cli_main()
    finally:
        log("end")


if __name__ == "__main__":
    main()
