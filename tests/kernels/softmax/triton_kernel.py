"""The row-wise softmax in Triton, and the support kernels the GPU agent runs with it.

``softmax_kernel``: each program takes BLOCK_ROWS rows and walks their columns BLOCK_COLS at a
time twice: an online max and sum of exponentials (rescaled when the max grows), then
exp(x - max) / sum stored in Y's dtype. fp32 throughout.

Support kernels: ``softmax_reference`` (one row per program, fp32 out: the max, the sum, then the
quotient, masks everywhere, no specialization), and the matmul's ``fill_kernel`` (uniform in
[-1, 1]) and ``error_kernel`` (the agent's error figures), which know nothing of the matmul.
"""

import triton
import triton.language as tl

from harness.kernels.matmul.triton_kernel import error_kernel, fill_kernel  # noqa: F401

# The run-time arguments of softmax_kernel, in order (the compiler and the agent agree on them).
ARGS = ("x_ptr", "y_ptr", "ROWS", "COLS", "stride_x", "stride_y")
# The constexpr arguments a config provides (everything else in a config is a compile option).
CONSTEXPRS = ("BLOCK_ROWS", "BLOCK_COLS")
# The agent's reference: softmax_reference at this config (the grid: one program per row).
REFERENCE = {"fn": "softmax_reference", "config": {"BLOCK_COLS": 256, "num_warps": 4, "num_stages": 1}}


@triton.jit
def softmax_kernel(x_ptr, y_ptr, ROWS, COLS, stride_x, stride_y,
                   BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < ROWS
    x_rows = x_ptr + rows[:, None].to(tl.int64) * stride_x
    y_rows = y_ptr + rows[:, None].to(tl.int64) * stride_y
    top = tl.full((BLOCK_ROWS,), -1.0e30, tl.float32)
    total = tl.zeros((BLOCK_ROWS,), tl.float32)
    for c0 in range(0, COLS, BLOCK_COLS):
        cols = c0 + tl.arange(0, BLOCK_COLS)
        mask = row_ok[:, None] & (cols[None, :] < COLS)
        x = tl.load(x_rows + cols[None, :], mask=mask, other=-1.0e30).to(tl.float32)
        new_top = tl.maximum(top, tl.max(x, axis=1))
        total = total * tl.exp(top - new_top) + tl.sum(tl.where(mask, tl.exp(x - new_top[:, None]), 0.0), axis=1)
        top = new_top
    for c0 in range(0, COLS, BLOCK_COLS):
        cols = c0 + tl.arange(0, BLOCK_COLS)
        mask = row_ok[:, None] & (cols[None, :] < COLS)
        x = tl.load(x_rows + cols[None, :], mask=mask, other=-1.0e30).to(tl.float32)
        y = tl.exp(x - top[:, None]) / total[:, None]
        tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_reference(x_ptr, y_ptr, ROWS, COLS, stride_x, stride_y, BLOCK_COLS: tl.constexpr):
    """Y (fp32) = softmax of row program_id(0): its max, then its sum, then the quotients."""
    row = tl.program_id(0).to(tl.int64)
    top = -1.0e30
    for c0 in range(0, COLS, BLOCK_COLS):
        cols = c0 + tl.arange(0, BLOCK_COLS)
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < COLS, other=-1.0e30).to(tl.float32)
        top = tl.maximum(top, tl.max(x, axis=0))
    total = 0.0
    for c0 in range(0, COLS, BLOCK_COLS):
        cols = c0 + tl.arange(0, BLOCK_COLS)
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < COLS, other=-1.0e30).to(tl.float32)
        total += tl.sum(tl.where(cols < COLS, tl.exp(x - top), 0.0), axis=0)
    for c0 in range(0, COLS, BLOCK_COLS):
        cols = c0 + tl.arange(0, BLOCK_COLS)
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < COLS, other=-1.0e30).to(tl.float32)
        tl.store(y_ptr + row * stride_y + cols, tl.exp(x - top) / total, mask=cols < COLS)
