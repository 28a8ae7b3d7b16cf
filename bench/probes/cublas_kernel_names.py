"""Probe: which cuBLAS kernel torch._scaled_mm runs for fp8 block-scaled GEMMs (1 x 128 scales on A,
128 x 128 on B, bf16 out), the library row of fp8_blockscale: its name says the tile, the cluster
and the schedule. On the GPU node:

    python3 -m bench.probes.cublas_kernel_names [--shape 4096x7168x16384 ...]

Prints per shape each CUDA kernel the profiler saw, its calls and mean time (back to back, no L2
flush: faster than the agent's timing of the same call).
"""

import argparse


def main():
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", action="append")
    args = ap.parse_args()
    shapes = args.shape or ["4096x7168x16384", "4096x4096x7168", "4096x24576x1536", "512x7168x16384",
                            "16x7168x2048"]
    print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
    for spec in shapes:
        M, N, K = map(int, spec.split("x"))
        # codes uniform over the format's range, as the agent's fill kernel makes them (power, and so
        # the clock, depends on the bits that toggle)
        a = (torch.rand(M, K, device="cuda") * 448 - 224).to(torch.float8_e4m3fn)
        b = (torch.rand(N, K, device="cuda") * 448 - 224).to(torch.float8_e4m3fn)
        kb, nb = -(-K // 128), -(-N // 128)
        sa = torch.rand(kb, M, device="cuda").t()  # M-major, as torch wants
        sb = torch.rand(nb, kb, device="cuda").t()  # as the library row passes them
        run = lambda: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)
        for _ in range(5):
            run()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                run()
            torch.cuda.synchronize()
        print(spec)
        for e in prof.key_averages():
            if e.device_type == torch.autograd.DeviceType.CUDA or getattr(e, "device_time_total", 0):
                calls = e.count
                mean = getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0)) / max(1, calls)
                print("  %5d calls %9.1f us  %s" % (calls, mean, e.key[:300]))


if __name__ == "__main__":
    main()
