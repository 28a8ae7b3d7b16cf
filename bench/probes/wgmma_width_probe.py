"""Probe: the fp8 wgmma's throughput by its width N (m64nNk32, e4m3 x e4m3 -> fp32, both operands
in shared memory), in SM cycles, on the GPU node:

    python3 -m bench.probes.wgmma_width_probe [--widths 64,96,112,128,144,160,192,256] [--iters 4096]

One CTA a multiprocessor, two warpgroups (as the fp8 CUDA kernel's two consumers), each issuing
``iters`` K steps of four wgmmas into one accumulator, one commit group a step with one group left
in flight; shared memory holds zeros (the operands' values do not change the cycle count, only the
power). The cycles are ``clock64()`` around the loop, the largest over the CTAs; multiply-adds a
cycle and multiprocessor = 2 x iters x 4 x 64 x N x 32 / cycles, against 4096 (the dense fp8 peak
of an sm90 multiprocessor). Built with NVRTC (harness/compile/cuda_cpp.py) from the fp8 kernel's
sm90.cuh and wgmma wrapper; launched through the agent's ctypes driver (bench._gpu_common.open_driver).
"""
import argparse
import sys

SOURCE = r'''
#include "sm90.cuh"
#include "wgmma.h"
extern "C" __global__ void __launch_bounds__(256, 1) wgmma_width(unsigned long long* out, int iters) {
    __shared__ __align__(1024) uint8_t smem[8192 + 32768];
    const uint32_t a = smem_u32(smem), b = a + 8192;
    for (int i = threadIdx.x; i < (8192 + 32768) / 4; i += blockDim.x) st_shared(a + 4 * i, 0u);
    __syncthreads();
    float acc[WIDTH / 2];
#pragma unroll
    for (int i = 0; i < WIDTH / 2; ++i) acc[i] = 0.f;
    const unsigned long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int k = 0; k < 4; ++k) wgmma_m64nNk32(acc, smem_desc(a + k * 32), smem_desc(b + k * 32), 1);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    fence_fragment<WIDTH / 2>(acc);
    const unsigned long long t1 = clock64();
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < WIDTH / 2; ++i) sum += acc[i];
    if (threadIdx.x % 128 == 0) out[blockIdx.x * 2 + threadIdx.x / 128] = (t1 - t0) + (sum == 1.f ? 1 : 0);
}
'''


def build(width: int) -> bytes:
    from harness.compile.cuda_cpp import compile_cubin
    from harness.kernels.fp8_blockscale import cuda_kernel

    headers = {"wgmma.h": cuda_kernel.wgmma_header(width), "sm90.cuh": cuda_kernel.sm90_header()}
    cubin, _ = compile_cubin(SOURCE, "wgmma_width.cu", headers,
                             ["--gpu-architecture=sm_90a", "--std=c++17", "-DWIDTH=%d" % width])
    return cubin


def run(api, cubin: bytes, sms: int, iters: int, torch) -> int:
    """The largest of the CTAs' cycle counts, the kernel launched through the agent's driver."""
    from remote_agent.runners.gpu_launch import Params

    module = api.load_module(cubin)
    fn = api.get_function(module, "wgmma_width")
    out = torch.zeros(2 * sms, dtype=torch.int64, device="cuda")
    params = Params([{"name": "out", "type": "*i64"}, {"name": "iters", "type": "i32"}],
                    {"out": out.data_ptr(), "iters": iters}, api)
    api.launch(fn, (sms, 1, 1), (256, 1, 1), 0, params.array, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    api.unload_module(module)
    return int(out.max().item())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", default="64,96,112,128,144,160,192,256")
    ap.add_argument("--iters", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import torch
    from bench._gpu_common import open_driver

    api = open_driver()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print("width  cycles (best of %d)  multiply-adds a cycle and SM  of 4096" % args.repeats)
    for width in (int(w) for w in args.widths.split(",")):
        cubin = build(width)
        cycles = min(run(api, cubin, sms, args.iters, torch) for _ in range(args.repeats))
        macs = 2 * args.iters * 4 * 64 * width * 32 / cycles
        print("%5d  %12d  %10.0f  %6.1f %%" % (width, cycles, macs, 100 * macs / 4096))
    return 0


if __name__ == "__main__":
    sys.exit(main())
