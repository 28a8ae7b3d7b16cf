"""Row-wise softmax: Y[r, :] = exp(X[r, :] - max X[r, :]) / sum exp(X[r, :] - max X[r, :]).

A kernel of another shape than matmul, declared only here: two problem dimensions ROWS x COLS
(shapes are written ``ROWSxCOLS[:dtype]``, no layout), one input, one output, an fp32
reference, row strides as scalar arguments. CPUs: templates/cpu/softmax_kernel.cpp.j2; GPUs:
triton_kernel.py and the agent's side, device.py. Tests only (its test is test_softmax.py beside it).
"""

from pathlib import Path

import numpy as np

from harness.kernels.base import Kernel, Operand
from harness.shapes import Problem
from harness.space import Rule

PROBLEM = Problem(dims=("ROWS", "COLS"), dtypes=("fp32", "fp16", "bf16"), layouts=())
OPERANDS = (
    Operand("x", "input", ("ROWS", "COLS")),
    Operand("y", "output", ("ROWS", "COLS")),
    Operand("ref", "reference", ("ROWS", "COLS"), dtype="fp32"),
)
ELEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def to_storage(x, dtype):
    if dtype == "fp32":
        return x.astype(np.float32)
    if dtype == "fp16":
        return x.astype(np.float16)
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def from_storage(x, dtype):
    if dtype == "bf16":
        return (x.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return x.astype(np.float32)


def make_data(shape, seed):
    """Seeded X and the fp32 reference, computed in fp64 from the stored X."""
    rng = np.random.default_rng([seed, shape.ROWS, shape.COLS])
    x = to_storage(rng.uniform(-4, 4, (shape.ROWS, shape.COLS)), shape.dtype)
    xf = from_storage(x, shape.dtype).astype(np.float64)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    return {"x": x, "ref": (e / e.sum(axis=1, keepdims=True)).astype(np.float32)}


def strides(shape):
    return {"stride_x": shape.COLS, "stride_y": shape.COLS}


def grid(config, shape, target=None):
    return (-(-shape.ROWS // config["BLOCK_ROWS"]), 1, 1)


RULES = [Rule("rows_block_over_rows", "BLOCK_ROWS is larger than ROWS: programs with nothing to do",
              lambda cfg, shape, target: cfg["BLOCK_ROWS"] > shape.ROWS and cfg["BLOCK_ROWS"] > 1)]

KERNEL = Kernel(
    name="softmax",
    description=__doc__.strip().splitlines()[0],
    cpu_space={"BLOCK_ROWS": [1, 4, 16], "VEC": [1, 8]},
    cpu_rules=RULES,
    cpu_template=Path(__file__).parent / "templates" / "cpu" / "softmax_kernel.cpp.j2",
    make_data=make_data,
    operands=OPERANDS,
    problem=PROBLEM,
    strides=strides,
    flops=lambda s: 5 * s.ROWS * s.COLS,
    bytes_moved=lambda s: 2 * ELEM_BYTES[s.dtype] * s.ROWS * s.COLS,
    grid=grid,
    default_shapes={"cpu": "8x100,33x257:fp16,64x64:bf16", "gpu": "4096x4096:fp16,8192x1000:bf16,1000x32000:fp16"},
    gpu_space={"BLOCK_ROWS": [1, 2, 4, 8], "BLOCK_COLS": [256, 1024, 4096], "num_warps": [4, 8, 16],
               "num_stages": [1]},
    gpu_rules=RULES,
    triton_module="tests.kernels.softmax.triton_kernel:softmax_kernel",
    device_plugin=Path(__file__).with_name("device.py"),
    gpu_library="torch.softmax",
)
