"""Probe: what the fp8 tensor cores alone sustain at the power cap, against the library's fp8
GEMMs on the largest prefill shapes, timed as the agent times a job (on the GPU node):

    python3 -m bench.probes.fp8_power_ceiling [--seconds 1.5] [--shapes 4096x7168x16384 ...] [--json OUT]

Why: issue 42 asks 1,300 TFLOP/s of the fp8 block-scaled GEMM on shapes of 0.5 TFLOP or more, by
the agent's timing, on an H200 held at its 700 W cap. A GEMM can go no faster than its
multiply-adds alone, fed from shared memory with no load from memory at all, at the clock the cap
leaves them; and the energy of an fp8 multiply-add depends on the operands' bits, so the ceiling is
measured with the agent's test data (fp8 codes uniform in [-224, 224], kernels' fill_kernel).

What is timed, each in windows of ``--seconds`` after a warm-up of a third of that, as the agent
times (docs: remote_agent/profilers/events.py): the 256 MiB flush buffer written before every launch,
an event pair around the launch, the median launch; NVML's energy counter gives the mean power
over the window (the flushes included) and its SM clock is read after every chunk of launches:

* ``mma N`` (N = 128 or 256): one CTA a multiprocessor, two warpgroups (as the CUDA kernel's two
  consumers), each issuing K steps of four m64nNk32 wgmmas (e4m3 x e4m3 -> fp32) into one
  accumulator, one commit group a step with one left in flight; the operands cycle through four
  stages of shared memory (two warpgroups x two 64-row waves of A and N rows of B a stage, 128
  bytes of K a row; three stages for N = 256) filled from random codes, so that consecutive steps
  read other bits as a GEMM's do. ``zeros``: the same with zeros (the power the bits cost).
* ``promote 128``: each step into a zeroed partial, waited for, then ``total += partial x scale``
  (the block-scaled GEMM's promotion), the two warpgroups starting together; ``staggered``:
  warpgroup 1 issues its first step once warpgroup 0's first is done; ``staggered at issue``: once
  warpgroup 0's first is issued; ``ordered``: each warpgroup issues a step only once the other's
  step before it is done (tokens passed by named barriers). Whether the promotion runs under the
  other warpgroup's wgmmas depends on the order in which the tensor cores take the two
  warpgroups' wgmmas, which these tell apart.
* per shape, ``torch._scaled_mm`` with blockwise scales (the issue's library, the agent's call)
  and with one scale a tensor (cuBLASLt's plain fp8 GEMM: no scale blocks to promote).

A loop's launch is sized to about the time of the largest shape's GEMM, so that the flush takes
the same share of each window. No answer is checked: the probe measures throughput (the product's
answers are the agent's to check).
"""
import argparse
import json
import statistics
import sys
import time

SOURCE = r'''
#include "sm90.cuh"
#include "wgmma.h"
#define STAGE_BYTES (4 * 8192 + WIDTH * 128)
#define STAGES (WIDTH > 128 ? 3 : 4)
// MODE 0: MMAs only (one group left in flight); 1: each step waited for and promoted; 2: as 1, with
// warpgroup 1's first step issued once warpgroup 0's first is done (a stagger of one step's MMAs);
// 3: as 1, each warpgroup issuing a step only once the other's step before it is done (tokens
// passed by named barriers); 4: as 2, warpgroup 1's first step issued once warpgroup 0's first is
// issued (the order in which the tensor cores take them)
__device__ __forceinline__ void named_arrive(uint32_t id, uint32_t threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void issue(float* acc, uint32_t base, int wg, int it, bool zero) {
    const uint32_t stage = base + ((it >> 1) % STAGES) * STAGE_BYTES;
    const uint32_t a = stage + (wg * 2 + (it & 1)) * 8192, b = stage + 4 * 8192;
    fence_fragment<WIDTH / 2>(acc);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int k = 0; k < 4; ++k)
        wgmma_m64nNk32(acc, smem_desc(a + k * 32), smem_desc(b + k * 32), zero && k == 0 ? 0 : 1);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    fence_fragment<WIDTH / 2>(acc);
}
__device__ __forceinline__ void wait_all(float* acc) {
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    fence_fragment<WIDTH / 2>(acc);
}
__device__ __forceinline__ void promote(float* total, const float* acc, float s) {
#pragma unroll
    for (int i = 0; i < WIDTH / 2; ++i) total[i] = fmaf(acc[i], s, total[i]);
}
extern "C" __global__ void __launch_bounds__(256, 1) mma_loop(const uint4* src, float* out, int iters, float scale) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const int words = STAGES * STAGE_BYTES / 16;
    for (int i = threadIdx.x; i < words; i += blockDim.x) {
        const uint4 v = src[i];
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(base + 16 * i), "r"(v.x), "r"(v.y), "r"(v.z),
                     "r"(v.w));
    }
    __syncthreads();
    const int wg = threadIdx.x / 128;
    float acc[WIDTH / 2], total[WIDTH / 2];
#pragma unroll
    for (int i = 0; i < WIDTH / 2; ++i) acc[i] = total[i] = 0.f;
#if MODE == 0
    for (int it = 0; it < iters; ++it) {
        issue(acc, base, wg, it, false);
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    fence_fragment<WIDTH / 2>(acc);
#pragma unroll
    for (int i = 0; i < WIDTH / 2; ++i) total[i] = acc[i];
#else
    for (int it = 0; it < iters; ++it) {
        if ((MODE == 2 || MODE == 4) && wg == 1 && it == 0) named_sync(1, 256);
        if (MODE == 3 && (wg == 1 || it > 0)) named_sync(1 + wg, 256);
        issue(acc, base, wg, it, true);
        if (MODE == 4 && wg == 0 && it == 0) named_arrive(1, 256);
        wait_all(acc);
        if (MODE == 2 && wg == 0 && it == 0) named_arrive(1, 256);
        if (MODE == 3) named_arrive(2 - wg, 256);
        promote(total, acc, scale * (float)(it & 7));
    }
    if (MODE == 3 && wg == 0) named_sync(1, 256);
#endif
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < WIDTH / 2; ++i) sum += total[i];
    if (sum == 12345.f) out[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // keeps the loop
}
'''
FLUSH_BYTES = 256 << 20
SMS = 132
LOOPS = [("mma 128", 128, 0, "random"), ("mma 128 zeros", 128, 0, "zeros"), ("mma 256", 256, 0, "random"),
         ("promote 128", 128, 1, "random"), ("promote 128 staggered", 128, 2, "random"),
         ("promote 128 ordered", 128, 3, "random"), ("promote 128 staggered at issue", 128, 4, "random")]
DEFAULT_SHAPES = ["4096x36864x7168", "4096x51200x5120", "4096x5120x25600", "4096x7168x16384",
                  "4096x16384x5120", "2048x7168x18432"]
FILL = 224.0


def random_codes(torch, n, zeros=False):
    if zeros:
        return torch.zeros(n, dtype=torch.uint8, device="cuda")
    return ((torch.rand(n, device="cuda") * 2 - 1) * FILL).to(torch.float8_e4m3fn).view(torch.uint8)


class Loop(object):
    """One mma_loop build, bound to its operands; __call__ launches it through the agent's driver
    (``api``: bench._gpu_common.open_driver) on torch's stream."""

    def __init__(self, api, torch, width, mode, data, iters):
        from harness.compile.cuda_cpp import compile_cubin
        from harness.kernels.fp8_blockscale import cuda_kernel
        from remote_agent.runners.gpu_launch import Params

        headers = {"wgmma.h": cuda_kernel.wgmma_header(width), "sm90.cuh": cuda_kernel.sm90_header()}
        cubin, _ = compile_cubin(SOURCE, "mma_loop.cu", headers, ["--gpu-architecture=sm_90a", "--std=c++17",
                                                                  "-DWIDTH=%d" % width, "-DMODE=%d" % mode])
        self.api, self.torch, self.width, self.iters = api, torch, width, iters
        self.fn = api.get_function(api.load_module(cubin), "mma_loop")
        self.smem = (3 if width > 128 else 4) * (4 * 8192 + width * 128) + 1024
        api.set_dynamic_shared(self.fn, self.smem)
        self.src = random_codes(torch, self.smem - 1024, zeros=data == "zeros")
        self.out = torch.zeros(SMS * 256, dtype=torch.float32, device="cuda")
        self.params = Params([{"name": "src", "type": "*u8"}, {"name": "out", "type": "*fp32"},
                              {"name": "iters", "type": "i32"}, {"name": "scale", "type": "fp32"}],
                             {"src": self.src.data_ptr(), "out": self.out.data_ptr(), "iters": iters,
                              "scale": 1.0 / 1024}, api)

    def flops(self):
        return 2.0 * SMS * 2 * self.iters * 4 * 64 * self.width * 32

    def __call__(self):
        self.api.launch(self.fn, (SMS, 1, 1), (256, 1, 1), self.smem, self.params.array,
                        self.torch.cuda.current_stream().cuda_stream)


def library(torch, M, N, K, blockwise):
    """torch._scaled_mm on random codes: blockwise (A 1 x 128, B 128 x 128, as the agent's library
    row) or one fp32 scale a tensor."""
    a = random_codes(torch, M * K).view(torch.float8_e4m3fn).view(M, K)
    b = random_codes(torch, N * K).view(torch.float8_e4m3fn).view(N, K)
    c = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    if blockwise:
        sk = -(-K // 128)
        sa = torch.exp2(-8 + 4 * torch.rand(M, sk, device="cuda")).t().contiguous().t()
        sb = torch.zeros(-(-N // 128), -(-sk // 4) * 4, device="cuda")[:, :sk]
        sb.copy_(torch.exp2(-8 + 4 * torch.rand(sb.shape, device="cuda")))
        sb = sb.t()
    else:
        sa = torch.tensor(2.0 ** -6, device="cuda")
        sb = torch.tensor(2.0 ** -6, device="cuda")
    return lambda: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, out=c)


def window(torch, energy, launch, flush, seconds, chunk=20):
    """Launches for ``seconds``, each after writing the flush buffer, timed by an event pair: the
    median launch (ms), mean W over the window, the median SM clock (read after each chunk)."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2 * chunk)]
    times, clocks = [], []
    mj0, t0 = energy.millijoules(), time.time()
    while time.time() - t0 < seconds:
        for i in range(chunk):
            flush.zero_()
            events[2 * i].record()
            launch()
            events[2 * i + 1].record()
        torch.cuda.synchronize()
        times += [events[2 * i].elapsed_time(events[2 * i + 1]) for i in range(chunk)]
        clocks.append(energy.sm_mhz())
    wall, mj1 = time.time() - t0, energy.millijoules()
    watts = (mj1 - mj0) / 1e3 / wall if mj0 is not None and mj1 is not None else None
    return {"ms": statistics.median(times), "watts": watts,
            "mhz": statistics.median(clocks) if None not in clocks else None}


def measure(torch, energy, flush, items, seconds, rounds):
    """Each item's windows in palindromic rounds (after a warm-up window of a third of ``seconds``):
    {name: [window, ...]}."""
    from bench._gpu_common import palindromic

    out = {name: [] for name, _, _ in items}
    for order in palindromic(len(items), rounds):
        for i in order:
            name, launch, _ = items[i]
            window(torch, energy, launch, flush, seconds / 3)
            out[name].append(window(torch, energy, launch, flush, seconds))
            print("  %-40s %8.1f us %6.0f W %5.0f MHz" % (name, out[name][-1]["ms"] * 1e3, out[name][-1]["watts"] or 0,
                                                         out[name][-1]["mhz"] or 0), flush=True)
    return out


def summary(items, out):
    rows = []
    for name, _, flops in items:
        ms = statistics.median(w["ms"] for w in out[name])
        watts = [w["watts"] for w in out[name] if w["watts"]]
        mhz = [w["mhz"] for w in out[name] if w["mhz"]]
        rows.append({"name": name, "us": ms * 1e3, "tflops": flops / ms / 1e9,
                     "watts": statistics.median(watts) if watts else None,
                     "mhz": statistics.median(mhz) if mhz else None})
    return rows


def run_and_report(torch, energy, flush, items, args):
    """Measures ``items`` (name, launch, flop) as ``measure`` does, prints their table and writes
    ``args.json`` where given."""
    print("power limit %s W; %d items, %d rounds of %.1f s windows" % (energy.power_limit_w(), len(items), args.rounds,
                                                                       args.seconds), flush=True)
    out = measure(torch, energy, flush, items, args.seconds, args.rounds)
    rows = summary(items, out)
    print("\n%-40s %9s %9s %6s %6s" % ("item", "us", "TFLOP/s", "W", "MHz"))
    for r in rows:
        print("%-40s %9.1f %9.0f %6.0f %6.0f" % (r["name"], r["us"], r["tflops"], r["watts"] or 0, r["mhz"] or 0))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "windows": out, "power_limit_w": energy.power_limit_w()}, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.5, help="each timed window (default 1.5)")
    ap.add_argument("--rounds", type=int, default=2, help="palindromic rounds (default 2)")
    ap.add_argument("--shapes", nargs="*", default=DEFAULT_SHAPES, help="MxNxK of the library's rows")
    ap.add_argument("--json", help="write the windows and the summary here")
    args = ap.parse_args(argv)
    import torch
    from bench._gpu_common import open_driver
    from bench.probes.gpu_energy_probe import Energy

    api = open_driver()
    energy = Energy()
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    items = []
    for text in args.shapes:
        M, N, K = (int(x) for x in text.split("x"))
        for blockwise in (True, False):
            items.append(("%s %s" % (text, "blockwise" if blockwise else "per-tensor"),
                          library(torch, M, N, K, blockwise), 2.0 * M * N * K))
    loops = []
    for name, width, mode, data in LOOPS:
        loop = Loop(api, torch, width, mode, data, iters=2048 * 128 // width)
        loops.append(loop)
        items.append((name, loop, loop.flops()))
    for _, launch, _ in items:
        launch()
    torch.cuda.synchronize()
    run_and_report(torch, energy, flush, items, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
