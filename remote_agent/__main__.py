"""python3 -m remote_agent {run,start,follow,status,serve,bridge,check} ... (standard library only)."""

import argparse
import json
import sys

from . import measure
from .agent import Agent, AgentError


def main(argv=None):
    parser = argparse.ArgumentParser(prog="remote_agent", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a bundle's jobs and append results")
    start = sub.add_parser("start", help="like run, detached from this session (or attach to the run in progress)")
    run.add_argument("--bundle", required=True, help="folder with manifest.json")
    run.add_argument("--results", required=True, help="results CSV to append to (resumed if present)")
    run.add_argument("--warmup", type=int, default=2)
    run.add_argument("--iters", type=int, default=10, help="at least this many samples per job")
    run.add_argument("--max-noise", type=float, default=measure.DEFAULT_MAX_NOISE,
                     help="stop sampling when the relative noise of the deciding estimator settles under this (0.01: 1%%)")
    run.add_argument("--max-time", type=float, default=None,
                     help="seconds of sampling per job at most (after --iters; default %g with the min estimator, "
                          "%g with the median)" % (measure.MIN_MAX_TIME, measure.DEFAULT_MAX_TIME))
    run.add_argument("--estimator", choices=measure.ESTIMATORS, default=None,
                     help="the time that decides: min or median of the samples (default: min on CPU targets, "
                          "median on GPU targets)")
    run.add_argument("--pin-cpu", default="auto",
                     help="CPU: run each variant on this core (auto: the last one allowed; none: no pinning)")
    run.add_argument("--interleave", type=int, default=measure.DEFAULT_INTERLEAVE,
                     help="CPU: measure up to this many jobs of one shape together, one sample of each in "
                          "turn, so that a slow stretch of the machine slows them alike (1: one job after another)")
    run.add_argument("--race", type=float, default=0.0,
                     help="CPU (min estimator): stop timing a config once its minimum, less its noise, is more "
                          "than this above its shape's best so far (0.25: 25 %%); 0: off")
    run.add_argument("--timeout", type=float, default=60.0, help="seconds per variant and shape")
    run.add_argument("--all", dest="rerun_all", action="store_true", help="re-run rows already measured")
    run.add_argument("--profiler", default=None, help="override the target's profiler")
    run.add_argument("--run-under", default=None, help="wrap every execution (e.g. qemu-riscv64 ...)")
    run.add_argument("--devices", default=None, help="GPU indices, e.g. 0,1 (default: all)")
    run.add_argument("--min-time-ms", type=float, default=100.0, help="GPU: measure at least this long")
    run.add_argument("--select", default=None, help="only these job indices, e.g. 0-99,120 (a fleet's share)")
    run.add_argument("--pushed", action="store_true",
                     help="the bundle was pushed: check the push's marker against manifest.json and this agent's "
                          "own files before running")
    start.add_argument("--results", required=True)
    start.add_argument("run_args", nargs=argparse.REMAINDER, help="arguments for run (after --)")
    for name in ("follow", "status"):
        sub.add_parser(name, help="%s a detached run" % name).add_argument("--results", required=True)
    from . import serve

    serve.add_arguments(sub)
    check = sub.add_parser("check", help="print what this machine has, as JSON")
    check.add_argument("--events", default="", help="perf events to test, comma-separated")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            from .check import facts

            print(json.dumps(facts([e for e in args.events.split(",") if e]), indent=1))
            return 0
        if args.command in ("serve", "bridge"):
            return serve.main(args)
        if args.command in ("start", "follow", "status"):
            from . import detach

            if args.command == "status":
                print(json.dumps(detach.status(args.results)))
                return 0
            if args.command == "follow":
                return detach.follow(args.results)
            run_args = [a for a in args.run_args if a != "--"] + ["--results", args.results]
            return detach.start(run_args, args.results)
        Agent(args.bundle, args.results, args).run()
        return 0
    except AgentError as exc:
        print("agent: error: %s" % exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("agent: interrupted; rows measured so far are saved", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
