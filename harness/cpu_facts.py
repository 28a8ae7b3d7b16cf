"""What a CPU target's kernels are built for: its vector ISA and its cache sizes.

The vector ISA is what the target's own compiler command (harness/compile/cpp.py: its march,
vector length and flags; ``-march=native`` for a native x86-64 target, so the host's CPU flags)
predefines: ``__AVX512F__``, ``__AVX2__``, ``__ARM_NEON``, ``__riscv_vector``, and
``__AVX512BF16__`` (the bf16 pair dot product ``vdpbf16ps``: bf16 inputs with fp32 sums). A riscv64 target's
vectors are its ``vlen:`` bits (a binary built for 256 gives wrong answers on a 128-bit board,
so the manifest records the VLEN). The cache sizes are the ones ``harness targets check`` probed on
the machine (kept in .harness/state.json), else, for a target that is this machine, read here from
/sys, else a small core's (32 KiB L1d, 512 KiB L2): pruning by cache then keeps too little
rather than too much.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

from remote_agent.check import cache_sizes as probe_cache_sizes

DEFAULT_L1D = 32 * 1024
DEFAULT_L2 = 512 * 1024
CACHE_FACT = "cpu_caches"  # the key of the probed sizes in the state's facts of a target


@dataclass(frozen=True)
class VectorIsa:
    """The widest vector the kernels use on a target."""

    name: str  # avx512, avx2, sse, neon, rvv, scalar
    vector_bytes: int
    registers: int  # architectural vector registers of that width
    bf16_dot: bool = False  # AVX512_BF16: vdpbf16ps multiplies pairs of bf16 into fp32 sums

    def lanes(self, elem_bytes: int = 4) -> int:
        return self.vector_bytes // elem_bytes

    def fma_mnemonics(self) -> tuple:
        """Disassembly mnemonics (prefixes) of the ISA's vector FMA on fp32."""
        return {"avx512": ("vfmadd",), "avx2": ("vfmadd",), "neon": ("fmla",), "rvv": ("vfmacc.v", "vfmadd.v")
                }.get(self.name, ())


@dataclass(frozen=True)
class CacheSizes:
    l1d: int
    l2: int
    source: str  # probed, this machine, default


def _target_key(target) -> tuple:
    return (target.name, target.resolved_arch, target.toolchain, target.march, target.vlen, tuple(target.cflags),
            target.threads)


_ISA_CACHE: dict = {}


def vector_isa(target) -> VectorIsa:
    """The target's vector ISA, from its compiler's predefined macros (cached per target)."""
    key = _target_key(target)
    if key not in _ISA_CACHE:
        _ISA_CACHE[key] = _find_isa(target)
    return _ISA_CACHE[key]


def _find_isa(target) -> VectorIsa:
    from .compile.toolchain import toolchain_for
    from .errors import HarnessError

    arch = target.resolved_arch
    try:
        tc = toolchain_for(target)
        macros = _predefined_macros(tuple(tc.cxx + tc.flags))
    except HarnessError:  # no compiler for it here: what the target's facts say
        macros = None
    if arch == "riscv64":
        has_v = "__riscv_vector" in macros if macros is not None else "v" in (target.march or "").split("_")[0][4:]
        # without vlen the compiler has no fixed vector length to lower vectors to RVV with
        return VectorIsa("rvv", target.vlen // 8, 32) if has_v and target.vlen else VectorIsa("scalar", 16, 8)
    if arch == "aarch64":
        return VectorIsa("neon", 16, 32)
    if arch == "x86_64":
        if macros is None:
            macros = _host_flag_macros() if target.resolved_arch == platform.machine() and not target.march else set()
        if "__AVX512F__" in macros:
            return VectorIsa("avx512", 64, 32, bf16_dot="__AVX512BF16__" in macros)
        if "__AVX2__" in macros and "__FMA__" in macros:
            return VectorIsa("avx2", 32, 16)
        return VectorIsa("sse", 16, 16)
    return VectorIsa("scalar", 16, 8)


@functools.lru_cache(maxsize=None)
def _predefined_macros(command: tuple) -> set:
    proc = subprocess.run(list(command) + ["-dM", "-E", "-x", "c++", "/dev/null"], capture_output=True, text=True,
                          timeout=60)
    return {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("#define ")}


def _host_flag_macros() -> set:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    names = {"avx512f": "__AVX512F__", "avx2": "__AVX2__", "fma": "__FMA__", "avx512_bf16": "__AVX512BF16__"}
    return {names[f] for f in flags if f in names}


def cache_sizes(target, root: Path = Path(".")) -> CacheSizes:
    """L1d and L2 of one core of the target: probed by ``targets check``, else this machine's for a
    target that runs here, else the defaults."""
    probed = _recorded_caches(str(Path(root).resolve()), target.name, _state_mtime(root))
    if probed.get("l1d") and probed.get("l2"):
        return CacheSizes(int(probed["l1d"]), int(probed["l2"]), "probed")
    if not getattr(target, "is_remote", False) and not target.run_under and target.resolved_arch == platform.machine():
        here = _local_caches()
        if here.get("l1d") and here.get("l2"):
            return CacheSizes(here["l1d"], here["l2"], "this machine")
    return CacheSizes(DEFAULT_L1D, DEFAULT_L2, "default")


def _state_mtime(root) -> float:
    from .state import _path

    try:
        return _path(root).stat().st_mtime
    except OSError:
        return 0.0


@functools.lru_cache(maxsize=64)
def _recorded_caches(root: str, name: str, mtime: float) -> dict:
    """The sizes ``targets check`` recorded for the target (the state file read once per change)."""
    from . import state

    _, facts = state.get(Path(root), name)
    return dict(facts.get(CACHE_FACT) or {})


@functools.lru_cache(maxsize=1)
def _local_caches() -> dict:
    return probe_cache_sizes()
