"""The manifest's sizes, checked before anything runs (standard library only).

A manifest comes from the host, but it crosses a network and a disk, and whatever it says the
agent turns into processes and allocations. Unchecked, a shape with M = 0 or -5 ran and died on
SIGFPE, M = 10^12 was cut to 32 bits by the launcher (int32 arguments) and reported
``wrong_answer``, and a shape larger than the board's memory died in the allocator. So every
shape's dimensions are whole numbers from 1 to 2^31-1, its scalars fit the launcher's int32, its
operands' element counts and bytes agree with their shapes, the target's thread count is sane,
and on CPU boards the largest shape's operands fit the memory available. A failed check is one
AgentError line (exit 2) naming the manifest and the shape.
"""

import os

from . import contract
from .errors import AgentError

INT32_MAX = 2 ** 31 - 1
INT32_MIN = -2 ** 31
MAX_THREADS = 1024
GIB = float(1 << 30)


def check_manifest(manifest, where):
    """Raise AgentError (one line, naming ``where``) for the first part of the manifest the agent
    cannot read (``check_structure``) or size it cannot run."""
    check_structure(manifest, where)
    threads = manifest["target"].get("threads") or 1
    if not _whole(threads) or not 1 <= threads <= MAX_THREADS:
        raise AgentError("%s: target threads %r is not 1 to %d; rebuild the bundle" % (where, threads, MAX_THREADS))
    for shape in manifest["shapes"]:
        check_shape(shape, where)
    if manifest["target"].get("backend", "cpu") == "cpu":
        check_memory(manifest["shapes"], where)


def check_structure(manifest, where):
    """The containers the agent walks are of the kinds it expects: target and toolchain mappings;
    variants, shapes, jobs, pruned lists of mappings; ids and file paths strings; every job names
    a variant and a shape of the manifest. Otherwise a hostile or damaged manifest ends in an
    AttributeError or KeyError traceback somewhere later."""
    def fail(what):
        raise AgentError("%s: %s; rebuild the bundle" % (where, what))

    if not isinstance(manifest.get("target"), dict):
        fail("the manifest has no target mapping")
    toolchain = manifest.get("toolchain") or {}
    support = toolchain.get("support") or {} if isinstance(toolchain, dict) else None
    if not isinstance(toolchain, dict) or not isinstance(support, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("artifact") or "", str) for v in support.values()):
        fail("the manifest's toolchain is not a mapping of the expected kinds")
    for key in ("variants", "shapes", "jobs", "pruned", "failed"):
        items = manifest.get(key, None if key in ("variants", "shapes", "jobs") else [])
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            fail("%s is not a list of mappings" % key)
    for v in manifest["variants"]:
        if not isinstance(v.get("id"), str) or not isinstance(v.get("artifact") or "", str) \
                or not isinstance(v.get("config") or {}, dict):
            fail("variant %s has an id, artifact or config of the wrong kind" % _name(v.get("id")))
    for shape in manifest["shapes"]:
        data = shape.get("data") or {}
        if not isinstance(shape.get("id"), str) or not isinstance(data, dict) \
                or not all(isinstance(rel, str) for rel in data.values()):
            fail("shape %s has an id or data files of the wrong kind" % _name(shape.get("id")))
    variants = {v["id"] for v in manifest["variants"]}
    shapes = {s["id"] for s in manifest["shapes"]}
    for job in manifest["jobs"]:
        if not isinstance(job.get("variant"), str) or job.get("variant") not in variants \
                or not isinstance(job.get("shape"), str) or job.get("shape") not in shapes:
            fail("a job names variant %s and shape %s, not both in the manifest"
                 % (_name(job.get("variant")), _name(job.get("shape"))))


def check_shape(shape, where):
    if not isinstance(shape, dict) or not isinstance(shape.get("dims"), dict) or not shape["dims"]:
        raise AgentError("%s: a shape without dims: %.80r; rebuild the bundle" % (where, shape))
    sid = _name(shape.get("id"))
    for name, value in shape["dims"].items():
        if not _whole(value) or not 1 <= value <= INT32_MAX:
            raise AgentError("%s: shape %s: %s=%r is not a whole number from 1 to %d; rebuild the bundle "
                             "with shapes in the kernel's range" % (where, sid, name, value, INT32_MAX))
    scalars, operands = shape.get("scalars") or {}, shape.get("operands") or []
    if not isinstance(scalars, dict) or not isinstance(operands, list) or not all(isinstance(o, dict) for o in operands):
        raise AgentError("%s: shape %s: scalars must be a mapping and operands a list of mappings; rebuild the bundle"
                         % (where, sid))
    for name, value in scalars.items():
        if not _whole(value) or not INT32_MIN <= value <= INT32_MAX:
            raise AgentError("%s: shape %s: scalar %s=%r does not fit the kernel's 32-bit argument"
                             % (where, sid, name, value))
    for op in operands:
        elements, dims = op.get("elements"), op.get("shape") or []
        if not isinstance(dims, list):
            dims = [None]
        size = contract.DTYPE_BYTES.get(op.get("dtype")) if isinstance(op.get("dtype"), str) else None
        if not _whole(elements) or elements < 1 or not all(_whole(d) and d >= 1 for d in dims) \
                or _product(dims) != elements or size is None or op.get("bytes") != elements * size:
            raise AgentError("%s: shape %s: operand %s's size (%r elements of %r, %r bytes, shape %r) does not add up"
                             % (where, sid, _name(op.get("name")), elements, op.get("dtype"), op.get("bytes"), dims))


def check_memory(shapes, where):
    """The largest shape's operands (inputs, outputs, references: what one job holds) against
    the memory this machine has available (Linux MemAvailable; unchecked where it is unknown)."""
    available = memory_available()
    if available is None or not shapes:
        return
    biggest = max(shapes, key=operand_bytes)
    need = operand_bytes(biggest)
    if need > available:
        raise AgentError("%s: shape %s needs %.1f GiB for its operands; this machine has %.1f GiB of memory "
                         "available" % (where, _name(biggest.get("id")), need / GIB, available / GIB))


def operand_bytes(shape):
    return sum(op.get("bytes") or 0 for op in shape.get("operands") or [])


def memory_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _name(value):
    """An id for a message: as it is when plain text on one line, else its repr (cut at 80)."""
    text = value if isinstance(value, str) else repr(value)
    return text[:80] if text.isprintable() else repr(text)[:80]


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _product(values):
    out = 1
    for v in values:
        out *= v
    return out
