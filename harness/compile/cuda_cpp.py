"""CUDA C++ kernels built with NVRTC (the runtime compiler, from pip's nvidia-cuda-nvrtc-cu12 or a
CUDA toolkit), through ctypes: source text and generated headers in, a cubin for one sm arch out,
with what ptxas said of it (registers, spills). No GPU and no nvcc needed, as with Triton's AOT.

A kernel module declares ``LANGUAGE = "cuda"`` and what the build needs (``KernelSource`` below
reads it): the source file, the entry, the defines and generated headers of a config, its
threads, shared memory and parameter list (the launch facts the agent's CUDA runner takes)."""

from __future__ import annotations

import ctypes
import functools
import glob
import hashlib
import importlib
import os
import re
from pathlib import Path

from ..errors import HarnessError

NVRTC_LIBS = ("libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so")
_nvrtc = None


def _wheel_libraries() -> list:
    """libnvrtc of pip's nvidia-cuda-nvrtc wheels (nvidia/cuda_nvrtc/lib, nvidia/cu13/lib)."""
    found = []
    try:
        import nvidia
    except ImportError:
        return found
    for root in list(getattr(nvidia, "__path__", [])):
        for pattern in ("cuda_nvrtc/lib/libnvrtc.so*", "cu13/lib/libnvrtc.so*"):
            found += [p for p in sorted(glob.glob(os.path.join(root, pattern))) if "builtins" not in p
                      and ".alt." not in p]
    return found


def _preload_builtins(path: str) -> None:
    """NVRTC opens its builtins library by name at the first compile; a wheel's (13.x) is not on the
    loader's path, so the one beside ``path`` is loaded first."""
    if os.sep not in path:
        return
    for builtins in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
        if ".alt." not in builtins:
            ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)


def nvrtc():
    """The NVRTC library (loaded once); a missing one is one line saying how to install it."""
    global _nvrtc
    if _nvrtc is None:
        for name in _wheel_libraries() + list(NVRTC_LIBS):
            try:
                _preload_builtins(name)
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        else:
            raise HarnessError("NVRTC not found (the CUDA C++ kernels' compiler): pip install nvidia-cuda-nvrtc-cu12")
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        _nvrtc = lib
    return _nvrtc


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return "%d.%d" % (major.value, minor.value)


def _check(rc: int, what: str) -> None:
    if rc:
        raise HarnessError("NVRTC %s: %s" % (what, nvrtc().nvrtcGetErrorString(rc).decode()))


def compile_cubin(source: str, name: str, headers: dict, options: list) -> tuple:
    """(cubin bytes, compile log) of ``source``; a compile error raises with the log's first error."""
    lib = nvrtc()
    prog = ctypes.c_void_p()
    names = list(headers)
    texts = (ctypes.c_char_p * max(1, len(names)))(*[headers[n].encode() for n in names])
    includes = (ctypes.c_char_p * max(1, len(names)))(*[n.encode() for n in names])
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), len(names), texts, includes),
           "create")
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        text = log.value.decode(errors="replace")
        if rc:
            errors = [l for l in text.splitlines() if "error" in l] or text.splitlines()[-1:] or ["?"]
            raise HarnessError("%s: %s" % (name, errors[0].strip()[:400]))
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetCUBIN(prog, cubin), "cubin")
        return cubin.raw, text
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def ptxas_facts(log: str) -> dict:
    """Registers and spill bytes of the entry, from ptxas's -v lines in the compile log."""
    regs = re.findall(r"Used (\d+) registers", log)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return {"registers": int(regs[-1]) if regs else None,
            "spill_bytes": sum(int(a) + int(b) for a, b in spills)}


class KernelSource:
    """A CUDA C++ kernel module ("package.module:entry" with LANGUAGE = "cuda"), shaped as the GPU
    compiler's Triton KernelSource where they share a use (its specialization: no run-time integer
    argument specializes it); its config values become defines (``module.defines``)."""

    language = "cuda"

    def __init__(self, spec: str):
        self.module_name, self.fn_name = spec.split(":")
        self.module = importlib.import_module(self.module_name)
        self.source_path = Path(self.module.SOURCE)
        text = self.source_path.read_text()
        module_text = Path(self.module.__file__).read_text()
        self.source_hash = hashlib.sha256(text.encode() + b"\0" + module_text.encode() + b"\0")
        self.args, self.takes = [], set()

    def job(self, config: dict, arch: str) -> dict:
        """What the compile process gets: the source, the generated headers and the options."""
        m = self.module
        options = ["--gpu-architecture=sm_%sa" % arch if arch == "90" else "--gpu-architecture=sm_%s" % arch,
                   "--std=c++17", "--ptxas-options=-v"]
        options += ["-D%s=%d" % (k, v) for k, v in sorted(m.defines(config).items())]
        return {"language": "cuda", "module": self.module_name, "fn": self.fn_name, "source": str(self.source_path),
                "headers": m.headers(config), "options": options, "launch": m.launch_facts(config)}


def compile_job(job: dict) -> dict:
    """The cubin of a CUDA job written next to ``job["out"]`` (as the Triton compile process does)
    and its launch facts; a compile error or spills are a result, not a crash."""
    source = Path(job["source"]).read_text()
    try:
        cubin, log = compile_cubin(source, os.path.basename(job["source"]), job["headers"], job["options"])
    except HarnessError as exc:
        return {"status": "compile_error", "message": str(exc)[:600]}
    facts = ptxas_facts(log)
    if facts["spill_bytes"]:
        return {"status": "compile_error", "message": "registers spilled: %d bytes of local memory (%s)"
                % (facts["spill_bytes"], job["fn"])}
    with open(job["out"] + ".tmp", "wb") as f:
        f.write(cubin)
    launch = dict(job["launch"], format="cubin", registers=facts["registers"], nvrtc_version=nvrtc_version())
    return {"status": "ok", "launch": launch}
