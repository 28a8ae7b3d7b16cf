"""The L2 flush before each timed GPU launch: a buffer larger than L2 that is either written
(a driver memset, as triton.testing.do_bench does with ``cache.zero_()``) or read (a small PTX
kernel that the driver compiles at load time). Standard library only.

HARNESS_GPU_FLUSH picks it: ``write`` (or ``1``, the default), ``read``, or ``0`` (no flush; the
worker then rotates copies of inputs that fit in L2 instead, ``input_sets``).

Why ``read`` exists: a written flush leaves L2 full of dirty lines, and a kernel that streams its
operands from memory writes them back while it runs. On an H200 that made decode GEMMs 7 to 26 %
slower than after a read flush, which leaves L2 as cold but clean; a compute-bound GEMM moved by
no more than its run-to-run spread (docs/gpu.md, "Current numbers"). ``write``
stays the default so that the agent's times stay comparable with do_bench's."""

import os

from .gpu_api import GpuError
from .gpu_launch import Kernel, cdiv

WRITE, READ, OFF = "write", "read", "off"
MODES = {"1": WRITE, "write": WRITE, "read": READ, "0": OFF}

# Reads the buffer 16 bytes a thread at a time (grid-stride) and folds what it read into one
# word, stored only if it equals a constant (the buffer is zeroed once), so the loads stay.
READ_PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry harness_l2_read(.param .u64 buf, .param .u64 n16, .param .u64 sink)
{
  .reg .u64 %rd<12>;
  .reg .u32 %r<12>;
  .reg .pred %p<3>;
  ld.param.u64 %rd1, [buf];
  ld.param.u64 %rd2, [n16];
  ld.param.u64 %rd3, [sink];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mov.u32 %r4, %nctaid.x;
  cvt.u64.u32 %rd4, %r1;
  cvt.u64.u32 %rd5, %r2;
  cvt.u64.u32 %rd6, %r3;
  cvt.u64.u32 %rd7, %r4;
  mad.lo.u64 %rd8, %rd4, %rd5, %rd6;
  mul.lo.u64 %rd9, %rd7, %rd5;
  mov.u32 %r5, 0;
LOOP:
  setp.ge.u64 %p1, %rd8, %rd2;
  @%p1 bra DONE;
  shl.b64 %rd10, %rd8, 4;
  add.u64 %rd11, %rd1, %rd10;
  ld.global.v4.u32 {%r6, %r7, %r8, %r9}, [%rd11];
  xor.b32 %r5, %r5, %r6;
  xor.b32 %r5, %r5, %r7;
  xor.b32 %r5, %r5, %r8;
  xor.b32 %r5, %r5, %r9;
  add.u64 %rd8, %rd8, %rd9;
  bra LOOP;
DONE:
  setp.ne.u32 %p2, %r5, -1640531527;
  @%p2 bra END;
  st.global.u32 [%rd3], %r5;
END:
  ret;
}
"""
READ_LAUNCH = {"entry": "harness_l2_read", "threads": 256, "shared": 0,
               "params": [{"name": "buf", "type": "*i8"}, {"name": "n16", "type": "u64"},
                          {"name": "sink", "type": "*i32"}]}
READ_BLOCKS_PER_SM = 8


def flush_mode(environ=os.environ):
    value = environ.get("HARNESS_GPU_FLUSH", "1").strip().lower()
    if value not in MODES:
        exc = GpuError("HARNESS_GPU_FLUSH=%s: expected write, read or 0" % value)
        exc.fatal = True  # every worker would meet it: say it once and stop
        raise exc
    return MODES[value]


class L2Flush(object):
    """A buffer larger than L2 (256 MiB or twice L2), written or read before each timed launch so
    that every launch reads its inputs from device memory. ``mode`` says which; a read flush
    that cannot be loaded (HIP, no PTX compiler in the driver) falls back to the write and says
    why in ``fallback``."""

    def __init__(self, api, l2_bytes, multiprocessors=None, mode=None):
        self.api = api
        self.l2 = int(l2_bytes or (64 << 20))
        self.mode = mode or flush_mode()
        self.enabled = self.mode != OFF
        self.bytes = max(256 << 20, 2 * self.l2)
        self.buf = api.alloc(self.bytes) if self.enabled else None
        self.fallback = ""
        self.reader = None
        if self.mode == READ:
            self._load_reader(multiprocessors)

    def _load_reader(self, multiprocessors):
        try:
            kernel = Kernel(self.api, READ_PTX, READ_LAUNCH)
        except GpuError as exc:
            self.mode, self.fallback = WRITE, "read flush not loaded (%s): written instead" % exc
            return
        self.api.memset32(self.buf, 0, self.bytes // 4)
        self.sink = self.api.alloc(4)
        blocks = int(multiprocessors or 132) * READ_BLOCKS_PER_SM
        self.grid = (min(blocks, cdiv(self.bytes // 16, READ_LAUNCH["threads"])), 1, 1)
        self.params = kernel.params({"buf": self.buf, "n16": self.bytes // 16, "sink": self.sink}, self.grid)
        self.reader = kernel

    def __call__(self):
        if self.reader is not None:
            self.reader.run(self.grid, self.params)
        else:
            self.api.memset32(self.buf, 0, self.bytes // 4)

    def input_sets(self, input_bytes):
        """How many copies of a shape's inputs the launches rotate over."""
        if input_bytes <= self.l2 and not self.enabled:  # with the flush, every launch reads DRAM anyway
            return int(min(8, max(2, cdiv(3 * self.l2, max(1, input_bytes)))))
        return 1
