"""Timing fidelity: the agent's timing against triton.testing.do_bench on the same kernels (run on
the GPU node, after the agent, with torch and triton there).

    python3 bench/timing_fidelity.py --bundle B --results results.csv [--per-shape 3] [--torch] [--out f.json]

For each shape it takes the fastest, the slowest and ok variants of the agent's CSV spread
between them, and loads that very cubin through the agent's ctypes driver. Then, in one time
window, ``--alternations`` rounds of three measurements in palindromic order (agent, do_bench,
do_bench again; then the other way round; then the next order and its reverse: over the default
six rounds each method takes each place of a round twice), so that a steady drift of clocks and
temperature, and the place of a window in its round, weigh on each alike:
  * the agent's own measurement code (remote_agent.profilers.events.EventsProfiler: warm-up,
    flushed launches, event pairs on the agent's stream, samples until remote_agent/measure.py's
    rule stops them, median), default settings (--max-noise 0.01, --max-time 0.5), measured again
    where the GPU throttled, as the worker does (runners/gpu_timing.py);
  * do_bench (median, L2 cleared between runs) on torch's stream;
  * do_bench again: the control, how well do_bench agrees with itself in the same rounds.
With ``--torch`` each shape also gets a ``torch.matmul`` row: the agent's method with
torch.matmul on the agent's stream (as the agent times lib:torch.matmul) against do_bench of
torch.matmul.
Each row prints its rounds: [agent_us do_bench_us do_bench_again_us n=samples MHz/.../MHz], the
SM clock (NVML) at the round's window boundaries, in the order the round ran.
``ratio`` is agent / do_bench in that window: the methods agree within it (goal: 2%);
``control`` is do_bench again / do_bench, the same figure for do_bench against itself. ``csv``
is the median the agent wrote during the tune over do_bench now: it adds the drift of the GPU
between the tune and this run (a GPU at its power limit runs large kernels slower once hot).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a script: the repository root

from bench._gpu_common import (Launcher, do_bench_median_ms, job_grid, load_bundle, make_inputs,  # noqa: E402
                               open_driver, palindromic_windows, read_results)
from remote_agent.runners.gpu_clocks import Clocks  # noqa: E402
from remote_agent.runners.gpu_flush import L2Flush  # noqa: E402
from remote_agent.runners.gpu_timing import timed_unthrottled  # noqa: E402


def spread(n, k):
    """k indices spread evenly from 0 to n - 1 (the fastest, the slowest and between), fewer when n < k."""
    if k <= 1 or n <= 1:
        return [0][:max(0, min(k, n))]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def pick(rows, per_shape):
    by_shape = {}
    for r in rows:
        if r["status"] == "ok" and r["time_ns_median"] and not r["variant_id"].startswith(("fault", "lib:")):
            by_shape.setdefault(r["shape_id"], []).append(r)
    chosen = []
    for sid, rs in sorted(by_shape.items()):
        rs.sort(key=lambda r: float(r["time_ns_median"]))
        idx = spread(len(rs), per_shape)
        chosen += [rs[i] for i in idx]
    return chosen


class AgentMethod(object):
    """The agent's events profiler, driven as the GPU worker drives it."""

    def __init__(self, api, min_time_ms=100.0, max_time=None, flush_mode=None):
        from remote_agent.profilers.events import EventsProfiler

        self.api = api
        facts = api.facts()
        # HARNESS_GPU_FLUSH unless told, as the worker
        self.l2_flush = L2Flush(api, facts["l2_bytes"], facts.get("sm_count"), mode=flush_mode)
        self.flush_enabled = self.l2_flush.enabled
        options = {"warmup": 2, "iters": 10, "min_time_ms": min_time_ms}
        if max_time is not None:
            options["max_time"] = max_time
        self.profiler = EventsProfiler(api, options)
        self.samples = []  # samples each measurement took (more than the first chunk: the noise did not settle)
        self.remeasured = 0  # measurements taken again because the GPU throttled
        self.clocks = Clocks()  # the SM clock (NVML) around every window, of both methods

    def flush(self):
        self.l2_flush()

    def median_ms(self, launcher):
        def launch(i, stream=None):  # on the agent's own stream, where its events are recorded
            launcher.kernel.run(launcher.grid, launcher.params, stream)

        return self._median_ms(launch)

    def _median_ms(self, launch):
        # as the GPU worker times a job: measured again where a thermal or hardware slowdown showed
        result = {}
        times = sorted(timed_unthrottled(self, launch, None, None, None, None, result)["times_ns"])
        self.samples.append(len(times))
        self.remeasured += result.get("remeasured") or 0
        return times[len(times) // 2] / 1e6

    def median_fn_ms(self, fn):
        """The same, for a Python callable (torch.matmul) that enqueues on the current stream."""
        return self._median_ms(lambda i, stream=None: fn())


def passes(row):
    """Each round of a row: agent, do_bench and do_bench again in us, how many samples the agent
    took, and the SM clock in MHz at the round's window boundaries (in the order the round ran)."""
    return " ".join("[%.1f %.1f %.1f n=%d %s]" % (a * 1e3, d * 1e3, d2 * 1e3, n,
                                                  "/".join("%.0f" % c if c else "-" for c in mhz))
                    for a, d, d2, n, mhz in zip(row["agent_ms"], row["do_bench_ms"], row["control_ms"],
                                                row["agent_samples"], row["sm_mhz"]))


def alternate(agent, agent_once, do_bench_once, n=6):
    """``n`` rounds of three windows (agent, do_bench, do_bench again) in the orders of
    ``_gpu_common.palindromic``: ({agent_ms, do_bench_ms, control_ms, sm_mhz, agent_samples}, the mean of
    each method's times). The second do_bench is the control: how well do_bench agrees with itself
    in the same rounds, the floor under any agreement of the agent with it."""
    clocks = [agent.clocks.sm_mhz()]  # and one read after each window: round r's are clocks[3r:3r + 4]
    times = palindromic_windows([agent_once, do_bench_once, do_bench_once], n,
                                after=lambda: clocks.append(agent.clocks.sm_mhz()))
    mhz = [tuple(clocks[3 * r:3 * r + 4]) for r in range(n)]
    means = [sum(t) / n for t in times]
    return ({"agent_ms": times[0], "do_bench_ms": times[1], "control_ms": times[2], "sm_mhz": mhz,
             "agent_samples": agent.samples[-n:], "control_ratio": means[2] / means[1]}, means[0], means[1])


def torch_rows(torch, api, agent, shape_ids, shapes, alternations=6):
    """torch.matmul per shape: the agent's method (on the agent's stream) against do_bench."""
    rows = []
    stream = torch.cuda.ExternalStream(api.stream) if api.stream else torch.cuda.current_stream()

    class TorchLauncher(object):
        def __init__(self, a_log, b_log, c):
            self.a, self.b, self.c = a_log, b_log, c

        def __call__(self):
            torch.matmul(self.a, self.b, out=self.c)

    for sid in shape_ids:
        s = shapes.get(sid)
        if s is None:
            continue
        _, _, a_log, b_log = make_inputs(s)
        c = torch.empty((s["M"], s["N"]), dtype=a_log.dtype, device="cuda")
        fn = TorchLauncher(a_log, b_log, c)

        def agent_once():
            with torch.cuda.stream(stream):
                ms = agent.median_fn_ms(fn)
            torch.cuda.synchronize()
            return ms

        row, agent_t, db_t = alternate(agent, agent_once, lambda: do_bench_median_ms(fn), alternations)
        rows.append(dict(row, shape=sid, variant="torch.matmul", ratio=agent_t / db_t, csv_ms=float("nan"),
                         csv_ratio=float("nan")))
        print("%-28s %-12s %10.2f %10.2f %10s %7.4f %7.4f %7s  %s" % (
            sid, "torch.matmul", agent_t * 1e3, db_t * 1e3, "-", agent_t / db_t, row["control_ratio"], "-",
            passes(rows[-1])))
    return rows


def main(argv=None):
    import torch

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bundle", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--per-shape", type=int, default=3)
    p.add_argument("--torch", action="store_true", help="also compare torch.matmul on every shape")
    p.add_argument("--max-time", type=float, default=None,
                   help="the agent method's time cap per job in seconds (default: the agent's, 0.5)")
    p.add_argument("--alternations", type=int, default=6,
                   help="rounds a row, each of agent, do_bench and do_bench again, in palindromic order "
                        "(default 6: each method in each place of a round twice); a row's ratio is the mean "
                        "of the agent's over the mean of do_bench's")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    manifest = load_bundle(args.bundle)
    variants = {v["id"]: v for v in manifest["variants"]}
    shapes = {s["id"]: s for s in manifest["shapes"]}
    api = open_driver()
    agent = AgentMethod(api, max_time=args.max_time)
    out = []
    print("%-28s %-12s %10s %10s %10s %7s %7s %7s" % ("shape", "variant", "agent_us", "dobench_us", "csv_us",
                                                      "ratio", "control", "csv"))
    for row in pick(read_results(args.results), args.per_shape):
        v, s = variants[row["variant_id"]], shapes[row["shape_id"]]
        a, b, _, _ = make_inputs(s)
        c = torch.empty((s["M"], s["N"]), dtype=a.dtype, device="cuda")
        launch = Launcher(api, args.bundle, v, s, job_grid(manifest, v["id"], s["id"]), a, b, c)
        launch()
        torch.cuda.synchronize()
        alternations, agent_t, db_t = alternate(agent, lambda: agent.median_ms(launch),
                                                lambda: do_bench_median_ms(launch), args.alternations)
        csv_ms = float(row["time_ns_median"]) / 1e6
        ratio = agent_t / db_t
        out.append(dict(alternations, shape=s["id"], variant=v["id"], ratio=ratio, csv_ms=csv_ms,
                        csv_ratio=csv_ms / db_t))
        print("%-28s %-12s %10.2f %10.2f %10.2f %7.4f %7.4f %7.4f  %s" % (
            s["id"], v["id"], agent_t * 1e3, db_t * 1e3, csv_ms * 1e3, ratio, alternations["control_ratio"],
            csv_ms / db_t, passes(out[-1])))
        del a, b, c, launch
        torch.cuda.empty_cache()
    if args.torch:
        out += torch_rows(torch, api, agent, sorted({r["shape_id"] for r in read_results(args.results)}), shapes,
                          args.alternations)
    if not out:
        print("timing fidelity: no ok variants in the results")
        return
    dev = sorted(abs(o["ratio"] - 1) for o in out)
    cdev = sorted(abs(o["csv_ratio"] - 1) for o in out if o["csv_ratio"] == o["csv_ratio"]) or [float("nan")]
    within = sum(d <= 0.02 for d in dev)
    control = sorted(abs(o["control_ratio"] - 1) for o in out)
    control_within = sum(d <= 0.02 for d in control)
    summary = {"variants": len(out), "median_abs_dev": dev[len(dev) // 2], "max_abs_dev": dev[-1],
               "within_2pct": within, "csv_median_abs_dev": cdev[len(cdev) // 2], "csv_max_abs_dev": cdev[-1],
               "csv_within_2pct": sum(d <= 0.02 for d in cdev), "device": torch.cuda.get_device_name(),
               "agent_remeasured": agent.remeasured, "agent_flush": agent.l2_flush.mode,
               "control_median_abs_dev": control[len(control) // 2], "control_max_abs_dev": control[-1],
               "control_within_2pct": control_within}
    print("timing fidelity (same window): %d variants, median |agent/do_bench - 1| = %.2f%%, max %.2f%%, "
          "%d/%d within 2%%; the agent measured again %d time(s) for a throttled GPU" % (
              len(out), 100 * dev[len(dev) // 2], 100 * dev[-1], within, len(out), agent.remeasured))
    print("control (same rounds): median |do_bench/do_bench - 1| = %.2f%%, max %.2f%%, %d/%d within 2%%" % (
        100 * control[len(control) // 2], 100 * control[-1], control_within, len(out)))
    print("tune CSV vs do_bench now: median %.2f%%, max %.2f%%, %d/%d within 2%%" % (
        100 * summary["csv_median_abs_dev"], 100 * summary["csv_max_abs_dev"], summary["csv_within_2pct"],
        len(out)))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "rows": out}, f, indent=1)


if __name__ == "__main__":
    main()
