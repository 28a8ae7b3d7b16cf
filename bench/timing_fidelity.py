"""Timing fidelity: the agent's median for a set of variants against triton.testing.do_bench on the
same kernels (run on the GPU node, after the agent, with torch and triton there).

    python3 bench/timing_fidelity.py --bundle B --results results.csv [--per-shape 3] [--out f.json]

For each shape it takes the fastest, a middle and the slowest ok variant of the agent's CSV, loads
that very cubin through the agent's ctypes driver, and times it with do_bench (median, L2 cleared
by do_bench between runs) on torch's stream. Prints agent/do_bench per variant, the median and
largest deviation and how many are within 3%.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _gpu_common import (Launcher, do_bench_median_ms, job_grid, load_bundle, make_inputs,  # noqa: E402
                         open_driver, read_results)


def pick(rows, per_shape):
    by_shape = {}
    for r in rows:
        if r["status"] == "ok" and r["time_ns_median"] and not r["variant_id"].startswith("fault"):
            by_shape.setdefault(r["shape_id"], []).append(r)
    chosen = []
    for sid, rs in sorted(by_shape.items()):
        rs.sort(key=lambda r: float(r["time_ns_median"]))
        idx = sorted({0, len(rs) // 2, len(rs) - 1})[:per_shape]
        chosen += [rs[i] for i in idx]
    return chosen


def main(argv=None):
    import torch

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bundle", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--per-shape", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    manifest = load_bundle(args.bundle)
    variants = {v["id"]: v for v in manifest["variants"]}
    shapes = {s["id"]: s for s in manifest["shapes"]}
    api = open_driver()
    out = []
    print("%-28s %-12s %12s %12s %8s" % ("shape", "variant", "agent_us", "do_bench_us", "ratio"))
    for row in pick(read_results(args.results), args.per_shape):
        v, s = variants[row["variant_id"]], shapes[row["shape_id"]]
        a, b, _, _ = make_inputs(s)
        c = torch.empty((s["M"], s["N"]), dtype=a.dtype, device="cuda")
        launch = Launcher(api, args.bundle, v, s, job_grid(manifest, v["id"], s["id"]), a, b, c)
        launch()
        torch.cuda.synchronize()
        db_ms = do_bench_median_ms(launch)
        agent_ms = float(row["time_ns_median"]) / 1e6
        ratio = agent_ms / db_ms
        out.append({"shape": s["id"], "variant": v["id"], "agent_ms": agent_ms, "do_bench_ms": db_ms,
                    "ratio": ratio})
        print("%-28s %-12s %12.2f %12.2f %8.4f" % (s["id"], v["id"], agent_ms * 1e3, db_ms * 1e3, ratio))
    dev = sorted(abs(o["ratio"] - 1) for o in out)
    within = sum(d <= 0.03 for d in dev)
    summary = {"variants": len(out), "median_abs_dev": dev[len(dev) // 2] if dev else None,
               "max_abs_dev": dev[-1] if dev else None, "within_3pct": within,
               "device": torch.cuda.get_device_name()}
    if not out:
        print("timing fidelity: no ok variants in the results")
        return
    print("timing fidelity: %d variants, median |agent/do_bench - 1| = %.2f%%, max %.2f%%, %d/%d within 3%%"
          % (len(out), 100 * summary["median_abs_dev"], 100 * summary["max_abs_dev"], within, len(out)))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "rows": out}, f, indent=1)


if __name__ == "__main__":
    main()
