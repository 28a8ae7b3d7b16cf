"""Wide-tile probe: the harness's TMA matmul with BLOCK_N = 160, 192 and 320 (one tile a program, two
MMAs a tile: 128 + 32, 128 + 64, 256 + 64 wide) against its power-of-two tiles (persistent,
stream-K, one tile a program) and torch.matmul (cuBLAS), on prefill shapes whose tile counts fill
the waves of the GPU differently with the wide tiles (run on the GPU node; about two minutes on an
H200).

    python3 -m bench.probes.wide_tile_probe [--out wide.json] [--budget-s 240] [--shape 3072x3072x4096:fp16:TN ...]
                                     [--config '{"BLOCK_M": 128, "BLOCK_N": 192, ...}' ...]

Like bench/probes/streamk_probe.py (whose launcher it uses): torch and Triton only, the kernel's source
loaded from harness/kernels/matmul/triton_kernel.py and launched with Triton's JIT; every launch
checked against torch (rel. error under 1e-2); do_bench medians, the library and the configs of a
shape timed in four windows in palindromic order (A B C, C B A, ...), each time the median of its
four windows.

For prefill shapes: the launches go through Triton's JIT, whose launch costs more than a decode
kernel runs (56x2304x9216's winner: 49.8 us here, 22.3 in the agent; docs/notes/2026-11-26-gpu-runs.md, stop 35).

Prints per shape: the waves of 128-row tiles 128 to 320 wide on the GPU's
multiprocessors, cuBLAS, every config, then cuBLAS/Triton for the best power-of-two config and for
the best of all, and the geomeans.
"""

import argparse
import json
import sys
import time

from bench._gpu_common import geomean, rel_err
from bench.probes.streamk_probe import DESCRIPTORS, cdiv, name, open_probe, parse_shape, probe_shapes

SHAPES = [  # M x N x K : dtype : layout -- model, layer
    ("512x6144x4096:bf16:NT", "Llama-3-8B qkv_proj, prefill 512"),
    ("2048x1536x8960:bf16:NT", "Qwen2-1.5B down_proj, prefill 2048"),
    ("1024x3072x3072:fp16:NT", "Llama-3.2-3B o_proj, prefill 1024"),
    ("512x5120x14336:bf16:NT", "Mistral-NeMo-12B down_proj, prefill 512"),
    ("4096x3584x3584:bf16:NN", "Qwen2-7B o_proj, prefill 4096"),
    ("1024x4608x3584:bf16:NT", "Qwen2-7B qkv_proj, prefill 1024"),
    ("512x10240x8192:bf16:NT", "Llama-3-70B qkv_proj, prefill 512"),
    ("2048x2048x8192:fp16:NT", "Llama-3.2-1B down_proj, prefill 2048"),
    ("4096x4096x14336:fp16:TN", "Llama-3-8B down_proj weight gradient"),
]
CONFIGS = [  # GROUP_M 8; persistent (flattened loops) unless PERSISTENT=0
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, STREAM_K=0),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, STREAM_K=0),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, STREAM_K=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4, STREAM_K=0, PERSISTENT=0),
    dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_warps=8, num_stages=3, STREAM_K=0, PERSISTENT=0),
    dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_warps=8, num_stages=4, STREAM_K=0, PERSISTENT=0),
    dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_warps=8, num_stages=5, STREAM_K=0, PERSISTENT=0),
    dict(BLOCK_M=64, BLOCK_N=192, BLOCK_K=64, num_warps=4, num_stages=5, STREAM_K=0, PERSISTENT=0),
    dict(BLOCK_M=128, BLOCK_N=160, BLOCK_K=64, num_warps=8, num_stages=4, STREAM_K=0, PERSISTENT=0),
    dict(BLOCK_M=128, BLOCK_N=160, BLOCK_K=64, num_warps=8, num_stages=5, STREAM_K=0, PERSISTENT=0),
    dict(BLOCK_M=64, BLOCK_N=160, BLOCK_K=64, num_warps=4, num_stages=6, STREAM_K=0, PERSISTENT=0),
    dict(BLOCK_M=128, BLOCK_N=320, BLOCK_K=64, num_warps=8, num_stages=3, STREAM_K=0, PERSISTENT=0),
    dict(BLOCK_M=64, BLOCK_N=320, BLOCK_K=64, num_warps=4, num_stages=4, STREAM_K=0, PERSISTENT=0),
]
REL_TOL = 1e-2
ROUNDS = 2


def parse_config(text):
    """A --config JSON object: the block sizes, warps and stages it must name; STREAM_K defaults to 0,
    PERSISTENT to 1 (persistent) for a power-of-two tile and to 0 for a wide or 192-row one, a split
    or a swapped one, which Triton's kernel runs one tile a program (a tile in parts on the persistent
    grid is the warp-specialized Gluon kernel: bench/probes/gluon_probe.py, KERNEL "rows");
    TMA to 1, GROUP_M to 8, SPLIT_K to 1 and SWAP_AB to 0 (bench/probes/streamk_probe.py's launcher)."""
    cfg = json.loads(text)  # a JSONDecodeError is a ValueError
    if not isinstance(cfg, dict):
        raise ValueError("%r is not a JSON object" % text)
    missing = [k for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages") if k not in cfg]
    if missing:
        raise ValueError("%s lacks %s" % (text, ", ".join(missing)))
    one_tile = DESCRIPTORS.wide_tile(cfg) or cfg.get("SPLIT_K", 1) > 1 or cfg.get("SWAP_AB")
    if one_tile and cfg.get("PERSISTENT"):
        raise ValueError("%s: Triton's kernel runs a tile in parts, split-K or SWAP_AB one tile a program "
                         "(PERSISTENT 0); a persistent 192 x 192 tile is the Gluon kernel: bench/probes/gluon_probe.py"
                         % text)
    return dict({"STREAM_K": 0, "PERSISTENT": 0 if one_tile else 1}, **cfg)


def label(cfg):
    return (name(cfg) + (" SK" if cfg["STREAM_K"] else "") + ("" if cfg.get("PERSISTENT", 1) else " tile")
            + (" split%d" % cfg["SPLIT_K"] if cfg.get("SPLIT_K", 1) > 1 else "") + (" swap" if cfg.get("SWAP_AB") else "")
            + ("" if cfg.get("TMA", 1) else " pointers"))


def probe_shape(probe, s, configs):
    torch = probe.torch
    a, b, a_log, b_log = probe.inputs(s)
    ref = torch.matmul(a_log, b_log)
    runs = {"cuBLAS": lambda: torch.matmul(a_log, b_log)}
    errors = {}
    for cfg in configs:
        c = torch.empty((s["M"], s["N"]), dtype=a.dtype, device=probe.device)
        c.fill_(float("nan"))
        try:
            launch, _ = probe.launcher(cfg, s, a, b, c)
            launch()
            probe.sync()
        except Exception as exc:  # a compile or launch error: say it, keep going
            errors[label(cfg)] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
            if "CUDA" in errors[label(cfg)]:
                raise RuntimeError("the CUDA context is lost after %s" % label(cfg))
            continue
        err = rel_err(c, ref)
        if not err < REL_TOL:
            errors[label(cfg)] = "wrong answer (rel. err %.3g)" % err
            continue
        runs[label(cfg)] = launch
    windows = {k: [] for k in runs}
    order = list(runs)
    for r in range(2 * ROUNDS):  # palindromic: A B C, C B A, ...
        for k in (order if r % 2 == 0 else order[::-1]):
            windows[k].append(probe.time_ms(runs[k]))
    ms = {k: sorted(v)[len(v) // 2] for k, v in windows.items()}
    lib = ms.pop("cuBLAS")
    print("\n%s  %s" % (s["id"], s.get("why", "")))
    waves = ["%dx%d: %d tiles = %.2f waves" % (bm, bn, t, t / probe.programs)
             for bm, bn in ((128, 128), (128, 160), (128, 192), (128, 256), (128, 320))
             for t in [cdiv(s["M"], bm) * cdiv(s["N"], bn)]]
    print("  " + "; ".join(waves))
    print("  cuBLAS %.4f ms (%.0f TFLOP/s)" % (lib, 2.0 * s["M"] * s["N"] * s["K"] / (lib * 1e-3) / 1e12))
    for cfg in configs:
        k = label(cfg)
        print("  %-22s %s" % (k, "%.4f ms  cuBLAS/Triton %.3f" % (ms[k], lib / ms[k]) if k in ms else errors[k]))
    pow2 = [ms[label(c)] for c in configs if not DESCRIPTORS.wide_tile(c) and label(c) in ms]
    every = list(ms.values())
    entry = {"shape": s["id"], "cublas_ms": lib, "ms": ms, "errors": errors,
             "ratio_pow2": lib / min(pow2) if pow2 else None, "ratio_best": lib / min(every) if every else None}
    best = {w: min([ms[label(c)] for c in configs if c["BLOCK_N"] == w and label(c) in ms] or [float("inf")])
            for w in (160, 192, 320)}
    entry["ratio_width"] = {w: lib / t for w, t in best.items() if t < float("inf")}
    print("  best 160 / 192 / 320-wide: cuBLAS/Triton %s" % " / ".join(
        "%.3f" % entry["ratio_width"][w] if w in entry["ratio_width"] else "-" for w in (160, 192, 320)))
    print("  best power-of-two tile: cuBLAS/Triton %s; best of all %s" % (
        "%.3f" % entry["ratio_pow2"] if pow2 else "-", "%.3f" % entry["ratio_best"] if every else "-"))
    return entry


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="write every measurement as JSON")
    p.add_argument("--budget-s", type=float, default=240.0, help="stop starting new shapes after this many seconds")
    p.add_argument("--shape", action="append", default=None, metavar="MxNxK:dtype:layout",
                   help="probe these shapes instead of the built-in list (repeatable)")
    p.add_argument("--config", action="append", default=None, metavar="JSON",
                   help='time these configs instead of the built-in list (repeatable), e.g. '
                        '\'{"BLOCK_M": 128, "BLOCK_N": 192, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4, '
                        '"STREAM_K": 0, "PERSISTENT": 0}\'')
    args = p.parse_args(argv)
    try:
        configs = [parse_config(text) for text in args.config] if args.config else CONFIGS
    except ValueError as exc:
        p.error("--config: %s" % exc)
    probe = open_probe(False, "wide_tile_probe")
    start = time.monotonic()
    listed = [(text, "") for text in args.shape] if args.shape else SHAPES
    shapes = [dict(parse_shape(text), why=why) for text, why in listed]
    entries = probe_shapes(shapes, args.budget_s, lambda s: probe_shape(probe, s, configs))
    print("\n%-26s %10s %14s %16s" % ("shape", "cuBLAS ms", "power of two", "with wide tiles"))
    for e in entries:
        print("%-26s %10.4f %14s %16s" % (e["shape"], e["cublas_ms"], "%.3f" % e["ratio_pow2"] if e["ratio_pow2"] else "-",
                                          "%.3f" % e["ratio_best"] if e["ratio_best"] else "-"))
    g0 = geomean([e["ratio_pow2"] for e in entries if e["ratio_pow2"]])
    g1 = geomean([e["ratio_best"] for e in entries if e["ratio_best"]])
    print("geomean cuBLAS/Triton over %d shapes: power-of-two tiles %.3f, with the wide tiles %.3f"
          % (len(entries), g0, g1))
    print("wall %.1f s" % (time.monotonic() - start))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"programs": probe.programs, "entries": entries, "geomean_pow2": g0, "geomean_best": g1}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
