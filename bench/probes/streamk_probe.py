"""Stream-K probe: the harness's persistent TMA matmul with STREAM_K 0 and 1 against
torch.matmul (cuBLAS), on wave-quantized prefill shapes (run on the GPU node; about 2 minutes
on an H200).

    python3 -m bench.probes.streamk_probe [--out streamk.json] [--budget-s 150]

Needs torch and triton (the node's 2.11 and 3.6) and this repository, nothing installed: the
kernel's source is loaded from harness/kernels/matmul/triton_kernel.py and launched with Triton's
own JIT; the workspace and counters are what the GPU agent gives a config
(remote_agent/runners/gpu_memory.workspace_need). Grids as the harness's: persistent
``min(tiles, SMs)``, stream-K every SM.

Shapes: the prefill shapes (M >= 512) of bench/shapes/llm_gemms.txt, then four linear layers of
real models whose 128 x 128 and 128 x 256 tiles fill the last wave of 132 SMs badly (EXTRA
below). Configs: the persistent tiles the search finds for them (CONFIGS), each with STREAM_K 0
and 1. Every launch is checked against torch (rel. error under 1e-2), every stream-K launch
also for bit-identical output on a second launch and counters back at zero. Timing:
triton.testing.do_bench, median.

Prints per shape: the tile waves, cuBLAS time, then per config the times of STREAM_K 0/1, the
stream-K plan (K pieces per last-wave tile, K steps spared per busy program: harness/kernels/
matmul/stream_k.py), whether the kernel's rules would prune it (`stream_k_little_idle`,
`stream_k_unsplit`) and whether the seeds would offer it; then per shape
the best STREAM_K = 0 config against the best of all, as cuBLAS/Triton ratios, and the geomeans.

``--interpret``: no GPU; runs the same code on tiny shapes in Triton's interpreter with torch on
the CPU (5 "SMs", 16 x 32 tiles), to check the probe itself.
"""

import argparse
import importlib.util
import json
import os
import sys
import time

from bench._gpu_common import ROOT, geomean, rel_err
from remote_agent.runners.gpu_memory import workspace_need

EXTRA = [  # M x N x K : dtype : layout  -- model, and why its waves are quantized on 132 SMs
    ("512x6144x4096:bf16:NT", "Llama-3-8B qkv_proj, prefill 512 (192 tiles of 128x128: 1.45 waves)"),
    ("1024x4608x3584:bf16:NT", "Qwen2-7B qkv_proj, prefill 1024 (288 tiles: 2.18 waves)"),
    ("1024x3584x18944:bf16:NT", "Qwen2-7B down_proj, prefill 1024 (224 tiles: 1.70 waves)"),
    ("512x5120x14336:bf16:NT", "Mistral-NeMo-12B down_proj, prefill 512 (160 tiles: 1.21 waves)"),
]
CONFIGS = [  # persistent TMA tiles (GROUP_M 8), each run with STREAM_K 0 and 1
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3),
    dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3),
]
# fp16 only: Triton 3.6's interpreter multiplies bf16 tiles wrongly in tl.dot (bf16 is right on GPUs)
# on 5 "SMs" with 16 x 32 tiles: the last tile in 4 K pieces, 2 tiles in 2, 1 in 3
INTERPRET_SHAPES = ["40x64x200:fp16:NT", "64x96x72:fp16:NN", "48x64x96:fp16:TN"]
INTERPRET_CONFIGS = [dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=3)]
STREAM_K_MIN_IDLE = 0.05  # harness/kernels/matmul/rules.py (read from there when it imports)
STREAM_K_MIN_STEPS_SAVED = 64  # harness/kernels/matmul/seeds.py (likewise)
REL_TOL = 1e-2


def cdiv(a, b):
    return -(-a // b)


def parse_shape(text):
    dims, dtype, layout = text.split(":")
    M, N, K = (int(x) for x in dims.split("x"))
    return {"M": M, "N": N, "K": K, "dtype": dtype, "layout": layout, "id": text}


def prefill_shapes(path):
    out = []
    with open(path) as f:
        for line in f:
            text = line.split("#")[0].strip()
            if text:
                s = parse_shape(text)
                if s["M"] >= 512:
                    s["why"] = line.split("#", 1)[1].strip() if "#" in line else ""
                    out.append(s)
    return out


def load_matmul_module(name):
    """harness/kernels/matmul/<name>.py by its path (the harness package needs more than torch)."""
    path = os.path.join(ROOT, "harness", "kernels", "matmul", name + ".py")
    spec = importlib.util.spec_from_file_location("streamk_probe_" + name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


PLAN = load_matmul_module("stream_k")  # standard library only: the kernel's stream-K plan
DESCRIPTORS = load_matmul_module("descriptors")  # likewise: the tensor descriptors a config takes


def thresholds():
    """(rules' STREAM_K_MIN_IDLE, seeds' STREAM_K_MIN_STEPS_SAVED)."""
    try:
        from harness.kernels.matmul.rules import STREAM_K_MIN_IDLE as idle
        from harness.kernels.matmul.seeds import STREAM_K_MIN_STEPS_SAVED as steps
        return idle, steps
    except Exception:  # the harness's host requirements (yaml, ...) are not on the node
        return STREAM_K_MIN_IDLE, STREAM_K_MIN_STEPS_SAVED


def idle_share(tiles, programs):
    waves = cdiv(tiles, programs)
    return (waves * programs - tiles) / (waves * programs)


def stream_k_plan(cfg, shape, programs, limits):
    """(pieces per last-wave tile, K steps spared per busy program, the kernel's stream-K rule that
    would prune this or None, whether the seeds offer it)."""
    tiles = cdiv(shape["M"], cfg["BLOCK_M"]) * cdiv(shape["N"], cfg["BLOCK_N"])
    k_tiles = cdiv(shape["K"], cfg["BLOCK_K"])
    pieces = PLAN.pieces_per_tile(tiles, programs, k_tiles)
    saved = PLAN.steps_saved(tiles, programs, k_tiles)
    pruned = None
    if idle_share(tiles, programs) < limits[0]:
        pruned = "stream_k_little_idle"
    elif pieces == 1:
        pruned = "stream_k_unsplit"
    return pieces, saved, pruned, saved >= limits[1]


class Probe(object):
    def __init__(self, torch, triton, tk, device, programs, interpret):
        self.torch, self.triton, self.tk = torch, triton, tk
        self.device, self.programs, self.interpret = device, programs, interpret

    def inputs(self, s, seed=1):
        torch = self.torch
        g = torch.Generator(device=self.device).manual_seed(seed)
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[s["dtype"]]
        M, N, K, lay = s["M"], s["N"], s["K"], s["layout"]
        a = (torch.rand((K, M) if lay[0] == "T" else (M, K), device=self.device, generator=g) * 2 - 1).to(dt)
        b = (torch.rand((N, K) if lay[1] == "T" else (K, N), device=self.device, generator=g) * 2 - 1).to(dt)
        return a, b, (a.t() if lay[0] == "T" else a), (b.t() if lay[1] == "T" else b)

    def launch_args(self, cfg, s, a, b, c):
        """grid, arguments, keyword arguments of matmul_kernel for (cfg, shape), with the agent's
        workspace and counters; and the counters. TMA tiles, persistent, GROUP_M 8, no split and no
        swap unless cfg says otherwise (TMA, PERSISTENT, GROUP_M, SPLIT_K, SWAP_AB)."""
        torch = self.torch
        M, N, K, lay = s["M"], s["N"], s["K"], s["layout"]
        a_t, b_t = lay[0] == "T", lay[1] == "T"
        strides = (1 if a_t else K, M if a_t else 1, 1 if b_t else N, K if b_t else 1, N, 1)
        tiles = cdiv(M, cfg["BLOCK_M"]) * cdiv(N, cfg["BLOCK_N"])
        persistent = cfg.get("PERSISTENT", 1)
        split, tma, swap = cfg.get("SPLIT_K", 1), cfg.get("TMA", 1), cfg.get("SWAP_AB", 0)
        grid = (self.programs if cfg["STREAM_K"] else min(tiles, self.programs) if persistent else tiles, split, 1)
        need = workspace_need(cfg, grid, M * N) or (1, 1)
        ws = torch.zeros(need[0], dtype=torch.float32, device=self.device)
        locks = torch.zeros(need[1], dtype=torch.int32, device=self.device)
        kwargs = dict(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg.get("GROUP_M", 8),
                      SPLIT_K=split, EVEN_K=K % cfg["BLOCK_K"] == 0, IEEE=False, TMA=tma, SWAP_AB=swap,
                      PERSISTENT=persistent, A_T=a_t, B_T=b_t, STREAM_K=cfg["STREAM_K"])
        if not self.interpret:
            kwargs.update(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        values = dict(zip(("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm",
                           "stride_cn"), (M, N, K) + strides))
        descs = self.descriptors(dict(cfg, TMA=tma, PERSISTENT=persistent), a_t, b_t, {"a": a, "b": b, "c": c},
                                 values)
        return grid, (a, b, c, ws, locks, M, N, K) + strides + descs, kwargs, locks

    def descriptors(self, cfg, a_t, b_t, tensors, values):
        """The kernel's tensor descriptor arguments (a_desc, b_desc, b2_desc, c_desc), made on the host
        as the GPU agent makes them: descriptors.py's plan, None where the config takes none."""
        from triton.tools.tensor_descriptor import TensorDescriptor

        made = {d.name: TensorDescriptor(tensors[d.operand], [values[n] for n in d.shape],
                                         [values[n] for n in d.strides], list(d.block))
                for d in DESCRIPTORS.tensor_descriptors(cfg, a_t, b_t)}
        return tuple(made.get(name) for name in self.tk.MATMUL_DESCRIPTOR_ARGS)

    def launcher(self, cfg, s, a, b, c):
        """A no-argument launch of matmul_kernel for (cfg, shape), and the counters."""
        grid, args, kwargs, locks = self.launch_args(cfg, s, a, b, c)
        kernel = self.tk.matmul_kernel[grid]

        def launch():
            kernel(*args, **kwargs)

        return launch, locks

    def time_ms(self, fn):
        if self.interpret:
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
        return self.triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

    def run_config(self, cfg, s, a, b, ref):
        """(ms, rel_err, problem or None) of one config on one shape."""
        torch = self.torch
        c = torch.empty((s["M"], s["N"]), dtype=a.dtype, device=self.device)
        c.fill_(float("nan"))
        launch, locks = self.launcher(cfg, s, a, b, c)
        launch()
        self.sync()
        err = rel_err(c, ref)
        if not err < REL_TOL:
            return None, err, "wrong answer (rel. err %.3g)" % err
        if cfg["STREAM_K"]:
            first = c.clone()
            launch()
            self.sync()
            if not torch.equal(first.view(torch.int16), c.view(torch.int16)):
                return None, err, "second launch not bit-identical"
            if int(locks.abs().sum().item()):
                return None, err, "counters not zero after the launch"
        return self.time_ms(launch), err, None

    def sync(self):
        if not self.interpret:
            self.torch.cuda.synchronize()


def open_probe(interpret, tool):
    """A Probe of the kernel's source: on the GPU (Triton's allocator set, one line about the device
    printed), or in Triton's interpreter on 5 "SMs" of a CPU."""
    import torch
    import triton

    tk = load_matmul_module("triton_kernel")
    if interpret:
        return Probe(torch, triton, tk, "cpu", 5, True)
    if not torch.cuda.is_available():
        sys.exit("%s: no CUDA device (use --interpret to check the probe on a CPU)" % tool)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    print("%s, %d SMs; torch %s, triton %s" % (torch.cuda.get_device_name(0), programs, torch.__version__,
                                               triton.__version__))
    return Probe(torch, triton, tk, "cuda", programs, False)


def probe_shapes(shapes, budget_s, probe_one):
    """probe_one(shape) of each shape in turn, until ``budget_s`` seconds have passed before a shape
    would start or the CUDA context is lost (RuntimeError); the entries so far."""
    start = time.monotonic()
    entries = []
    for s in shapes:
        if time.monotonic() - start > budget_s:
            print("\nbudget of %.0f s spent: %d shapes left out" % (budget_s, len(shapes) - len(entries)))
            break
        try:
            entries.append(probe_one(s))
        except RuntimeError as exc:
            print("\nstopped: %s" % exc)
            break
    return entries


def name(cfg):
    return "%dx%dx%d w%d s%d" % (cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["num_warps"], cfg["num_stages"])


def probe_shape(probe, s, configs, limits):
    """Every config with STREAM_K 0 and 1 on one shape; prints a block, returns its entry."""
    torch = probe.torch
    a, b, a_log, b_log = probe.inputs(s)
    ref = torch.matmul(a_log, b_log)
    t_lib = probe.time_ms(lambda: torch.matmul(a_log, b_log))
    flops = 2.0 * s["M"] * s["N"] * s["K"]
    t128 = cdiv(s["M"], 128) * cdiv(s["N"], 128)
    print("\n%s  %s" % (s["id"], s.get("why", "")))
    print("  128x128 tiles: %d = %.2f waves of %d (%.0f %% idle); torch.matmul %.4f ms (%.0f TFLOP/s)"
          % (t128, t128 / probe.programs, probe.programs, 100 * idle_share(t128, probe.programs), t_lib,
             flops / (t_lib * 1e-3) / 1e12))
    rows = []
    for base in configs:
        times = []
        pieces, saved, pruned_sk, seeded = stream_k_plan(base, s, probe.programs, limits)
        for sk in (0, 1):
            cfg = dict(base, STREAM_K=sk)
            pruned = pruned_sk if sk else None
            try:
                ms, err, problem = probe.run_config(cfg, s, a, b, ref)
            except Exception as exc:  # a compile or launch error: say it, keep going
                ms, err, problem = None, None, "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:200]
                                                           if str(exc) else "")
            rows.append({"config": cfg, "ms": ms, "rel_err": err, "problem": problem, "pruned_by": pruned,
                         "pieces": pieces if sk else None, "steps_saved": saved if sk else None,
                         "seeded": seeded if sk else None})
            times.append("%s%s" % ("%.4f" % ms if ms else "FAILED", " (pruned)" if pruned else ""))
            if problem:
                print("  %s STREAM_K=%d: %s" % (name(cfg), sk, problem))
            if problem and "CUDA" in problem:
                raise RuntimeError("the CUDA context is lost after %s STREAM_K=%d: %s" % (name(cfg), sk, problem))
        print("  %-18s STREAM_K 0/1: %s ms  (%d pieces, %d steps spared%s)"
              % (name(base), " / ".join(times), pieces, saved, ", seeded" if seeded and not pruned_sk else ""))
    ok = [r for r in rows if r["ms"]]
    best0 = min((r for r in ok if not r["config"]["STREAM_K"]), key=lambda r: r["ms"], default=None)
    best = min(ok, key=lambda r: r["ms"], default=None)
    entry = {"shape": s["id"], "cublas_ms": t_lib, "rows": rows,
             "best_sk0": best0, "best": best,
             "ratio_sk0": t_lib / best0["ms"] if best0 else None, "ratio_best": t_lib / best["ms"] if best else None}
    if best0 and best:
        print("  best STREAM_K=0: %s %.4f ms, cuBLAS/Triton %.3f | best: %s STREAM_K=%d %.4f ms, cuBLAS/Triton %.3f"
              % (name(best0["config"]), best0["ms"], entry["ratio_sk0"], name(best["config"]),
                 best["config"]["STREAM_K"], best["ms"], entry["ratio_best"]))
    return entry


def summary(entries):
    print("\n%-26s %10s %12s %12s %14s" % ("shape", "cuBLAS ms", "SK=0 ratio", "best ratio", "best STREAM_K"))
    for e in entries:
        best = e["best"]
        print("%-26s %10.4f %12s %12s %14s" % (
            e["shape"], e["cublas_ms"], "%.3f" % e["ratio_sk0"] if e["ratio_sk0"] else "-",
            "%.3f" % e["ratio_best"] if e["ratio_best"] else "-", best["config"]["STREAM_K"] if best else "-"))
    g0 = geomean([e["ratio_sk0"] for e in entries])
    g1 = geomean([e["ratio_best"] for e in entries])
    print("geomean cuBLAS/Triton over %d shapes: STREAM_K=0 only %.3f, with stream-K %.3f" % (len(entries), g0, g1))
    return g0, g1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=os.path.join(ROOT, "bench", "shapes", "llm_gemms.txt"),
                   help="shapes file; its prefill shapes (M >= 512) are probed, then the EXTRA ones")
    p.add_argument("--out", default=None, help="write every measurement as JSON")
    p.add_argument("--budget-s", type=float, default=150.0, help="stop starting new shapes after this many seconds")
    p.add_argument("--interpret", action="store_true", help="no GPU: tiny shapes in Triton's interpreter (CPU)")
    args = p.parse_args(argv)
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    probe = open_probe(args.interpret, "streamk_probe")
    if args.interpret:
        shapes, configs = [parse_shape(t) for t in INTERPRET_SHAPES], INTERPRET_CONFIGS
    else:
        shapes = prefill_shapes(args.shapes) + [dict(parse_shape(t), why=why) for t, why in EXTRA]
        configs = CONFIGS
    limits = thresholds()
    start = time.monotonic()
    entries = probe_shapes(shapes, args.budget_s, lambda s: probe_shape(probe, s, configs, limits))
    g0, g1 = summary(entries)
    print("wall %.1f s" % (time.monotonic() - start))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"programs": probe.programs, "entries": entries, "geomean_sk0": g0, "geomean_best": g1}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
