"""The C++ toolchain of a CPU target: which compiler (gcc or clang, native or cross), its flags
(arch, vector length, OpenMP) and link flags, checked to be installed (a missing one is one line
naming the Debian package). Used by the C++ compiler and by the target's CPU facts."""

from __future__ import annotations

import platform
import shutil
import subprocess
from dataclasses import dataclass

from ..errors import HarnessError

CROSS_TRIPLES = {"riscv64": "riscv64-linux-gnu", "aarch64": "aarch64-linux-gnu", "x86_64": "x86_64-linux-gnu"}


@dataclass
class Toolchain:
    """How to compile and link for one target."""

    name: str  # "gcc" or "clang"
    cxx: list  # the compiler command
    flags: list  # compile flags (arch, vector length, optimization)
    link_flags: list
    version: str

    def describe(self) -> dict:
        return {"name": self.name, "cxx": " ".join(self.cxx), "flags": self.flags,
                "link_flags": self.link_flags, "version": self.version}


def toolchain_for(target) -> Toolchain:
    """Pick and check the compiler for a target; a missing one is a clear error."""
    arch = target.resolved_arch
    native = arch == platform.machine()
    choice = target.toolchain
    if choice == "auto":
        choice = "gcc" if native else "clang"
    flags = ["-O3", "-std=c++17", "-fno-exceptions"] + list(target.cflags)
    link = ["-static"]
    if target.threads > 1:
        flags.append("-fopenmp")
        link.append("-fopenmp")
    if choice == "clang":
        cxx = [_need("clang++", "Debian package clang")]
        if not native:
            triple = CROSS_TRIPLES[arch]
            cxx += ["--target=%s" % triple]
            _need("%s-ld" % triple, "Debian package g++-%s" % triple)
            link += ["-fuse-ld=bfd"]  # lld 14 mislinks riscv64; GNU ld from the cross binutils
            if target.threads > 1:
                flags[-1] = link[-2] = "-fopenmp=libgomp"
    elif choice == "gcc":
        if native:
            cxx = [_need("g++", "Debian package g++")]
        else:
            triple = CROSS_TRIPLES[arch]
            cxx = [_need("%s-g++" % triple, "Debian package g++-%s" % triple)]
    else:
        raise HarnessError("target %s: toolchain %r is not gcc, clang or auto" % (target.name, choice))
    if arch == "riscv64":
        flags += ["-march=%s" % (target.march or "rv64gc"), "-mabi=lp64d"]
        if target.vlen and choice == "clang":
            flags += ["-mllvm", "-riscv-v-vector-bits-min=%d" % target.vlen]
    elif target.march:
        flags += ["-march=%s" % target.march]
    elif native and arch == "x86_64":
        flags += ["-march=native"]
    version = subprocess.run(cxx + ["--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return Toolchain(choice, cxx, flags, link, version)


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise HarnessError("compiler %s not found; install the %s" % (tool, package))
    return tool
