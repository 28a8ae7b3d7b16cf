"""Probe: warp-specialized Gluon matmuls for Hopper against cuBLAS (docs/notes/2026-11-26-gpu-runs.md, "Gluon", stop 37).

Triton's pipeliner schedules one program's loads and MMAs itself; Gluon (Triton's lower-level
language, in Triton 3.6 on the node and 3.9 here) lets a kernel give each warp its own job. Two
kernels, both persistent (one program a multiprocessor), one loader warp issuing every TMA load of
the program's tiles into a ring of STAGES slots:

- ``gluon_matmul`` (KERNEL "pingpong", the default): one or two consumer partitions (CONSUMERS) of
  WARPS warps run the wgmma K loops and the epilogues of BM x BN tiles. With two, the program's
  tiles alternate between them, so one consumer's epilogue runs while the other's MMAs do; their
  main loops take turns (a barrier each), since a consumer may wait on a ring slot's barrier only one
  phase ahead of the last wait on it.
- KERNEL "rows": the harness's own warp-specialized kernel (harness/kernels/matmul/gluon_kernel.py),
  a 192 x 192 tile on three warpgroups of 64 rows, each running a 128-wide and a 64-wide MMA on the
  same B tile: the tile cuBLAS runs on the slow few-wave shapes, which Triton's own layouts split
  into 32- and 64-wide MMAs (docs/notes/2026-11-26-gpu-runs.md, "192-row tiles"). Its knobs: BK, STAGES, GROUP_M. (In stop
  37 the probe had its own copy, with the warpgroups, the two widths and the registers as knobs.)

    python3 -m bench.probes.gluon_probe --compile-only --layout TN --config '{"KERNEL": "rows"}'   # here, sm90
    python3 -m bench.probes.gluon_probe --shape 3072x3072x4096:fp16:TN --config '{"KERNEL": "rows", "BK": 64,
        "STAGES": 3}' [--json OUT]                                                    # on the GPU node

Each launch's C (filled with NaN first) is checked against torch.matmul; times are do_bench medians
(its L2 flush included), cuBLAS timed once a shape. Launches go through Gluon's JIT, whose Python
launch costs tens of microseconds: only prefill shapes read true here.
"""
import argparse
import json
import os
import sys

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

# the harness kernel's TMA copies (named by the Triton version) and its GROUP_M tile order
from harness.kernels.matmul import descriptors, strides
from harness.kernels.matmul.gluon_kernel import matmul_ws_kernel, tile_of, tma_load, tma_store
from harness.shapes import make_shape


@gluon.jit
def _loader(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K,
            BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
            STAGES: gl.constexpr, A_ROWS: gl.constexpr, B_ROWS: gl.constexpr):
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    nk = gl.cdiv(K, BK)
    step = 0
    for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        pid_m, pid_n = tile_of(t, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        for kk in range(nk):
            s = step % STAGES
            mbarrier.wait(empty.index(s), ((step // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            k = kk * BK
            if A_ROWS:
                tma_load(a_desc, [off_m, k], bar, a_bufs.index(s))
            else:
                tma_load(a_desc, [k, off_m], bar, a_bufs.index(s))
            if B_ROWS:
                tma_load(b_desc, [off_n, k], bar, b_bufs.index(s))
            else:
                tma_load(b_desc, [k, off_n], bar, b_bufs.index(s))
            step += 1


@gluon.jit
def _consumer(a_desc, b_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_smem, M, N, K,
              BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
              STAGES: gl.constexpr, A_ROWS: gl.constexpr, B_ROWS: gl.constexpr,
              WHO: gl.constexpr, CONSUMERS: gl.constexpr, WARPS: gl.constexpr):
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                         instr_shape=[16, BN, 16])
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    nk = gl.cdiv(K, BK)
    j = 0
    for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        if j % CONSUMERS == WHO:
            pid_m, pid_n = tile_of(t, num_pid_m, num_pid_n, GROUP_M)
            acc = gl.zeros((BM, BN), gl.float32, acc_layout)
            step0 = j * nk
            if CONSUMERS == 2:
                # Main loops take turns: a consumer waits on a ready barrier only one phase ahead.
                mbarrier.wait(turn.index(WHO), ((j // 2) & 1) ^ (1 - WHO))
            for kk in range(nk):
                step = step0 + kk
                s = step % STAGES
                mbarrier.wait(ready.index(s), (step // STAGES) & 1)
                a = a_bufs.index(s)
                if not A_ROWS:
                    a = a.permute((1, 0))
                b = b_bufs.index(s)
                if B_ROWS:
                    b = b.permute((1, 0))
                acc = warpgroup_mma(a, b, acc, is_async=True)
                acc = warpgroup_mma_wait(1, deps=[acc])
                if kk > 0:
                    mbarrier.arrive(empty.index((step - 1) % STAGES))
            if CONSUMERS == 2:
                mbarrier.arrive(turn.index(1 - WHO))
            acc = warpgroup_mma_wait(0, deps=[acc])
            mbarrier.arrive(empty.index((step0 + nk - 1) % STAGES))
            tma.store_wait(0)
            c_smem.store(acc.to(c_desc.dtype))
            fence_async_shared()
            tma_store(c_desc, [pid_m * BM, pid_n * BN], c_smem)
        j += 1
    tma.store_wait(0)


@gluon.jit
def gluon_matmul(a_desc, b_desc, c_desc, M, N, K,
                 BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
                 STAGES: gl.constexpr, A_ROWS: gl.constexpr, B_ROWS: gl.constexpr,
                 CONSUMERS: gl.constexpr, WARPS: gl.constexpr,
                 CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_bufs = gl.allocate_shared_memory(dtype, [CONSUMERS] + c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    fence_async_shared()
    if CONSUMERS == 2:
        gl.warp_specialize([
            (_consumer, (a_desc, b_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_bufs.index(0), M, N, K, BM, BN, BK,
                         GROUP_M, STAGES, A_ROWS, B_ROWS, 0, 2, WARPS)),
            (_consumer, (a_desc, b_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_bufs.index(1), M, N, K, BM, BN, BK,
                         GROUP_M, STAGES, A_ROWS, B_ROWS, 1, 2, WARPS)),
            (_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BM, BN, BK, GROUP_M, STAGES, A_ROWS,
                       B_ROWS)),
        ], [WARPS, 1], [CONSUMER_REGS, LOADER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (a_desc, b_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_bufs.index(0), M, N, K, BM, BN, BK,
                         GROUP_M, STAGES, A_ROWS, B_ROWS, 0, 1, WARPS)),
            (_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BM, BN, BK, GROUP_M, STAGES, A_ROWS,
                       B_ROWS)),
        ], [1], [LOADER_REGS])


ROWS_DEFAULTS = dict(KERNEL="rows", BK=32, STAGES=6, GROUP_M=8)  # the harness's seed (seeds.py)


def rows_config(cfg):
    """The harness's config of the warp-specialized tile for a probe config of KERNEL "rows"."""
    return dict(BLOCK_M=192, BLOCK_N=192, BLOCK_K=cfg["BK"], GROUP_M=cfg["GROUP_M"], SPLIT_K=1, num_warps=4,
                num_stages=cfg["STAGES"], TMA=1, PERSISTENT=1, SWAP_AB=0, STREAM_K=0)


def rows_blocks(cfg, layout):
    """(name, stored block) of the warp-specialized kernel's descriptors, from the harness's plan."""
    return [(d.name, list(d.block)) for d in descriptors.tensor_descriptors(rows_config(cfg), layout[0] == "T",
                                                                            layout[1] == "T")]


DEFAULTS = dict(KERNEL="pingpong", BM=128, BN=128, BK=64, STAGES=4, CONSUMERS=2, WARPS=4, GROUP_M=8,
                CONSUMER_REGS=216, LOADER_REGS=40, PERSISTENT=1)


def full_config(cfg):
    out = dict(ROWS_DEFAULTS if cfg.get("KERNEL") == "rows" else DEFAULTS)
    out.update(cfg)
    return out


def overrides(cfg):
    """The config's kernel and what it sets apart from that kernel's defaults."""
    base = ROWS_DEFAULTS if cfg["KERNEL"] == "rows" else DEFAULTS
    return dict(KERNEL=cfg["KERNEL"], **{k: v for k, v in cfg.items() if k != "KERNEL" and base.get(k) != v})


def operand_blocks(cfg, layout):
    """(A block, B block) as stored: A is M x K unless the layout's first letter is T."""
    a = [cfg["BM"], cfg["BK"]] if layout[0] == "N" else [cfg["BK"], cfg["BM"]]
    b = [cfg["BN"], cfg["BK"]] if layout[1] == "T" else [cfg["BK"], cfg["BN"]]
    return a, b


def constexprs(cfg, layout):
    return dict(BM=cfg["BM"], BN=cfg["BN"], BK=cfg["BK"], GROUP_M=cfg["GROUP_M"], STAGES=cfg["STAGES"],
                A_ROWS=layout[0] == "N", B_ROWS=layout[1] == "T", CONSUMERS=cfg["CONSUMERS"],
                WARPS=cfg["WARPS"], CONSUMER_REGS=cfg["CONSUMER_REGS"], LOADER_REGS=cfg["LOADER_REGS"])


def kernel_parts(cfg, layout):
    """(kernel, descriptor names and stored blocks, constexprs, num_warps, tile M, tile N) of a config."""
    if cfg.get("KERNEL") == "rows":
        ce = dict(BLOCK_M=192, BLOCK_N=192, BLOCK_K=cfg["BK"], GROUP_M=cfg["GROUP_M"], STAGES=cfg["STAGES"],
                  A_T=layout[0] == "T", B_T=layout[1] == "T")
        return matmul_ws_kernel, rows_blocks(cfg, layout), ce, 4, 192, 192
    a_blk, b_blk = operand_blocks(cfg, layout)
    descs = [("a_desc", a_blk), ("b_desc", b_blk), ("c_desc", [cfg["BM"], cfg["BN"]])]
    return gluon_matmul, descs, constexprs(cfg, layout), cfg["WARPS"], cfg["BM"], cfg["BN"]


def compile_for_sm90(cfg, layout, dtype="fp16"):
    """Build the kernel for sm90 here (no GPU): the compiled kernel, or raise."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    gdt = gl.float16 if dtype == "fp16" else gl.bfloat16
    fn, descs, ce, warps, _, _ = kernel_parts(cfg, layout)
    blocks = dict(descs)
    sig = {}
    for name in fn.arg_names:  # in the kernel's order: descriptors, pointers, sizes and strides, constexprs
        if name in blocks:
            sig[name] = "tensordesc<%s%s,%r>" % (dtype, blocks[name],
                                                 gl.NVMMASharedLayout.get_default_for(blocks[name], gdt))
        else:
            sig[name] = "constexpr" if name in ce else "*" + dtype if name.endswith("_ptr") else "i32"
    consts = {(list(sig).index(k),): v for k, v in ce.items()}
    src = GluonASTSource(fn, sig, consts)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=1))


def resource_usage(cubin):
    """cuobjdump's registers / stack / shared memory line for a cubin (Triton ships cuobjdump)."""
    import subprocess
    import tempfile
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    found = [line.strip() for line in out.splitlines() if "REG:" in line]
    return found[0] if found else "(no resource usage)"


def profile_once(library, kernel, warmup=20):
    """Warm both up, then run each once between cudaProfilerStart/Stop: what ``ncu --profile-from-start
    off`` reads."""
    import torch
    for _ in range(warmup):
        library()
        kernel()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    library()
    kernel()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def run_on_gpu(args, configs):
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for spec in args.shape:
        dims, dtype, layout = spec.split(":")
        M, N, K = (int(x) for x in dims.split("x"))
        tdt = torch.float16 if dtype == "fp16" else torch.bfloat16
        gdt = gl.float16 if dtype == "fp16" else gl.bfloat16
        torch.manual_seed(0)
        a_store = torch.randn((M, K) if layout[0] == "N" else (K, M), device="cuda", dtype=tdt)
        b_store = torch.randn((N, K) if layout[1] == "T" else (K, N), device="cuda", dtype=tdt)
        a = a_store if layout[0] == "N" else a_store.t()
        b = b_store.t() if layout[1] == "T" else b_store
        ref = torch.matmul(a, b)
        t_cublas = None if args.profile else triton.testing.do_bench(lambda: torch.matmul(a, b), warmup=50, rep=400)
        for cfg in configs:
            c = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
            fn, blocks, ce, warps, bm, bn = kernel_parts(cfg, layout)
            stored = {"a": a_store, "b": b_store, "c": c}  # a descriptor views the operand its name starts with
            values = dict(strides(make_shape(M, N, K, dtype, layout)), M=M, N=N, K=K, a_ptr=a_store, b_ptr=b_store,
                          c_ptr=c)
            for name, blk in blocks:
                values[name] = TensorDescriptor.from_tensor(stored[name[0]], blk,
                                                            gl.NVMMASharedLayout.get_default_for(blk, gdt))
            run_args = {n: values[n] for n in fn.arg_names if n not in ce}
            tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
            grid = (min(sms, tiles) if cfg.get("PERSISTENT", 1) else tiles,)

            def launch():
                fn[grid](**run_args, **ce, num_warps=warps)
            try:
                launch()
                torch.cuda.synchronize()
                err = ((c.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                if args.profile:
                    profile_once(lambda: torch.matmul(a, b), launch)
                    print("%-26s %-70s profiled once each, err %.1e" % (spec, json.dumps(overrides(cfg)), err))
                    continue
                ms = triton.testing.do_bench(launch, warmup=50, rep=400)
                rows.append(dict(shape=spec, config=cfg, cublas_ms=t_cublas, ms=ms, ratio=t_cublas / ms,
                                 rel_err=err))
                print("%-26s %-70s cuBLAS %.4f ms  gluon %.4f ms  ratio %.3f  err %.1e" % (
                    spec, json.dumps(overrides(cfg)), t_cublas, ms,
                    t_cublas / ms, err), flush=True)
            except Exception as exc:  # a probe: report and go on
                print("%-26s %s failed: %s" % (spec, cfg, str(exc).splitlines()[0][:200]), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", default=[], help="MxNxK:dtype:layout (repeatable)")
    ap.add_argument("--config", action="append", default=[], help="JSON overrides of the defaults (repeatable)")
    ap.add_argument("--compile-only", action="store_true", help="build each config for sm90 here and stop")
    ap.add_argument("--layout", default="NT", choices=("NN", "NT", "TN"), help="what --compile-only builds for")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--profile", action="store_true",
                    help="no timing: run cuBLAS and each config once between cudaProfilerStart/Stop, for "
                         "ncu --profile-from-start off")
    args = ap.parse_args()
    if not args.shape and not args.compile_only:
        ap.error("give --shape (on the GPU node) or --compile-only")
    configs = [full_config(json.loads(c)) for c in args.config] or [full_config({})]
    if args.compile_only:
        for cfg in configs:
            try:
                kernel = compile_for_sm90(cfg, args.layout)
            except Exception as exc:  # a probe: report and go on
                print(cfg, "FAILED:", str(exc).strip().splitlines()[-1][:300])
                continue
            print(cfg, "shared memory %d bytes;" % kernel.metadata.shared, resource_usage(kernel.asm["cubin"]))
        return 0
    rows = run_on_gpu(args, configs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
