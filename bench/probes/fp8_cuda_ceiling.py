"""Probe: where the fp8 CUDA prefill kernel's time and power go at the power cap (on the GPU node):

    python3 -m bench.probes.fp8_cuda_ceiling [--shapes 4096x7168x16384 ...] [--tiles 256x128x3 ...] [--json OUT]

Builds probe-only copies of harness/kernels/fp8_blockscale/cuda_kernel.cu (its text patched here;
the product kernel is not touched) with NVRTC, launches them through the agent's ctypes driver with
the tensor maps the agent would make, and times each as the agent times a job, with power and
clock (bench/probes/fp8_power_ceiling.py's windows: the flush written before every launch):

* ``kernel``: the product kernel (its answer checked against an fp32 reference first);
* ``no loads``: the loader fills each ring slot once and then only arrives on the slot's full
  barrier, so the consumers run the same wgmmas, waits and promotions on stale shared memory with
  no TMA traffic, no L2 or memory reads (answers wrong; one CTA a cluster only);
* ``L2 only``: the loader loads the operands of tile (mb % 4, nb % 4) for tile (mb, nb): the same
  copies, from 16 tiles' operands that stay in L2 (after the flush's first touch), so almost
  nothing from memory (answers wrong): what reading the operands from memory costs;
* ``lib``: torch._scaled_mm with blockwise scales on the same operands (the agent's library row).

If ``no loads`` runs near fp8_power_ceiling's MMA loops, what holds the kernel back is moving the
operands (their energy under the cap, or their latency); if it stays near the kernel, it is the
consumers' own work. ``L2 only`` then splits moving them into memory's part and L2's.
"""
import argparse
import functools
import sys
import types

from bench.probes.fp8_power_ceiling import FLUSH_BYTES, run_and_report

LOADS = """            mbar_wait(ring.empty(s), ring.phase ^ 1);
            mbar_expect_tx(bar, A_BYTES + B_BYTES + SA_BYTES);"""
NO_LOADS = """            mbar_wait(ring.empty(s), ring.phase ^ 1);
            if (filled++ >= STAGES) {  // probe: the slot keeps what it holds
                mbar_arrive(bar);
                ring.advance();
                continue;
            }
            mbar_expect_tx(bar, A_BYTES + B_BYTES + SA_BYTES);"""
LOADER_LOOP = """    const uint32_t smem = ring.base;
    for (int t = first; t < tiles; t += step) {"""
TILE = """        tile_at(t, units_m, units_n, rank, mb, nb);
        for (int kb = 0; kb < ks; ++kb) {"""
PATCHES = {
    "kernel": [],
    "no loads": [(LOADER_LOOP, LOADER_LOOP.replace("ring.base;", "ring.base;\n    int filled = 0;")),
                 (LOADS, NO_LOADS)],
    "L2 only": [(TILE, TILE.replace("rank, mb, nb);", "rank, mb, nb);\n        mb %= 4, nb %= 4;"))],
}


def tile_config(text):
    bm, bn, stages = (int(x) for x in text.split("x"))
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "num_stages": stages, "GROUP_M": 8, "PIPE": 0,
            "num_ctas": 1, "SHARE_A": 0, "CUDA": 1}


@functools.lru_cache(maxsize=None)
def build(tile, variant):
    """(cubin, launch facts) of the kernel's source with ``variant``'s patches, for a BMxBNxSTAGES tile."""
    from harness.compile.cuda_cpp import compile_cubin, ptxas_facts
    from harness.kernels.fp8_blockscale import cuda_kernel

    config = tile_config(tile)
    with open(cuda_kernel.SOURCE) as f:
        source = f.read()
    for old, new in PATCHES[variant]:
        if old not in source:
            raise SystemExit("%s: the kernel's source no longer has the text this probe patches" % variant)
        source = source.replace(old, new)
    options = ["--gpu-architecture=sm_90a", "--std=c++17", "--ptxas-options=-v"]
    options += ["-D%s=%d" % kv for kv in sorted(cuda_kernel.defines(config).items())]
    cubin, log = compile_cubin(source, "cuda_kernel.cu", cuda_kernel.headers(config), options)
    facts = ptxas_facts(log)
    if facts["spill_bytes"]:
        raise SystemExit("%s %s spills %d bytes" % (tile, variant, facts["spill_bytes"]))
    return cubin, cuda_kernel.launch_facts(config)


def kernel_launch(api, torch, tile, variant, ops):
    from harness.kernels.fp8_blockscale import cuda_kernel, strides
    from remote_agent.runners.gpu_launch import Kernel

    a, b, a_s, b_s, a_st, c = ops
    M, K = a.shape
    N = b.shape[0]
    config = tile_config(tile)
    image, launch = build(tile, variant)
    kernel = Kernel(api, image, launch)
    values = dict(strides(types.SimpleNamespace(M=M, N=N, K=K)), M=M, N=N, K=K, a_ptr=a.data_ptr(),
                  b_ptr=b.data_ptr(), a_scale_t_ptr=a_st.data_ptr(), c_ptr=c.data_ptr(), b_scale_ptr=b_s.data_ptr())
    grid = (min(cuda_kernel.units(config, M, N), torch.cuda.get_device_properties(0).multi_processor_count), 1, 1)
    params = kernel.params(values, grid)
    return lambda: kernel.run(grid, params, torch.cuda.current_stream().cuda_stream), (kernel, params)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="*", default=["4096x7168x16384", "4096x51200x5120", "2048x7168x18432"])
    ap.add_argument("--tiles", nargs="*", default=["256x128x3", "128x256x3"], help="BMxBNxSTAGES, one CTA")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import torch
    from bench._gpu_common import open_driver
    from bench.probes import fp8_ws_probe as ws
    from bench.probes.gpu_energy_probe import Energy

    api = open_driver()
    energy = Energy()
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    items, keep = [], []
    for text in args.shapes:
        M, N, K = (int(x) for x in text.split("x"))
        a, b, a_s, b_s = ws.make_inputs(torch, M, N, K)
        ref = ws.reference(torch, a, b, a_s, b_s)
        ops = (a, b, a_s, b_s, a_s.t().contiguous(), torch.empty((M, N), device="cuda", dtype=torch.bfloat16))
        flop = 2.0 * M * N * K
        items.append(("%s lib" % text, ws.scaled_mm_launch(torch, a, b, a_s, b_s, ops[5]), flop))
        for tile in args.tiles:
            for variant in PATCHES:
                launch, held = kernel_launch(api, torch, tile, variant, ops)
                keep.append(held)
                if variant == "kernel":
                    ops[5].fill_(float("nan"))
                    launch()
                    torch.cuda.synchronize()
                    err = ws.rel_err(torch, ops[5], ref)
                    if not err <= 1e-2:
                        raise SystemExit("%s %s: wrong answer (relative error %.3g)" % (text, tile, err))
                items.append(("%s %s %s" % (text, tile, variant), launch, flop))
        del ref
    run_and_report(torch, energy, flush, items, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
