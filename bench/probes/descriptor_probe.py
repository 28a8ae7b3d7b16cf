"""Descriptor probe: what making tensor descriptors inside the kernel costs (run on the GPU node;
about a minute on an H200).

    python3 -m bench.probes.descriptor_probe

One tile a program, the same TMA main loop three ways: given A, B and C descriptors made on the
host (``host``), making the three itself with ``tl.make_tensor_descriptor`` (``dev``: every program
writes and fences them before its first load), and the harness's own kernel (harness/kernels/
matmul/triton_kernel.py, TMA = 1, PERSISTENT = 0: host-made A and B descriptors since 2026-11-24,
C stored through pointers), on six prefill shapes and four tiles; torch.matmul beside them. Every
launch is checked against torch (rel. error under 1e-2); do_bench medians, all of a shape's
kernels timed in four windows in palindromic order. Prints per shape and tile the three times,
dev/host, harness/dev and cuBLAS/host, then the geomean of dev/host.
"""
import statistics

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from bench._gpu_common import palindromic_windows, rel_err
from bench.probes.streamk_probe import REL_TOL, Probe, load_matmul_module, parse_shape


TK = load_matmul_module("triton_kernel")
_tile_of = TK._tile_of  # the harness kernel's GROUP_M order


@triton.jit
def _body(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
          GROUP_M: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr):
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(tl.cdiv(K, BLOCK_K)):
        if A_T:
            a = tl.trans(a_desc.load([k * BLOCK_K, off_m]))
        else:
            a = a_desc.load([off_m, k * BLOCK_K])
        if B_T:
            b = tl.trans(b_desc.load([off_n, k * BLOCK_K]))
        else:
            b = b_desc.load([k * BLOCK_K, off_n])
        acc = tl.dot(a, b, acc)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def host_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr):
    _body(a_desc, b_desc, c_desc, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, A_T, B_T)


@triton.jit
def dev_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, A_T: tl.constexpr,
               B_T: tl.constexpr):
    if A_T:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[K, M], strides=[s_ak, s_am], block_shape=[BLOCK_K, BLOCK_M])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[s_am, s_ak], block_shape=[BLOCK_M, BLOCK_K])
    if B_T:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[s_bn, s_bk], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[s_bk, s_bn], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[s_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    _body(a_desc, b_desc, c_desc, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, A_T, B_T)


SHAPES = ["512x3072x8192:fp16:NT", "3072x3072x4096:fp16:TN", "1024x4096x4096:fp16:NN",
          "2048x1536x8960:bf16:NT", "768x2048x5632:bf16:NN", "4096x4096x4096:fp16:NN"]
CONFIGS = [(128, 128, 64, 4, 4), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (64, 128, 64, 4, 5)]


def main():
    print("%s, triton %s" % (torch.cuda.get_device_name(0), triton.__version__))
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    probe = Probe(torch, triton, TK, "cuda", sms, False)
    ratios = []
    for text in SHAPES:
        s = parse_shape(text)
        M, N, K, lay = s["M"], s["N"], s["K"], s["layout"]
        a_t, b_t = lay[0] == "T", lay[1] == "T"
        a, b, al, bl = probe.inputs(s)
        ref = torch.matmul(al, bl)
        fns, names = [lambda: torch.matmul(al, bl)], ["cublas"]
        for bm, bn, bk, w, st in CONFIGS:
            grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
            kw = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, A_T=a_t, B_T=b_t, num_warps=w, num_stages=st)
            c1 = torch.empty((M, N), dtype=a.dtype, device="cuda")
            c2 = torch.empty_like(c1)
            c3 = torch.empty_like(c1)
            ad = TensorDescriptor.from_tensor(a, [bk, bm] if a_t else [bm, bk])
            bd = TensorDescriptor.from_tensor(b, [bn, bk] if b_t else [bk, bn])
            cd = TensorDescriptor.from_tensor(c1, [bm, bn])

            def host(ad=ad, bd=bd, cd=cd, grid=grid, kw=kw):
                host_kernel[grid](ad, bd, cd, M, N, K, **kw)

            sa = a.stride()
            sb = b.stride()
            a_strides = (sa[1], sa[0]) if a_t else sa  # (stride_am, stride_ak)
            b_strides = (sb[1], sb[0]) if b_t else sb  # (stride_bk, stride_bn)

            def dev(c2=c2, grid=grid, kw=kw, a_strides=a_strides, b_strides=b_strides):
                dev_kernel[grid](a, b, c2, M, N, K, a_strides[0], a_strides[1], b_strides[0], b_strides[1], N, **kw)

            cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=w, num_stages=st, STREAM_K=0, PERSISTENT=0)
            harness, _ = probe.launcher(cfg, s, a, b, c3)
            tag = "%dx%dx%d w%d s%d" % (bm, bn, bk, w, st)
            try:
                for fn, c in ((host, c1), (dev, c2), (harness, c3)):
                    fn()
                    torch.cuda.synchronize()
                    e = rel_err(c, ref)
                    assert e < REL_TOL, "%s: wrong answer (rel. err %.3g)" % (tag, e)
            except Exception as exc:
                print("  %s: %s" % (tag, str(exc).splitlines()[0][:200]))
                continue
            fns += [host, dev, harness]
            names += [tag + " host", tag + " dev", tag + " harness"]
        times = palindromic_windows([lambda fn=fn: triton.testing.do_bench(fn, warmup=25, rep=100,
                                                                           return_mode="median") for fn in fns], 4)
        med = [statistics.median(t) for t in times]
        print("\n%s  cuBLAS %.4f ms" % (text, med[0]))
        for i in range(1, len(med), 3):
            print("  %-22s host %.4f  dev %.4f  harness %.4f   dev/host %.3f  harness/dev %.3f  cuBLAS/host %.3f"
                  % (names[i][:-5], med[i], med[i + 1], med[i + 2], med[i + 1] / med[i], med[i + 2] / med[i + 1],
                     med[0] / med[i]))
            ratios.append(med[i + 1] / med[i])
    print("\ngeomean dev/host %.3f" % statistics.geometric_mean(ratios))


if __name__ == "__main__":
    main()
