"""Probe: which inner coordinates a Gluon TMA tile load takes on the GPU node (sm90, Triton's host
tensor descriptors).

Loads one BOX_ROWS x BOX_COLS fp32 box of a 1024 x 16 fp32 tensor at column COL into shared
memory. It then writes the box back out and compares it with the tensor's slice. On an H200
(Triton 3.6.0) a 16-byte-wide box loads at columns 0 and 4 but stops the kernel with "an illegal
instruction" at column 1, and so does a 32-byte box at column 1 (compute-sanitizer points at the
UTMALDG): the innermost coordinate must be a multiple of 16 bytes, though cuTensorMapEncodeTiled
takes the descriptor. docs/notes/2026-11-27-fp8-ring-scales.md has the run.

    python3 -m bench.probes.tma_coordinate_probe 64 4 1     # BOX_ROWS BOX_COLS COL

A fault leaves the CUDA context unusable, so each case needs its own process.
"""
import sys


def main(argv=None):
    import torch
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared  # 3.9's name, else 3.6's

    @gluon.jit
    def copy_box(desc, out_ptr, col, ROWS: gl.constexpr, COLS: gl.constexpr):
        buf = gl.allocate_shared_memory(gl.float32, [ROWS, COLS], desc.layout)
        bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
        mbarrier.init(bar.index(0), count=1)
        fence_async_shared()
        mbarrier.expect(bar.index(0), ROWS * COLS * 4)
        load(desc, [gl.program_id(0) * ROWS, col], bar.index(0), buf)
        mbarrier.wait(bar.index(0), 0)
        layout: gl.constexpr = gl.BlockedLayout([1, COLS], [32, 1], [4, 1], [1, 0])
        rows = gl.program_id(0) * ROWS + gl.arange(0, ROWS, gl.SliceLayout(1, layout))
        cols = gl.arange(0, COLS, gl.SliceLayout(0, layout))
        gl.store(out_ptr + rows[:, None] * COLS + cols[None, :], buf.load(layout))

    rows, cols, col = (int(x) for x in (argv if argv is not None else sys.argv[1:4]))
    M, width = 1024, 16
    src = torch.arange(M * width, device="cuda", dtype=torch.float32).reshape(M, width)
    layout = gl.NVMMASharedLayout.get_default_for([rows, cols], gl.float32)
    desc = TensorDescriptor.from_tensor(src, [rows, cols], layout)
    out = torch.zeros(M, cols, device="cuda")
    try:
        copy_box[(M // rows,)](desc, out, col, rows, cols, num_warps=4)
        torch.cuda.synchronize()
    except Exception as exc:  # a probe: report the fault in one line
        print("box %dx%d at column %d: failed: %s" % (rows, cols, col, str(exc).strip().splitlines()[0][:200]))
        return 1
    expected = torch.zeros(M, cols, device="cuda")
    expected[:, :max(0, min(cols, width - col))] = src[:, col:col + cols]  # TMA zero-fills past the edge
    print("box %dx%d at column %d (%s): %s" % (rows, cols, col, layout,
                                               "right" if torch.equal(out, expected) else "WRONG"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
