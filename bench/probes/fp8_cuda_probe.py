"""Probe: what a CUDA C++ fp8 block-scaled GEMM (bench/probes/fp8_cuda_gemm.cu) reaches on the
node, against torch._scaled_mm with blockwise scales, in one process.

The Gluon kernel's frame stops near 1,300 TFLOP/s on 128 x 128 tiles (docs/fp8.md, the ceiling
probe) and cannot take wider ones: Triton's tensors are powers of two, and 128 x 256 needs 256
registers for the promotion. This probe asks whether the frame DeepGEMM uses (tiles 128 x BN with
BN any multiple of 8, consumers at 232 registers by setmaxnreg) does better on the same GPU.

    python3 -m bench.probes.fp8_cuda_probe build OUT [--config 128x6 ...]   # host: nvcc, one cubin a config
    python3 -m bench.probes.fp8_cuda_probe run OUT [--shape MxNxK ...] [--json F]   # node: torch and the cubins

A config is BNxSTAGES[xGROUP_M][h][d][k][a][e][r][c][n] (GROUP_M 8 by default; d: PIPE, two partials a
consumer, its promotion under the next K step's wgmmas, BN <= 128; k: clusters of two CTAs on
adjacent row blocks, B multicast (each CTA loads half its rows into both); e: the epilogue through
shared memory and TMA stores; h: 256-row tiles (each consumer two 64-row waves); a: with k, the
CTAs share A (adjacent column blocks) instead of B; r: the plain consumer's K loop unrolled 8 times; c: CHAIN, no promotion, the wgmmas
accumulate the whole K; n: NOLOAD, the ring loaded once and reused: c and n give wrong answers and
time what the frame does without the promotion or the memory traffic). ``build`` prints ptxas's registers and
spills per config. ``run`` checks every answer against the fp32 reference of the dequantized
inputs (relative error norm, tolerance 1e-2) and times each config and the library with
triton.testing.do_bench medians (L2 flushed), as bench/probes/fp8_ws_probe.py does.
"""
import argparse
import ctypes
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "fp8_cuda_gemm.cu")
DEFAULT_CONFIGS = ["128x6", "192x5", "160x5", "176x5", "144x6", "112x6"]
DEFAULT_SHAPES = ["4096x7168x16384", "4096x4096x7168", "1024x7168x16384", "4096x2112x7168", "4096x24576x1536",
                  "4096x7168x2048", "2048x7168x4096", "8192x4096x4096"]
BM, BK, MAX_KS = 128, 128, 512


FLAGS = {"h": "BM", "d": "PIPE", "k": "CLUSTER", "a": "MCAST_A", "e": "EPI", "r": "UNROLL", "c": "CHAIN",
         "n": "NOLOAD", "u": "MCAST0", "w": "MCAST2"}


def parse_config(text):
    body = text.rstrip("".join(FLAGS))
    flags = text[len(body):]
    try:
        parts = [int(x) for x in body.split("x")]
    except ValueError:
        parts = []
    if len(parts) not in (2, 3) or parts[0] % 8 or not 8 <= parts[0] <= 256 or (flags.count("d") and parts[0] > 128):
        raise SystemExit("fp8_cuda_probe: --config %r: want BNxSTAGES[xGROUP_M][d][k][c][n], BN a multiple of 8 "
                         "(d: PIPE, BN <= 128; k: clusters of two; c: CHAIN; n: NOLOAD)" % text)
    cfg = {"BN": parts[0], "STAGES": parts[1], "GROUP_M": parts[2] if len(parts) == 3 else 8}
    cfg.update({macro: int(letter in flags) for letter, macro in FLAGS.items()})
    cfg["CLUSTER"] += 1  # k: clusters of two CTAs
    cfg["MCAST"] = 0 if cfg.pop("MCAST0") else 2 if cfg.pop("MCAST2") else 1
    cfg["UNROLL"] = 8 if cfg["UNROLL"] else 1  # r: the plain consumer's K loop unrolled 8 times
    cfg["BM"] = 256 if cfg["BM"] else 128  # h: 256-row tiles, two waves a consumer
    return cfg


def config_name(cfg):
    return "%dx%dx%d" % (cfg["BN"], cfg["STAGES"], cfg["GROUP_M"]) + "".join(
        letter for letter, macro in FLAGS.items() if cfg.get(macro, 0) > {"CLUSTER": 1, "UNROLL": 1, "BM": 128}.get(macro, 0)) + (
        {0: "u", 1: "", 2: "w"}[cfg.get("MCAST", 1)] if cfg.get("CLUSTER", 1) > 1 else "")


def shared_bytes(cfg):
    """The kernel's dynamic shared memory: the ring, the tile's B scales, the barriers, and 1024
    bytes to align the ring (as fp8_cuda_gemm.cu lays it out)."""
    stages, bm, bn = cfg["STAGES"], cfg.get("BM", BM), cfg["BN"]
    d_off = -(-(stages * (bm * BK + bn * BK + bm * 4) + 2 * MAX_KS * 4) // 1024) * 1024
    return d_off + (bm * bn * 2 if cfg.get("EPI") else 0) + 2 * stages * 8 + 1024


def wgmma_header(bn):
    """The wgmma wrapper for m64n{bn}k32, fp8 e4m3 x e4m3 -> fp32, both operands in shared memory."""
    n = bn // 2
    regs = ", ".join("%%%d" % i for i in range(n))
    outs = ", ".join('"+f"(d[%d])' % i for i in range(n))
    return ("#pragma once\n#include <stdint.h>\n"
            "__device__ __forceinline__ void wgmma_m64nBNk32(float* d, uint64_t da, uint64_t db, int scale_d) {\n"
            "  asm volatile(\"{\\n .reg .pred p;\\n setp.ne.b32 p, %%%d, 0;\\n"
            " wgmma.mma_async.sync.aligned.m64n%dk32.f32.e4m3.e4m3 {%s}, %%%d, %%%d, p, 1, 1;\\n}\\n\"\n"
            "    : %s\n    : \"l\"(da), \"l\"(db), \"r\"(scale_d));\n}\n") % (n + 2, bn, regs, n, n + 1, outs)


def build(out, configs):
    os.makedirs(out, exist_ok=True)
    built = []
    for cfg in configs:
        name = config_name(cfg)
        inc = os.path.join(out, "inc_" + name)
        os.makedirs(inc, exist_ok=True)
        with open(os.path.join(inc, "wgmma_gen.h"), "w") as f:
            f.write(wgmma_header(cfg["BN"]))
        cubin = os.path.join(out, "fp8_%s.cubin" % name)
        cmd = ["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v", "-I", inc,
               "-o", cubin, SOURCE] + ["-D%s=%d" % (k, cfg.get(k, 0)) for k in ("BM", "BN", "STAGES", "GROUP_M", "PIPE", "MCAST_A",
                                                                             "CLUSTER", "MCAST", "EPI", "UNROLL", "CHAIN",
                                                                             "NOLOAD")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        log = proc.stdout + proc.stderr
        if proc.returncode:
            print("%s: nvcc failed\n%s" % (name, log[-3000:]), flush=True)
            continue
        regs = re.findall(r"Used (\d+) registers", log)
        spill = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
        print("%s: %s registers, spills %s, shared %d bytes" % (name, regs, spill, shared_bytes(cfg)), flush=True)
        built.append(dict(cfg, cubin=os.path.basename(cubin)))
    with open(os.path.join(out, "configs.json"), "w") as f:
        json.dump(built, f, indent=1)
    return built


def max_active_clusters(api, fn, ctas, shared, sms):
    """How many clusters of ``ctas`` CTAs of ``fn`` the GPU holds at once (cuOccupancyMaxActiveClusters):
    a GPC places whole clusters, so fewer than sms / ctas where a GPC has an odd count of free SMs."""
    from remote_agent.runners import cuda as cu

    attrs = (cu.LaunchAttribute * 1)()
    attrs[0].id = cu.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attrs[0].value[0], attrs[0].value[1], attrs[0].value[2] = ctas, 1, 1
    config = cu.LaunchConfig((ctypes.c_uint * 3)(sms // ctas * ctas, 1, 1), (ctypes.c_uint * 3)(384, 1, 1), shared,
                             None, attrs, 1)
    count = ctypes.c_int()
    rc = api.lib.cuOccupancyMaxActiveClusters(ctypes.byref(count), ctypes.c_void_p(fn), ctypes.byref(config))
    api.check(rc, "cuOccupancyMaxActiveClusters")
    return count.value


class CudaGemm(object):
    """A config's cubin bound to torch tensors; call() launches it on torch's stream."""

    def __init__(self, api, image, cfg, a, b, a_scale_t, b_scale, c, sms):
        import torch

        self.api, self.cfg = api, cfg
        self.fn = api.get_function(api.load_module(image), "fp8_gemm")
        self.shared = shared_bytes(cfg)
        api.set_dynamic_shared(self.fn, self.shared)
        M, K = a.shape
        N = b.shape[0]
        ks = a_scale_t.shape[0]
        self.maps = [ctypes.create_string_buffer(192) for _ in range(4)]
        addr = [(ctypes.addressof(m) + 63) // 64 * 64 for m in self.maps]
        u8, f32 = 0, 7  # CU_TENSOR_MAP_DATA_TYPE_UINT8, _FLOAT32
        bm = cfg.get("BM", BM)
        self.ctas = cfg.get("CLUSTER", 1)  # a multicast operand's box: a CTA's share of the tile's rows
        share_a = self.ctas if cfg.get("MCAST_A") else 1
        share_b = self.ctas if cfg.get("MCAST", 1) == 1 and not cfg.get("MCAST_A") else 1
        api.encode_tensor_map(addr[0], a.data_ptr(), u8, 1, (M, K), (K, 1), (bm // share_a, BK), 3)
        api.encode_tensor_map(addr[1], b.data_ptr(), u8, 1, (N, K), (K, 1), (cfg["BN"] // share_b, BK), 3)
        api.encode_tensor_map(addr[2], a_scale_t.data_ptr(), f32, 4, (ks, M), (M, 1), (1, bm), 0)
        api.encode_tensor_map(addr[3], c.data_ptr(), 9, 2, (M, N), (N, 1), (bm, 64), 3)  # 9: BFLOAT16; EPI's stores
        self.values = [ctypes.c_uint64(b_scale.data_ptr()), ctypes.c_uint64(c.data_ptr()), ctypes.c_int32(M),
                       ctypes.c_int32(N), ctypes.c_int32(K)]
        pointers = addr + [ctypes.addressof(v) for v in self.values]
        self.params = (ctypes.c_void_p * len(pointers))(*pointers)
        units = (-(-M // bm) * -(-N // (cfg["BN"] * self.ctas)) if cfg.get("MCAST_A")
                 else -(-M // (bm * self.ctas)) * -(-N // cfg["BN"]))  # a cluster's tiles at a time
        self.resident = max_active_clusters(api, self.fn, self.ctas, self.shared, sms) if self.ctas > 1 else sms
        self.grid = (min(units, self.resident), 1, 1)  # clusters
        self.torch = torch
        self.facts = api.function_facts(self.fn)

    def __call__(self):
        stream = self.torch.cuda.current_stream().cuda_stream
        if self.ctas > 1:
            self.api.launch_cluster(self.fn, self.grid, self.ctas, (384, 1, 1), self.shared, self.params, stream)
        else:
            self.api.launch(self.fn, self.grid, (384, 1, 1), self.shared, self.params, stream)


def run(out, shapes, json_path=None):
    import torch

    from bench._gpu_common import open_driver
    from bench.probes import fp8_ws_probe as ws

    api = open_driver()
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    with open(os.path.join(out, "configs.json")) as f:
        configs = json.load(f)
    images = {}
    for cfg in configs:
        with open(os.path.join(out, cfg["cubin"]), "rb") as f:
            images[config_name(cfg)] = f.read()
    print("device %s, %d SMs, torch %s; configs %s" % (props.name, sms, torch.__version__, list(images)), flush=True)
    rows = []
    for spec in shapes:
        M, N, K = (int(x) for x in spec.split("x"))
        a, b, a_s, b_s = ws.make_inputs(torch, M, N, K)
        ref = ws.reference(torch, a, b, a_s, b_s)
        a_st = a_s.t().contiguous()
        c = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
        flop = 2.0 * M * N * K
        print("%s (%.2f TFLOP)" % (spec, flop / 1e12), flush=True)
        try:
            lib = ws.measure(torch, "torch._scaled_mm", ws.scaled_mm_launch(torch, a, b, a_s, b_s, c), c, ref, flop,
                             None)
            base = lib["us"] / 1e3
        except RuntimeError as exc:  # e.g. K / 128 not a multiple of 4: "Invalid scaling configuration"
            print("  %-22s failed: %s" % ("torch._scaled_mm", str(exc).strip().splitlines()[0][:200]), flush=True)
            lib, base = dict(variant="torch._scaled_mm", ok=False), None
        results = [lib]
        for cfg in configs:
            name = "cuda " + config_name(cfg)
            try:
                gemm = CudaGemm(api, images[config_name(cfg)], cfg, a, b, a_st, b_s, c, sms)
                if gemm.ctas > 1:
                    name += " (%d clusters)" % gemm.grid[0]
                r = ws.measure(torch, name, gemm, c, ref, flop, base)
                r.update(gemm.facts)
                results.append(r)
            except Exception as exc:  # a probe: report and go on
                print("  %-22s failed: %s" % (name, str(exc)[:300]), flush=True)
        good = [r for r in results[1:] if r["ok"]]
        if good:
            best = max(good, key=lambda r: r["tflops"])
            print("  best: %s x%.3f (%.0f TFLOP/s)" % (best["variant"], best["speedup"], best["tflops"]), flush=True)
        rows.append(dict(shape=spec, results=results))
    summarize(rows)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


def summarize(rows):
    """Per shape the best correct config against the library; their geomean and the worst."""
    import math

    ratios = []
    for row in rows:
        good = [r for r in row["results"][1:] if r.get("ok")]
        if good and row["results"][0].get("ok"):
            best = max(good, key=lambda r: r["tflops"])
            ratios.append(best["speedup"])
            print("%-18s library %5.0f  best %-28s %5.0f TFLOP/s  x%.3f" % (
                row["shape"], row["results"][0]["tflops"], best["variant"], best["tflops"], best["speedup"]))
    if ratios:
        print("best config per shape over torch._scaled_mm: geomean %.3f over %d shapes, worst %.3f" % (
            math.exp(sum(math.log(r) for r in ratios) / len(ratios)), len(ratios), min(ratios)), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="(host) nvcc one cubin a config into OUT")
    b.add_argument("out")
    b.add_argument("--config", action="append", default=[], help="BNxSTAGES[xGROUP_M]; default %s" % DEFAULT_CONFIGS)
    r = sub.add_parser("run", help="(node) time OUT's cubins against torch._scaled_mm")
    r.add_argument("out")
    r.add_argument("--shape", action="append", default=[], help="MxNxK; default %s" % DEFAULT_SHAPES)
    r.add_argument("--json")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        build(args.out, [parse_config(c) for c in args.config or DEFAULT_CONFIGS])
    else:
        run(args.out, args.shape or DEFAULT_SHAPES, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
