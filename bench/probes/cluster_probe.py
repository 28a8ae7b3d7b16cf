"""Cluster probe: the harness's TMA matmul launched as 2-CTA clusters (Triton's ``num_ctas=2``: one
program's tile split over two CTAs of a cluster) against one CTA a program, and torch.matmul
(cuBLAS), on the prefill shapes (run on the GPU node; about 2 minutes on an H200).

    python3 -m bench.probes.cluster_probe [--out clusters.json] [--budget-s 150]

The kernel's source and the launch come from bench/probes/streamk_probe.py (Triton's own JIT, the agent's
workspace); a persistent grid is min(tiles, SMs / num_ctas) programs. Every launch is checked
against torch (rel. error under 1e-2). Timing: triton.testing.do_bench, median. Prints per shape
cuBLAS's time and per config the times with num_ctas 1 and 2 (or why a launch failed), then the
best of each as cuBLAS/Triton ratios and their geomeans. The harness does not launch clusters
(remote_agent launches one CTA a program): this measures whether it should.
"""

import argparse
import json
import os
import sys
import time

from bench._gpu_common import geomean
from bench.probes import streamk_probe as sk

CONFIGS = [  # TMA tiles (GROUP_M 8): persistent and one program a tile
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, PERSISTENT=1),
    dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3, PERSISTENT=1),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, PERSISTENT=1),
    dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, PERSISTENT=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, PERSISTENT=0),
    dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3, PERSISTENT=0),
]


class ClusterProbe(sk.Probe):
    def launch_args(self, cfg, s, a, b, c):
        grid, args, kwargs, locks = super(ClusterProbe, self).launch_args(dict(cfg, STREAM_K=0), s, a, b, c)
        ctas = cfg["num_ctas"]
        tiles = sk.cdiv(s["M"], cfg["BLOCK_M"]) * sk.cdiv(s["N"], cfg["BLOCK_N"])
        programs = min(tiles, self.programs // ctas) if cfg["PERSISTENT"] else tiles
        kwargs.update(PERSISTENT=cfg["PERSISTENT"], num_ctas=ctas)
        return (programs, 1, 1), args, kwargs, locks


def label(cfg):
    return "%s %s" % (sk.name(cfg), "persistent" if cfg["PERSISTENT"] else "a tile a program")


def probe_shape(probe, s):
    torch = probe.torch
    a, b, a_log, b_log = probe.inputs(s)
    ref = torch.matmul(a_log, b_log)
    t_lib = probe.time_ms(lambda: torch.matmul(a_log, b_log))
    print("\n%s  %s\n  torch.matmul %.4f ms" % (s["id"], s.get("why", ""), t_lib))
    rows = []
    for base in CONFIGS:
        shown = []
        for ctas in (1, 2):
            cfg = dict(base, num_ctas=ctas, STREAM_K=0)
            try:
                ms, err, problem = probe.run_config(cfg, s, a, b, ref)
            except Exception as exc:  # a compile or launch error: say it, keep going
                ms, err, problem = None, None, "%s: %s" % (type(exc).__name__, (str(exc).splitlines() or [""])[0][:160])
            rows.append({"config": cfg, "ms": ms, "rel_err": err, "problem": problem})
            shown.append("%.4f" % ms if ms else "FAILED (%s)" % problem)
            if problem and "CUDA" in problem:
                raise RuntimeError("the CUDA context is lost after %s num_ctas=%d: %s" % (label(cfg), ctas, problem))
        print("  %-34s num_ctas 1 / 2: %s ms" % (label(base), " / ".join(shown)))
    best = {}
    for ctas in (1, 2):
        ok = [r for r in rows if r["ms"] and r["config"]["num_ctas"] == ctas]
        best[ctas] = min(ok, key=lambda r: r["ms"]) if ok else None
    entry = {"shape": s["id"], "cublas_ms": t_lib, "rows": rows,
             "ratio": {c: (t_lib / best[c]["ms"] if best[c] else None) for c in (1, 2)}}
    print("  best num_ctas 1: cuBLAS/Triton %s | best num_ctas 2: %s" % tuple(
        "%.3f (%s)" % (entry["ratio"][c], label(best[c]["config"])) if best[c] else "-" for c in (1, 2)))
    return entry


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=os.path.join(sk.ROOT, "bench", "shapes", "llm_gemms.txt"),
                   help="shapes file; its prefill shapes (M >= 512) are probed, then streamk_probe's EXTRA ones")
    p.add_argument("--out", default=None)
    p.add_argument("--budget-s", type=float, default=150.0, help="stop starting new shapes after this many seconds")
    args = p.parse_args(argv)
    import torch
    import triton

    if not torch.cuda.is_available():
        sys.exit("cluster_probe: no CUDA device")
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    probe = ClusterProbe(torch, triton, sk.load_matmul_module("triton_kernel"), "cuda", programs, False)
    shapes = sk.prefill_shapes(args.shapes) + [dict(sk.parse_shape(t), why=why) for t, why in sk.EXTRA]
    print("%s, %d SMs; torch %s, triton %s" % (torch.cuda.get_device_name(0), programs, torch.__version__,
                                               triton.__version__))
    start, entries = time.monotonic(), []
    for s in shapes:
        if time.monotonic() - start > args.budget_s:
            print("\nbudget of %.0f s spent: %d shapes left out" % (args.budget_s, len(shapes) - len(entries)))
            break
        try:
            entries.append(probe_shape(probe, s))
        except RuntimeError as exc:
            print("\nstopped: %s" % exc)
            break
    g = {c: geomean([e["ratio"][c] for e in entries if e["ratio"][c]]) for c in (1, 2)}
    print("\ngeomean cuBLAS/Triton over %d shapes: num_ctas 1 %.3f, num_ctas 2 %.3f; wall %.1f s"
          % (len(entries), g[1], g[2], time.monotonic() - start))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"programs": programs, "entries": entries, "geomean": g}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
