"""Probe: one launch each of fp8 WS kernel variants, for Nsight Compute on a GPU node
(ncu reads hardware counters on the Firecracker nodes, not on gVisor ones):

    ncu --clock-control none -k regex:fp8_blockscale_ws_kernel -c 10 --section SpeedOfLight \\
        --section WarpStateStats --section ComputeWorkloadAnalysis --page details \\
        python3 -m bench.probes.fp8_ws_ncu [--shape 4096x7168x16384]

Variants, in launch order: the kernel 128 x 128 x 6 (plain), 128 x 128 x 5 PIPE, and the ceiling
probe's ``const`` copy (bench/probes/fp8_ws_ceiling.py: the same FFMAs, no scale loads) of the
plain one, then 128 x 128 x 5 with SMEM_SCALES = 1, plain and PIPE; each launched twice (ten
matching launches, two a variant: on an H100 the two of a variant read within 2 % of each other).
With --library, then torch._scaled_mm (the library row's call) twice as well:
``-k regex:"fp8_blockscale_ws_kernel|nvjet" -c 12`` profiles cuBLAS's kernel beside them.
"""
import argparse
import sys
import tempfile

from bench.probes import fp8_ws_ceiling as ceiling
from bench.probes import fp8_ws_probe as probe


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="4096x7168x16384")
    ap.add_argument("--library", action="store_true", help="also launch torch._scaled_mm twice, last")
    args = ap.parse_args(argv)
    import torch
    import triton

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    M, N, K = (int(x) for x in args.shape.split("x"))
    a, b, a_s, b_s = probe.make_inputs(torch, M, N, K)
    c = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
    const = ceiling.load_kernel(False, "const", tempfile.mkdtemp())
    variants = (("plain", dict(stages=6)), ("pipe", dict(stages=5, pipe=1)), ("const", dict(stages=6, kernel=const)),
                ("plain_s", dict(stages=5, smem_scales=1)), ("pipe_s", dict(stages=5, pipe=1, smem_scales=1)))
    for name, kw in variants:
        stages = kw.pop("stages")
        launch = probe.ws_launch(torch, a, b, a_s, b_s, c, 128, 128, stages, 8, sms, **kw)
        for _ in range(2):
            launch()
        torch.cuda.synchronize()
        print(name, "launched", flush=True)
    if args.library:
        launch = probe.scaled_mm_launch(torch, a, b, a_s, b_s, c)
        for _ in range(2):
            launch()
        torch.cuda.synchronize()
        print("torch._scaled_mm launched", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
