"""Tuned Triton matmul against torch.matmul (cuBLAS), same process, same timer (run on the GPU node).

    python3 bench/gpu_quality.py --bundle B --results results.csv [--bundle B2 --results r2.csv ...]
                                 [--tune-seconds S] [--out f.json]

1. Ceilings measured here: matrix rate (torch.matmul 8192^3 in fp16 and bf16, the faster) and
   device memory bandwidth (a 2 GiB device-to-device copy, bytes read plus written).
2. For every shape of the bundles, the tuned config as `harness tune` picks one: the variants its
   re-measure compared (winners.json beside the results: the --top fastest and the fastest seed;
   without that file the --top fastest ok variants by the agents' medians) are timed again here,
   interleaved over four palindromic rounds, and the fastest median wins (one agent median alone
   favours whichever variant had a lucky window). Then, measured afresh: the winner's cubin
   launched through the agent's ctypes driver against torch.matmul on the same inputs (same
   dtype and layout, C in the input dtype), both timed with triton.testing.do_bench (median) in
   --rounds windows each, in palindromic order (Triton, cuBLAS, cuBLAS, Triton, ...), each
   one's time the median of its windows: a GPU at its power cap changes speed by several per
   cent within a second, and one window each, one after the other, charged that to whichever
   came second; its answer is checked against torch's.
3. Prints per shape: times, cuBLAS/Triton speed ratio, each one's fraction of the roofline
   (max(FLOPs / peak, bytes / bandwidth) over its time); then the geomean ratio, the worst shape,
   the weighted speedup over cuBLAS when each shape runs the faster of the two (as the harness
   falls back to the library), what a kernel at the roofline on every shape would score (the
   ceilings: an upper bound, since the roofline counts no bytes beyond the operands), and the
   tune's wall time and configs measured per second.
Goal (issue 11): geomean >= 1.05x cuBLAS, no shape under 0.90x, weighted speedup >= 1.10x.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a script: the repository root

from bench._gpu_common import (Launcher, candidate_rows, do_bench_median_ms, geomean, interleaved_medians,  # noqa: E402
                               job_grid, load_bundle, make_inputs, open_driver, read_results, rel_err)
from remote_agent.contract import deciding_time  # noqa: E402


def ceilings():
    import torch

    peak = 0.0
    for dt in (torch.float16, torch.bfloat16):
        a = torch.rand((8192, 8192), device="cuda").to(dt)
        b = torch.rand((8192, 8192), device="cuda").to(dt)
        ms = do_bench_median_ms(lambda: torch.matmul(a, b), warmup=100, rep=500)
        peak = max(peak, 2 * 8192 ** 3 / (ms * 1e-3) / 1e12)
        del a, b
    n = 1 << 30  # 2 GiB of fp16... as bytes: 2^30 halves
    x = torch.empty(n, dtype=torch.float16, device="cuda").uniform_()
    y = torch.empty_like(x)
    ms = do_bench_median_ms(lambda: y.copy_(x), warmup=50, rep=300)
    bw = 2 * x.numel() * 2 / (ms * 1e-3) / 1e12  # TB/s, read + write
    del x, y
    torch.cuda.empty_cache()
    return peak, bw


def pick_winner(api, candidates, s, rounds=4):
    """candidates: [(bundle, manifest, row)]; the one with the fastest median of its per-round
    do_bench medians, the rounds palindromic so that every candidate sees the same clocks."""
    if len(candidates) == 1:
        return candidates[0], []
    import torch

    a, b, _, _ = make_inputs(s, seed=1)
    c = torch.empty((s["M"], s["N"]), dtype=a.dtype, device="cuda")
    launchers = []
    for bundle, manifest, row in candidates:
        v = next(v for v in manifest["variants"] if v["id"] == row["variant_id"])
        launchers.append(Launcher(api, bundle, v, s, job_grid(manifest, v["id"], s["id"]), a, b, c))
    medians, _ = interleaved_medians(launchers, rounds)
    best = min(range(len(candidates)), key=lambda i: medians[i])
    del a, b, c, launchers
    torch.cuda.empty_cache()
    return candidates[best], medians


def measure_shape(api, bundle, manifest, v, s, row, peak, bw, rounds=4):
    import torch

    a, b, a_log, b_log = make_inputs(s, seed=1)
    c = torch.empty((s["M"], s["N"]), dtype=a.dtype, device="cuda")
    launch = Launcher(api, bundle, v, s, job_grid(manifest, v["id"], s["id"]), a, b, c)
    launch()
    ref = torch.matmul(a_log, b_log)
    torch.cuda.synchronize()
    err = rel_err(c, ref)
    (t_tri, t_cub), (tri_rounds, cub_rounds) = interleaved_medians(
        [launch, lambda: torch.matmul(a_log, b_log)], rounds)
    floor_ms = max(s["flops"] / (peak * 1e12), s["bytes"] / (bw * 1e12)) * 1e3
    entry = {"shape": s["id"], "variant": v["id"], "config": v["config"], "triton_ms": t_tri,
             "cublas_ms": t_cub, "ratio": t_cub / t_tri, "triton_rounds_ms": tri_rounds,
             "cublas_rounds_ms": cub_rounds, "triton_roofline": floor_ms / t_tri,
             "cublas_roofline": floor_ms / t_cub, "rel_err": err,
             "triton_tflops": s["flops"] / (t_tri * 1e-3) / 1e12,
             "cublas_tflops": s["flops"] / (t_cub * 1e-3) / 1e12,
             "agent_ms": float(row["time_ns_median"]) / 1e6, "weight": s.get("weight", 1.0)}
    del a, b, c, ref, launch
    torch.cuda.empty_cache()
    return entry


def against_the_goal(table):
    """The set's weighted speedup over cuBLAS when each shape runs the faster of the two (the
    harness's fallback to the library), and the ceilings: the geomean ratio and the weighted
    speedup of a kernel that ran every shape at its roofline floor (cuBLAS's time times its
    fraction of the roofline). Each shape weighs its ``weight`` (1 when absent)."""
    weights = [t.get("weight", 1.0) for t in table]
    library = sum(w * t["cublas_ms"] for w, t in zip(weights, table))
    used = sum(w * min(t["triton_ms"], t["cublas_ms"]) for w, t in zip(weights, table))
    floor = sum(w * t["cublas_ms"] * t["cublas_roofline"] for w, t in zip(weights, table))
    return {"weighted_speedup": library / used if used else None,
            "ceiling_weighted": library / floor if floor else None,
            "ceiling_geomean": geomean([1.0 / t["cublas_roofline"] for t in table]) if table else None}


def main(argv=None):
    import torch

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bundle", action="append", required=True, help="repeatable, paired with --results")
    p.add_argument("--results", action="append", required=True)
    p.add_argument("--tune-seconds", type=float, default=None, help="wall time of the agent run(s)")
    p.add_argument("--top", type=int, default=3,
                   help="candidates per shape timed again to pick the winner, where the tune left no winners.json")
    p.add_argument("--rounds", type=int, default=4,
                   help="do_bench windows of each of the winner and torch.matmul, in palindromic order "
                        "(T C C T ...; default 4); each one's time is the median of its windows")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if len(args.bundle) != len(args.results):
        p.error("give one --results per --bundle")
    pairs = []
    rows = []
    per_file = []
    for bundle, results in zip(args.bundle, args.results):
        manifest = load_bundle(bundle)
        these = read_results(results)
        rows += these
        per_file.append(these)
        pairs.append((bundle, manifest, candidate_rows(these, max(1, args.top), results)))
    api = open_driver()
    torch.backends.cuda.matmul.allow_tf32 = False
    peak, bw = ceilings()
    print("device %s: measured peak %.0f TFLOP/s (torch.matmul 8192^3), bandwidth %.2f TB/s (copy)"
          % (torch.cuda.get_device_name(), peak, bw))
    table = []
    hdr = "%-24s %-11s %9s %9s %7s %7s %7s %8s  %s" % ("shape", "variant", "triton_us", "cublas_us", "ratio",
                                                       "tri_rf", "cub_rf", "rel_err", "config")
    print(hdr)
    # each shape's candidates over all the bundles given (a shape may be in several): the fastest,
    # as many as the longest list one results file gave
    chosen, most = {}, {}
    for bundle, manifest, candidates in pairs:
        for sid, these in candidates.items():
            chosen.setdefault(sid, []).extend((bundle, manifest, row) for row in these)
            most[sid] = max(most.get(sid, 0), len(these))
    for sid in chosen:
        chosen[sid] = sorted(chosen[sid], key=lambda c: deciding_time(c[2]))[:most[sid]]
    seen = []
    for bundle, manifest, best in pairs:
        for s in manifest["shapes"]:
            if s["id"] in seen:
                continue
            seen.append(s["id"])
            if s["id"] not in chosen:
                print("%-24s no ok variant" % s["id"])
                continue
            (bundle_s, manifest_s, row), rematched = pick_winner(api, chosen[s["id"]], s)
            variants = {v["id"]: v for v in manifest_s["variants"]}
            entry = measure_shape(api, bundle_s, manifest_s, variants[row["variant_id"]], s, row, peak, bw,
                                  args.rounds)
            entry["bundle"] = bundle_s
            entry["candidates"] = [{"variant": c[2]["variant_id"], "agent_ms": float(c[2]["time_ns_median"]) / 1e6,
                                    "remeasured_ms": m} for c, m in zip(chosen[s["id"]], rematched)]
            table.append(entry)
            cfg = entry["config"]
            print("%-24s %-11s %9.1f %9.1f %7.3f %7.2f %7.2f %8.1e  %s" % (
                s["id"], entry["variant"], entry["triton_ms"] * 1e3, entry["cublas_ms"] * 1e3, entry["ratio"],
                entry["triton_roofline"], entry["cublas_roofline"], entry["rel_err"],
                " ".join("%s=%s" % (k, cfg[k]) for k in cfg)))
            print("%-24s windows (us, round by round): triton %s, cublas %s" % (
                "", " ".join("%.1f" % (t * 1e3) for t in entry["triton_rounds_ms"]),
                " ".join("%.1f" % (t * 1e3) for t in entry["cublas_rounds_ms"])))
    absent = sorted(set(chosen) - set(seen))
    if absent:
        print("%d shape(s) of the results are not in the bundles' manifests (a tune's last round describes only "
              "its own shapes; bench/candidates_bundle.py writes them all again): %s" % (len(absent), ", ".join(absent)))
    gm = geomean([t["ratio"] for t in table])
    worst = min(table, key=lambda t: t["ratio"]) if table else None
    ok = [r for r in rows if r["status"] == "ok"]
    measured = [r for r in rows if r["time_ns_median"]]
    span = 0.0  # summed per results file: the files may come from runs hours apart
    for these in per_file:
        stamps = sorted(time.mktime(time.strptime(r["timestamp"][:19], "%Y-%m-%dT%H:%M:%S"))
                        for r in these if r["time_ns_median"])
        span += (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0
    tune_s = args.tune_seconds or span or None
    goal = against_the_goal(table)
    summary = {"device": torch.cuda.get_device_name(), "peak_tflops": peak, "bandwidth_tbs": bw,
               "shapes": len(table), "geomean_ratio": gm,
               "worst": {"shape": worst["shape"], "ratio": worst["ratio"]} if worst else None,
               "goal_geomean_1.05": gm >= 1.05, "goal_min_0.90": bool(worst and worst["ratio"] >= 0.90),  # issue 11
               **goal,
               "rows": len(rows), "measured": len(measured), "ok": len(ok), "tune_seconds": tune_s,
               "configs_per_second": len(measured) / tune_s if tune_s else None}
    print("geomean cuBLAS/Triton speed ratio %.3f over %d shapes; worst %s at %.3f" % (
        gm, len(table), worst["shape"] if worst else "-", worst["ratio"] if worst else float("nan")))
    if table:
        print("weighted speedup over cuBLAS, each shape on the faster of the two: %.3fx; at the roofline on every "
              "shape (an upper bound): geomean %.3f, weighted %.3fx" % (
                  goal["weighted_speedup"], goal["ceiling_geomean"], goal["ceiling_weighted"]))
    if tune_s:
        print("tune: %d rows, %d measured (%d ok) in %.1f s = %.1f configs/s" % (
            len(rows), len(measured), len(ok), tune_s, len(measured) / tune_s))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "shapes": table}, f, indent=1)


if __name__ == "__main__":
    main()
