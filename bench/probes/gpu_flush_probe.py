"""The L2 flush, written or read: how much it moves the agent's times, and whether it changes which
config wins (run on the GPU node, after the agent, with torch and triton there).

    python3 -m bench.probes.gpu_flush_probe --bundle B --results results.csv [--per-shape 8] [--out f.json]

For each shape it takes ``--per-shape`` ok variants of the agent's CSV (fastest to slowest) and
torch.matmul, and times each with the agent's own method (timing_fidelity.AgentMethod: the events
profiler, measured again where the GPU throttled) twice under each flush, in palindromic order
(write, read, read, write) so that a steady clock drift weighs on both alike:
  * write: a driver memset of 256 MiB, as do_bench's ``cache.zero_()`` (the agent's default);
  * read: remote_agent/runners/gpu_flush.py's PTX kernel reads the same buffer.
It prints each row's times and write / read, and per shape whether the fastest variant and the
order of all of them are the same under both.
"""

import argparse
import json

from bench._gpu_common import (Launcher, geomean, job_grid, load_bundle, make_inputs, open_driver,
                         palindromic_windows, read_results)
from bench.timing_fidelity import AgentMethod, pick


def alternate(write, read, time_with):
    """Two palindromic rounds (write, read, read, write): [[write ms, ...], [read ms, ...]]."""
    return palindromic_windows([lambda: time_with(write), lambda: time_with(read)], 2)


def time_shape(torch, api, manifest, bundle, s, variants, variant_ids, write, read):
    """The rows of one shape: each variant's cubin and torch.matmul, under both flushes."""
    a, b, a_log, b_log = make_inputs(s)
    c = torch.empty((s["M"], s["N"]), dtype=a.dtype, device="cuda")
    rows = []
    for vid in variant_ids:
        launch = Launcher(api, bundle, variants[vid], s, job_grid(manifest, vid, s["id"]), a, b, c)
        launch()
        torch.cuda.synchronize()
        rows.append(row_of(s["id"], vid, *alternate(write, read, lambda m: m.median_ms(launch))))
    stream = torch.cuda.ExternalStream(api.stream) if api.stream else torch.cuda.current_stream()

    def cublas(method):  # on the agent's stream, as the agent times lib:torch.matmul
        with torch.cuda.stream(stream):
            ms = method.median_fn_ms(lambda: torch.matmul(a_log, b_log, out=c))
        torch.cuda.synchronize()
        return ms

    rows.append(row_of(s["id"], "torch.matmul", *alternate(write, read, cublas)))
    for r in rows:
        print("%-26s %-12s %10.2f %10.2f %7.3f" % (r["shape"], r["variant"], r["write"] * 1e3, r["read"] * 1e3,
                                                   r["ratio"]))
    del a, b, a_log, b_log, c
    torch.cuda.empty_cache()
    return rows


def row_of(shape_id, variant, write_ms, read_ms):
    w, r = sum(write_ms) / len(write_ms), sum(read_ms) / len(read_ms)
    return {"shape": shape_id, "variant": variant, "write_ms": write_ms, "read_ms": read_ms, "write": w, "read": r,
            "ratio": w / r}


def shape_summary(rows):
    """Whether the two flushes rank a shape's rows alike, and what the write flush's pick costs
    when timed with the read flush."""
    by_write = sorted(rows, key=lambda r: r["write"])
    by_read = sorted(rows, key=lambda r: r["read"])
    return {"write_over_read": geomean([r["ratio"] for r in rows]), "fastest_write": by_write[0]["variant"],
            "fastest_read": by_read[0]["variant"], "pick_cost": by_write[0]["read"] / by_read[0]["read"] - 1,
            "same_order": [r["variant"] for r in by_write] == [r["variant"] for r in by_read]}


def main(argv=None):
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--per-shape", type=int, default=8)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    manifest = load_bundle(args.bundle)
    variants = {v["id"]: v for v in manifest["variants"]}
    shapes = {s["id"]: s for s in manifest["shapes"]}
    api = open_driver()
    write, read = AgentMethod(api, flush_mode="write"), AgentMethod(api, flush_mode="read")
    if read.l2_flush.mode != "read":
        raise SystemExit("gpu_flush_probe: %s" % read.l2_flush.fallback)
    rows = []
    print("%-26s %-12s %10s %10s %7s" % ("shape", "variant", "write_us", "read_us", "w/r"))
    picked = pick(read_results(args.results), args.per_shape)
    for sid in sorted({r["shape_id"] for r in picked}):
        rows += time_shape(torch, api, manifest, args.bundle, shapes[sid], variants,
                           [r["variant_id"] for r in picked if r["shape_id"] == sid], write, read)
    summary = {sid: shape_summary([r for r in rows if r["shape"] == sid]) for sid in sorted({r["shape"] for r in rows})}
    for sid, m in summary.items():
        print("%s: write / read geomean %.3f; fastest %s (write), %s (read)%s; %s" % (
            sid, m["write_over_read"], m["fastest_write"], m["fastest_read"],
            "" if m["fastest_write"] == m["fastest_read"] else
            ", the write flush's pick %.1f %% slower under the read flush" % (100 * m["pick_cost"]),
            "same order" if m["same_order"] else "order differs"))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
