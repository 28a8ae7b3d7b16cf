"""Energy per GEMM: the tuned Triton matmul against torch.matmul (cuBLAS) on prefill shapes,
sustained at the power cap (run on the GPU node; about 2 minutes on an H200).

    python3 -m bench.probes.gpu_energy_probe [--out energy.json] [--seconds 1.0]
    python3 -m bench.probes.gpu_energy_probe --warp-specialized --shapes 1536x6144x6144:fp16:NT ...

Why: a sustained GEMM on an H200 runs at its 700 W power cap, the SM clock well under its boost.
A kernel that spent more energy per GEMM than cuBLAS would run at a lower clock there and lose
time for that alone; one that spends more SM cycles per GEMM loses it at any clock. This probe
tells the two apart (docs/notes/2026-11-26-gpu-runs.md, "Energy and cycles at the power cap").

Per shape, the config the default search picked in the H200 runs (CONFIGS) and torch.matmul, in
palindromic order (Triton, cuBLAS, cuBLAS, Triton): each one captured in a CUDA graph of
back-to-back launches (no L2 flush, no host time between launches), then
replayed for a quarter of --seconds, then for --seconds: the time per GEMM (events around all),
the energy per GEMM (NVML's energy counter, mJ), the mean power, the mean SM clock (NVML, read
after every 4 replays) and the SM cycles per GEMM at that clock, which say how much of a time
ratio is the clock the power cap allows and how much the kernel's own work.
Every launch is checked against torch first (rel. error under 1e-2). Needs torch, triton and
NVML (the node's), nothing installed: the kernel's source is loaded by its path.

With --warp-specialized the Triton side is the harness's warp-specialized Gluon kernel (the 192 x 192
tile of gluon_kernel.py, launched as bench/probes/gluon_probe.py does, its default config) on any shapes
given (docs/notes/2026-11-26-gpu-runs.md, "The warp-specialized tile against cuBLAS, counted").
"""

import argparse
import json
import statistics
import time

from bench._gpu_common import geomean, make_inputs, palindromic, rel_err
from bench.probes.streamk_probe import cdiv, load_matmul_module, parse_shape
from remote_agent.runners.gpu_clocks import Clocks
from remote_agent.runners.gpu_memory import strides, workspace_need

P = dict(TMA=1, PERSISTENT=1)
CONFIGS = {  # shape -> the winner of the default search in H200 run 13 (docs/notes/2026-11-26-gpu-runs.md)
    "512x10240x8192:bf16:NT": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=6,
                                   STREAM_K=1, **P),
    "1024x4096x4096:fp16:NN": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, TMA=1),
    "2048x14336x4096:bf16:NT": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, **P),
    "4096x4096x14336:fp16:TN": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, GROUP_M=8, num_warps=8, num_stages=4),
    "4096x3584x3584:bf16:NN": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=1, num_warps=8, num_stages=3,
                                   STREAM_K=1, **P),
    "8192x8192x8192:fp16:NN": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, **P),
}
SMS = 132
REL_TOL = 1e-2
GRAPH_LAUNCHES = 10


class Energy(Clocks):
    """NVML's energy counter (mJ since the driver loaded) and the enforced power limit."""

    def millijoules(self):
        import ctypes

        mj = ctypes.c_ulonglong()
        if self.lib is None or self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(mj)) != 0:
            return None
        return float(mj.value)

    def power_limit_w(self):
        import ctypes

        mw = ctypes.c_uint()
        if self.lib is None or self.lib.nvmlDeviceGetEnforcedPowerLimit(self.handle, ctypes.byref(mw)) != 0:
            return None
        return mw.value / 1e3


def triton_launch(torch, tk, cfg, s, a, b, c):
    M, N, K, lay = s["M"], s["N"], s["K"], s["layout"]
    a_t, b_t = lay[0] == "T", lay[1] == "T"
    tiles = cdiv(M, cfg["BLOCK_M"]) * cdiv(N, cfg["BLOCK_N"])
    grid = (SMS if cfg.get("STREAM_K") else min(tiles, SMS) if cfg.get("PERSISTENT") else tiles, 1, 1)
    need = workspace_need(cfg, grid, M * N) or (1, 1)
    ws = torch.zeros(need[0], dtype=torch.float32, device="cuda")
    locks = torch.zeros(need[1], dtype=torch.int32, device="cuda")
    kwargs = dict(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
                  SPLIT_K=1, EVEN_K=K % cfg["BLOCK_K"] == 0, IEEE=False, TMA=cfg.get("TMA", 0), SWAP_AB=0,
                  PERSISTENT=cfg.get("PERSISTENT", 0), A_T=a_t, B_T=b_t, STREAM_K=cfg.get("STREAM_K", 0),
                  num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **strides(M, N, K, lay))
    kernel = tk.matmul_kernel[grid]
    args = (a, b, c, ws, locks, M, N, K)
    return lambda: kernel(*args, **kwargs), (ws, locks)


def warp_specialized_launch(torch, s, a, b, c):
    """The Gluon 192 x 192 kernel on stored A and B, launched as gluon_probe.py launches it."""
    import gluon_probe
    from harness.kernels.matmul import strides as logical_strides
    from harness.shapes import make_shape
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    M, N, K, lay = s["M"], s["N"], s["K"], s["layout"]
    cfg = gluon_probe.full_config({"KERNEL": "rows"})
    fn, blocks, ce, warps, bm, bn = gluon_probe.kernel_parts(cfg, lay)
    gdt = gl.float16 if a.dtype == torch.float16 else gl.bfloat16
    stored = {"a": a, "b": b, "c": c}
    values = dict(logical_strides(make_shape(M, N, K, s["dtype"], lay)), M=M, N=N, K=K, a_ptr=a, b_ptr=b, c_ptr=c)
    for name, blk in blocks:
        values[name] = TensorDescriptor.from_tensor(stored[name[0]], blk, gl.NVMMASharedLayout.get_default_for(blk, gdt))
    run_args = {n: values[n] for n in fn.arg_names if n not in ce}
    grid = (min(SMS, cdiv(M, bm) * cdiv(N, bn)),)
    return lambda: fn[grid](**run_args, **ce, num_warps=warps), gluon_probe.overrides(cfg)


def captured(torch, fn):
    """A CUDA graph of GRAPH_LAUNCHES back-to-back launches of fn."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_LAUNCHES):
            fn()
    return graph


def sustained(torch, graph, energy, seconds):
    """Replays for ``seconds`` after a warm-up of a quarter of that: ms and mJ per GEMM, mean W, the
    mean of the SM clock read after every 4 replays, and SM cycles per GEMM at that clock."""
    deadline = time.time() + seconds / 4
    while time.time() < deadline:
        graph.replay()
        torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    replays, clocks = 0, []
    mj0 = energy.millijoules()
    start.record()
    deadline = time.time() + seconds
    while time.time() < deadline:
        graph.replay()
        replays += 1
        if replays % 4 == 0:
            torch.cuda.synchronize()
            clocks.append(energy.sm_mhz())
    end.record()
    end.synchronize()
    mj1 = energy.millijoules()
    mhz = statistics.mean(clocks) if clocks and None not in clocks else None
    ms = start.elapsed_time(end)
    gemms = replays * GRAPH_LAUNCHES
    joules = (mj1 - mj0) / 1e3 if mj0 is not None and mj1 is not None else None
    return {"ms": ms / gemms, "mj": joules * 1e3 / gemms if joules else None,
            "watts": joules / (ms / 1e3) if joules else None, "sm_mhz": mhz,
            "mcycles": ms / gemms * mhz / 1e3 if mhz else None}


def probe_shape(torch, tk, energy, text, seconds, warp_specialized=False):
    """Both methods in 4 palindromic windows; prints a line, returns the windows and their medians."""
    s = parse_shape(text)
    a, b, a_log, b_log = make_inputs(s, seed=1)
    ref = torch.matmul(a_log, b_log)
    c = torch.full((s["M"], s["N"]), float("nan"), dtype=a.dtype, device="cuda")
    if warp_specialized:
        (tri, cfg), keep = warp_specialized_launch(torch, s, a, b, c), None
    else:
        cfg = CONFIGS[text]
        tri, keep = triton_launch(torch, tk, cfg, s, a, b, c)
    tri()
    torch.cuda.synchronize()
    err = rel_err(c, ref)
    if not err < REL_TOL:
        raise SystemExit("%s: wrong answer (rel. err %.3g)" % (text, err))
    c_lib = torch.empty_like(c)

    def lib():
        torch.matmul(a_log, b_log, out=c_lib)

    graphs = [captured(torch, f) for f in (tri, lib)]
    out = {"triton": [], "cublas": []}
    for order in palindromic(2, 4):
        for i in order:
            m = sustained(torch, graphs[i], energy, seconds)
            out["triton" if i == 0 else "cublas"].append(m)
    med = {k: {f: statistics.median(m[f] for m in v) for f in ("ms", "mj", "watts", "sm_mhz", "mcycles")}
           for k, v in out.items()}
    t, l = med["triton"], med["cublas"]
    flops = 2.0 * s["M"] * s["N"] * s["K"]
    print("%-24s %7.1f %7.1f us (cuBLAS/Triton %.3f), %6.1f %6.1f mJ a GEMM (Triton/cuBLAS %.3f), %3.0f %3.0f W, "
          "%4.0f %4.0f MHz, %.3f %.3f M cycles (Triton/cuBLAS %.3f), %3.0f %3.0f TFLOP/s"
          % (text, t["ms"] * 1e3, l["ms"] * 1e3, l["ms"] / t["ms"], t["mj"], l["mj"], t["mj"] / l["mj"], t["watts"],
             l["watts"], t["sm_mhz"], l["sm_mhz"], t["mcycles"], l["mcycles"], t["mcycles"] / l["mcycles"],
             flops / t["ms"] / 1e9, flops / l["ms"] / 1e9), flush=True)
    del keep
    return {"shape": text, "config": cfg, "rel_err": err, "windows": out, "median": med}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="JSON file for the measurements")
    p.add_argument("--seconds", type=float, default=1.0, help="sustained replay per window (default 1.0)")
    p.add_argument("--shapes", nargs="*", default=list(CONFIGS),
                   help="among: %s (any MxNxK:dtype:layout with --warp-specialized)" % ", ".join(CONFIGS))
    p.add_argument("--warp-specialized", action="store_true",
                   help="time the warp-specialized Gluon kernel (its default config) instead of run 13's configs")
    args = p.parse_args(argv)
    unknown = [t for t in args.shapes if t not in CONFIGS]
    if unknown and not args.warp_specialized:
        p.error("no config for %s: run 13's shapes only, unless --warp-specialized" % ", ".join(unknown))
    import torch
    import triton

    scratch = torch.empty(1 << 24, dtype=torch.int8, device="cuda")  # the TMA descriptors' global scratch
    triton.set_allocator(lambda size, align, stream: scratch[:size])  # one buffer: nothing allocated in a graph
    energy = Energy()
    if energy.millijoules() is None:
        raise SystemExit("NVML's energy counter cannot be read here")
    print("power limit %.0f W, SM clock now %.0f MHz" % (energy.power_limit_w() or 0, energy.sm_mhz() or 0))
    tk = load_matmul_module("triton_kernel")
    entries = [probe_shape(torch, tk, energy, t, args.seconds, args.warp_specialized) for t in args.shapes]

    def ratio(key, num, den):
        return geomean([e["median"][num][key] / e["median"][den][key] for e in entries])

    print("geomean: cuBLAS/Triton time %.3f; Triton/cuBLAS energy a GEMM %.3f, SM cycles a GEMM %.3f, clock %.3f"
          % (ratio("ms", "cublas", "triton"), ratio("mj", "triton", "cublas"), ratio("mcycles", "triton", "cublas"),
             ratio("sm_mhz", "triton", "cublas")))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(entries, f, indent=1)


if __name__ == "__main__":
    main()
