"""Limits checked before work: a shape's dimensions against the kernel's range, and its test
data against the memory of the machine that makes it.

A build makes the test data of CPU targets on this machine (kernel.make_data: inputs and the
reference, with numpy intermediates in fp64); a shape too large for memory used to die in the
allocator after the compiles, or take the machine down with it. So the memory is checked first,
with one line that says how much is needed and how much there is. The agent checks the board's
side (remote_agent/limits.py).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Optional

from .errors import HarnessError

GIB = float(1 << 30)
# Peak memory of make_data over the bytes of the data it returns: 2.8x for fp32, 4.05x for fp16
# and bf16 (matmul 1024x1024x2048, tracemalloc); rounded up.
DATA_MAKING_FACTOR = 4


def check_shapes(kernel, target, shapes) -> None:
    """Every shape within the kernel's range, and (CPU targets: the host makes the data) its test
    data within this machine's available memory; else one HarnessError line."""
    limit = getattr(kernel.problem, "max_dim", None)
    for shape in shapes:
        for name, value in shape.dims:
            if not isinstance(value, int) or value < 1 or (limit and value > limit):
                raise HarnessError("shape %s: %s=%r is outside %s's range (1 to %s)" % (
                    shape.id, name, value, kernel.name, limit or "any"))
    if target.is_gpu or not shapes:
        return
    available = available_memory()
    if available is None:
        return
    biggest = max(shapes, key=lambda s: data_bytes(kernel, s))
    need = data_bytes(kernel, biggest) * DATA_MAKING_FACTOR
    if need > available:
        raise HarnessError("shape %s: its test data takes %.1f GiB (%s) and making it about %dx that, %.1f GiB; "
                           "this machine has %.1f GiB of memory available; leave the shape out or split it" % (
                               biggest.id, data_bytes(kernel, biggest) / GIB, _operand_names(kernel, biggest),
                               DATA_MAKING_FACTOR, need / GIB, available / GIB))


def data_bytes(kernel, shape) -> int:
    """The bytes of a shape's test data: its inputs and references (outputs are not stored)."""
    return sum(op["bytes"] for op in (o.describe(shape) for o in kernel.operands) if op["role"] != "output")


def _operand_names(kernel, shape) -> str:
    return ", ".join(op["name"] for op in (o.describe(shape) for o in kernel.operands) if op["role"] != "output")


def available_memory() -> Optional[int]:
    """Bytes this process may still allocate: the least of the kernel's MemAvailable, the cgroup
    (v2) limit less its use, and the address-space rlimit less this process's size; None where
    none is known."""
    limits = [_meminfo_available(), _cgroup_free(), _address_space_free()]
    known = [x for x in limits if x is not None]
    return max(0, min(known)) if known else None


def _meminfo_available() -> Optional[int]:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_free() -> Optional[int]:
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        rel = next(line.split("::", 1)[1] for line in own if line.startswith("0::"))
        folder = Path("/sys/fs/cgroup") / rel.lstrip("/")
        text = (folder / "memory.max").read_text().strip()
        if text == "max":
            return None
        return int(text) - int((folder / "memory.current").read_text().strip())
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def _address_space_free() -> Optional[int]:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return soft - int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return soft
