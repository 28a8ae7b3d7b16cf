"""Probe: the fp8 block-scaled GEMM's warp-specialized Gluon kernel (WS = 1) against torch._scaled_mm
with blockwise scales and against the Triton kernel, on a GPU node (sm90, torch with blockwise
_scaled_mm: 2.9+ with CUDA 12.9+).

Each shape gets fp8 e4m3fn A (M x K) and B (N x K) with fp32 scales per 1 x 128 (A) and 128 x 128
(B) block, the layout of harness/kernels/fp8_blockscale. The reference is dequantize(A) @
dequantize(B)^T in fp32 (no TF32); every launch's C (NaN-filled first) is checked against it
(relative error norm, tolerance 1e-2 as the harness's). Times are triton.testing.do_bench medians
(its L2 flush included) of: torch._scaled_mm (the harness's library row, same argument
preparation as device.py), the Triton kernel at its tuned prefill config (docs/fp8.md), and each
WS variant (BLOCK_M x BLOCK_N, num_stages, GROUP_M, OVERLAP, ORDERED, PIPE). Launches go through the JIT (tens
of microseconds of Python a launch), so decode shapes (M < 512) are timed in a CUDA graph
(triton.testing.do_bench_cudagraph: no L2 flush between launches; the library too) and get the
decode variants; the Triton kernel's row is for prefill shapes only (its tuned decode configs split K).

    python3 -m bench.probes.fp8_ws_probe                      # on the GPU node, the default shapes and variants
    python3 -m bench.probes.fp8_ws_probe --shape 4096x7168x16384 --variant 128x160x4x8o [--json OUT]

A variant is BMxBNxSTAGESxGROUP_M, with a trailing ``o`` for OVERLAP = 1 (the epilogue under the
next tile's first MMA), ``p`` for ORDERED = 1 (the consumers' MMAs in turn) or ``d`` for PIPE = 1
(two partials a consumer), ``s`` for SMEM_SCALES = 1 (A's scales staged in shared memory), ``m`` for
SMEM_SCALES = 2 (A's scales copied into the ring by TMA from an M-major copy, made outside the
timing as the agent makes ``a_scale_t``), and ``t`` to give the kernel A's scales M-major (the copy
the library row gets, made outside the timing); a
variant that fails to build or run prints its error and the probe goes on.
"""
import argparse
import json
import sys

DEFAULT_SHAPES = ["4096x7168x16384", "4096x4096x7168", "1024x7168x16384", "4096x2112x7168", "4096x24576x1536",
                  "4096x7168x2048", "16x10240x5120"]
# the two plain tiles that did best (controls), with OVERLAP (o), ORDERED (p) and both, the 192-row
# tile (three consumers) and 128 x 128 with PIPE (d)
DEFAULT_VARIANTS = ["128x128x6x8", "128x192x4x8", "128x128x6x8o", "128x128x6x8p", "128x128x6x8op", "128x192x4x8o",
                    "128x192x4x8op", "192x128x4x8", "192x128x4x8op", "128x128x5x8d"]
DECODE_VARIANTS = ["64x64x6x1", "64x80x6x1", "64x80x6x1o", "64x128x6x1"]  # M < 512: one wave of 64-row tiles
DECODE_M = 512
TRITON_CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, SPLIT_K=1, TMA=1, num_warps=8, num_stages=4)
SCALE = 128


def cdiv(a, b):
    return -(-a // b)


def make_inputs(torch, M, N, K, seed=0):
    """fp8 codes (uniform in [-224, 224] rounded) and scales 2^u, u uniform in [-8, -4], as the agent's fill."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = ((torch.rand((M, K), device="cuda", generator=g) * 2 - 1) * 224).to(torch.float8_e4m3fn)
    b = ((torch.rand((N, K), device="cuda", generator=g) * 2 - 1) * 224).to(torch.float8_e4m3fn)
    a_s = torch.exp2(-8 + 4 * torch.rand((M, cdiv(K, SCALE)), device="cuda", generator=g))
    b_s = torch.exp2(-8 + 4 * torch.rand((cdiv(N, SCALE), cdiv(K, SCALE)), device="cuda", generator=g))
    return a, b, a_s, b_s


def reference(torch, a, b, a_s, b_s):
    K = a.shape[1]
    N = b.shape[0]
    a32 = a.float() * a_s.repeat_interleave(SCALE, dim=1)[:, :K]
    b32 = b.float() * b_s.repeat_interleave(SCALE, dim=0).repeat_interleave(SCALE, dim=1)[:N, :K]
    torch.backends.cuda.matmul.allow_tf32 = False
    return a32 @ b32.t()


def rel_err(torch, c, ref):
    return (torch.linalg.vector_norm(c.float() - ref) / torch.linalg.vector_norm(ref)).item()


def scaled_mm_launch(torch, a, b, a_s, b_s, c):
    """The harness's library row (device.py torch_scaled_mm_launcher): A scales M-major, B scales'
    rows padded to a multiple of 4."""
    sn, sk = b_s.shape
    padded = torch.zeros((sn, cdiv(sk, 4) * 4), dtype=torch.float32, device="cuda")[:, :sk]
    padded.copy_(b_s)
    sa, sb = a_s.t().contiguous().t(), padded.t()
    return lambda: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, out=c)


def triton_launch(torch, a, b, a_s, b_s, c):
    from harness.kernels.fp8_blockscale.triton_kernel import fp8_blockscale_kernel

    M, K = a.shape
    N = b.shape[0]
    cfg = TRITON_CONFIG
    ws = torch.empty(1, device="cuda", dtype=torch.float32)
    lock = torch.zeros(1, device="cuda", dtype=torch.int32)
    grid = (cdiv(M, cfg["BLOCK_M"]) * cdiv(N, cfg["BLOCK_N"]), 1)
    sk = a_s.shape[1]
    return lambda: fp8_blockscale_kernel[grid](
        a, b, c, a_s, b_s, ws, lock, M, N, K, K, 1, K, 1, N, 1, sk, 1, sk, 1,
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
        SPLIT_K=1, EVEN_K=K % cfg["BLOCK_K"] == 0, TMA=1, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


def ws_launch(torch, a, b, a_s, b_s, c, bm, bn, stages, group_m, sms, overlap=0, ordered=0, pipe=0, m_major=0,
              kernel=None, smem_scales=0):
    """The WS kernel (or ``kernel``, a probe's copy of it) through Gluon's JIT, with host tensor
    descriptors from the harness's plan; with m_major, A's scales are given M-major (the copy the
    library row gets, made here, outside the timing) instead of the harness's row-major M x K / 128."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from harness.kernels.fp8_blockscale import descriptors
    from harness.kernels.fp8_blockscale.gluon_kernel import fp8_blockscale_ws_kernel

    M, K = a.shape
    N = b.shape[0]
    cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, WS=1)
    stored = {"a": (a, gl.float8e4nv), "b": (b, gl.float8e4nv), "c": (c, gl.bfloat16)}
    descs = {name: None for name in ("a_desc", "b_desc", "b2_desc", "c_desc", "c2_desc", "as_desc")}
    for d in descriptors.tensor_descriptors(cfg):
        t, dt = stored[d.operand]
        block = list(d.block)
        descs[d.name] = TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, dt))
    sk = a_s.shape[1]
    m_major = m_major or smem_scales == 2
    a_scales, stride_asm, stride_ask = (a_s.t().contiguous(), 1, M) if m_major else (a_s, sk, 1)
    if smem_scales == 2:  # A's scales through the ring by TMA: a K step's 64 rows a load, from the M-major copy
        block = [1, descriptors.WS_ROWS]
        descs["as_desc"] = TensorDescriptor.from_tensor(a_scales, block,
                                                        gl.NVMMASharedLayout.get_default_for(block, gl.float32))
    grid = (min(sms, cdiv(M, bm) * cdiv(N, bn)),)
    kernel = kernel or fp8_blockscale_ws_kernel
    return lambda: kernel[grid](
        a, b, c, a_scales, b_s, M, N, K, K, 1, K, 1, N, 1, stride_asm, stride_ask, sk, 1,
        descs["a_desc"], descs["b_desc"], descs["b2_desc"], descs["c_desc"], descs["c2_desc"], descs["as_desc"],
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_M=group_m, STAGES=stages, OVERLAP=overlap,
        ORDERED=ordered, PIPE=pipe, SMEM_SCALES=smem_scales, num_warps=4)


def measure(torch, name, launch, c, ref, flop, base_ms, graph=False):
    import triton

    c.fill_(float("nan"))
    launch()
    torch.cuda.synchronize()
    err = rel_err(torch, c, ref)
    if graph:
        ms = triton.testing.do_bench_cudagraph(launch, rep=100, return_mode="median")
    else:
        ms = triton.testing.do_bench(launch, warmup=25, rep=200)
    ok = err <= 1e-2
    print("  %-22s %9.1f us %7.0f TFLOP/s  x%.3f vs _scaled_mm  err %.1e%s" % (
        name, ms * 1e3, flop / ms / 1e9, (base_ms / ms) if base_ms else 1.0, err, "" if ok else "  WRONG"),
        flush=True)
    return dict(variant=name, us=ms * 1e3, tflops=flop / ms / 1e9, rel_err=err, ok=ok,
                speedup=(base_ms / ms) if base_ms else 1.0)


FLAGS = "opdtsm"  # a variant's trailing letters


def _flags(variant: str) -> str:
    return variant[len(variant.rstrip(FLAGS)):]


def variant_config(variant: str) -> dict:
    """The harness config of a variant BMxBNxSTAGESxGROUP_M[o][p][d][s|m][t] (what `harness tune` would
    build): o for OVERLAP = 1, p for ORDERED = 1, d for PIPE = 1 (two partials a consumer), s for
    SMEM_SCALES = 1 (A scales staged in shared memory), m for SMEM_SCALES = 2 (through the ring by TMA);
    t is not in the config (m_major)."""
    flags = _flags(variant)
    bm, bn, stages, group_m = (int(x) for x in variant.rstrip(FLAGS).split("x"))
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_M=group_m, SPLIT_K=1, num_warps=4, num_stages=stages,
                TMA=1, WS=1, OVERLAP=int("o" in flags), ORDERED=int("p" in flags), PIPE=int("d" in flags),
                SMEM_SCALES=2 if "m" in flags else int("s" in flags))


def m_major(variant: str) -> bool:
    """The variant's trailing t: the kernel gets A's scales M-major (an operand layout, not a config)."""
    return "t" in _flags(variant)


def valid_variant(v: str) -> bool:
    flags = _flags(v)
    parts = v.rstrip(FLAGS).split("x")
    scheduling = flags.replace("t", "").replace("s", "").replace("m", "")
    return (scheduling in ("", "o", "p", "op", "d") and not ("s" in flags and "m" in flags) and len(parts) == 4
            and all(x.isdigit() for x in parts))


def run(args):
    import torch
    import triton

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    props = torch.cuda.get_device_properties(0)
    print("device %s, %d SMs, torch %s, triton %s" % (props.name, props.multi_processor_count, torch.__version__,
                                                      triton.__version__), flush=True)
    rows = []
    for spec in args.shape or DEFAULT_SHAPES:
        M, N, K = (int(x) for x in spec.split("x"))
        a, b, a_s, b_s = make_inputs(torch, M, N, K)
        ref = reference(torch, a, b, a_s, b_s)
        c = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
        flop = 2.0 * M * N * K
        decode = M < DECODE_M
        print("%s (%.2f TFLOP)%s" % (spec, flop / 1e12, " decode: CUDA-graph timing" if decode else ""), flush=True)
        try:
            lib = measure(torch, "torch._scaled_mm", scaled_mm_launch(torch, a, b, a_s, b_s, c), c, ref, flop, None,
                          decode)
            base = lib["us"] / 1e3
            results = [lib]
        except RuntimeError as exc:  # e.g. K / 128 not a multiple of 4: "Invalid scaling configuration"
            print("  %-22s failed: %s" % ("torch._scaled_mm", (str(exc).strip().splitlines() or ["?"])[0][:200]),
                  flush=True)
            base, results = None, [dict(variant="torch._scaled_mm", ok=False)]
        candidates = [] if decode else [("triton BM128 BN128 w8 s4", lambda: triton_launch(torch, a, b, a_s, b_s, c))]
        for v in args.variant or (DECODE_VARIANTS if decode else DEFAULT_VARIANTS):
            cfg = variant_config(v)
            bm, bn, st, gm = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["num_stages"], cfg["GROUP_M"]
            ov, od, pp, mt, ss = cfg["OVERLAP"], cfg["ORDERED"], cfg["PIPE"], m_major(v), cfg["SMEM_SCALES"]
            candidates.append(("ws %s" % v, lambda bm=bm, bn=bn, st=st, gm=gm, ov=ov, od=od, pp=pp, mt=mt, ss=ss:
                               ws_launch(torch, a, b, a_s, b_s, c, bm, bn, st, gm, props.multi_processor_count, ov, od,
                                         pp, mt, smem_scales=ss)))
        for name, make in candidates:
            try:
                results.append(measure(torch, name, make(), c, ref, flop, base, decode))
            except Exception as exc:  # a probe: report and go on
                print("  %-22s failed: %s" % (name, (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]),
                      flush=True)
        good = [r for r in results[1:] if r["ok"] and r["variant"].startswith("ws")]
        if good:
            best = max(good, key=lambda r: r["tflops"])
            print("  best ws: %s x%.3f (%.0f TFLOP/s)" % (best["variant"], best["speedup"], best["tflops"]), flush=True)
        rows.append(dict(shape=spec, results=results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", default=[], help="MxNxK (repeatable); default: %s" % DEFAULT_SHAPES)
    ap.add_argument("--variant", action="append", default=[],
                    help="BMxBNxSTAGESxGROUP_M[o][p][d][s|m][t] of the WS kernel (repeatable; o: OVERLAP = 1, "
                    "p: ORDERED = 1, d: PIPE = 1, s: SMEM_SCALES = 1, m: SMEM_SCALES = 2, t: A's scales M-major); "
                    "default: %s, "
                    "decode shapes %s" % (DEFAULT_VARIANTS, DECODE_VARIANTS))
    ap.add_argument("--json", help="write every measurement here")
    args = ap.parse_args(argv)
    for v in args.variant:
        if not valid_variant(v):
            print("fp8_ws_probe: --variant %r: want BMxBNxSTAGESxGROUP_M[o][p][d][s|m][t], e.g. 128x160x4x8 or "
                  "128x128x6x8d" % v,
                  file=sys.stderr)
            return 2
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
