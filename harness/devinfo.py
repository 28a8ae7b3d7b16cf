"""Where results hold: arch, device name, CU/SM count, driver, toolchain and Triton versions.

Every tuned file records these (``harness.report.common.Meta``). The device facts come from the
machine that ran the results: a standard-library probe (``PROBE``) run there with ``python3 -c``
(one SSH command for a remote target, a subprocess here; on a Slurm cluster each array task runs it
on its compute node and the newest facts are read), cached in ``.harness/state.json`` so
``harness report --no-fetch`` still has them. The toolchain and Triton versions come from the
bundle's manifest.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

# Runs on the remote: Python >= 3.8, standard library only. Prints one JSON object.
PROBE = r'''
import ctypes, json, os, platform, shutil, subprocess

def run(cmd):
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              universal_newlines=True, timeout=30).stdout
    except Exception:
        return ""

def cpu_name():
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return ""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(key.strip(), value.strip())
    for key in ("model name", "uarch", "cpu model", "Model", "Hardware", "isa"):
        if key in fields:
            return fields[key]
    return ""

def cuda():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return []
    if lib.cuInit(0) != 0:
        return []
    count, version = ctypes.c_int(), ctypes.c_int()
    lib.cuDeviceGetCount(ctypes.byref(count))
    lib.cuDriverGetVersion(ctypes.byref(version))
    smi = [l.strip() for l in run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
           if l.strip()] if shutil.which("nvidia-smi") else []
    out = []
    for i in range(count.value):
        dev, sms = ctypes.c_int(), ctypes.c_int()
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGet(ctypes.byref(dev), i)
        lib.cuDeviceGetName(name, 256, dev)
        lib.cuDeviceGetAttribute(ctypes.byref(sms), 16, dev)  # MULTIPROCESSOR_COUNT
        driver = smi[i] if i < len(smi) else ""
        cuda_v = "CUDA %d.%d" % (version.value // 1000, version.value % 1000 // 10)
        out.append({"name": name.value.decode(errors="replace"), "cu_num": sms.value,
                    "driver": "%s (%s)" % (driver, cuda_v) if driver else cuda_v})
    return out

def rocm():
    if not shutil.which("rocminfo"):
        return []
    out, cur = [], None
    for line in run(["rocminfo"]).splitlines():
        key, _, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        if key == "Marketing Name":
            cur = {"name": value, "cu_num": None, "driver": ""}
        elif key == "Device Type" and cur is not None:
            if value == "GPU":
                out.append(cur)
            cur = cur if value == "GPU" else None
        elif key == "Compute Unit" and out and out[-1] is cur:
            cur["cu_num"] = int(value)
    try:
        driver = "amdgpu " + open("/sys/module/amdgpu/version").read().strip()
    except OSError:
        driver = "amdgpu (kernel %s)" % platform.release()
    for gpu in out:
        gpu["driver"] = driver
    return out

print(json.dumps({"arch": platform.machine(), "cpus": os.cpu_count(), "cpu_name": cpu_name(),
                  "kernel": platform.release(), "system": platform.system(), "gpus": cuda() + rocm()}))
'''


def probe_local() -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else {}


def probe_remote(target) -> dict:
    """The probe on the target's (first) machine; {} when it cannot be reached."""
    from .errors import HarnessError
    from .transport import for_target
    from .transport.base import DEVICE_FACTS, can

    try:
        transport = for_target(target).open()
    except HarnessError:
        return {}
    try:
        command = (transport.device_facts_command() if can(transport, DEVICE_FACTS)  # Slurm: a compute node's
                   else transport.shell_command([target.python, "-c", PROBE]))
        rc, out, _ = transport.run_capture(command)
    except Exception:  # a dropped connection: the tuned files say less, nothing else is lost
        return {}
    finally:
        transport.close()
    try:
        return json.loads(out.decode()) if rc == 0 else {}
    except ValueError:
        return {}


def device_facts(root: Path, target, refresh: bool = True) -> dict:
    """The probe's facts for the target's machine; cached in the state, refreshed when asked."""
    from . import state

    _, facts = state.get(root, target.name)
    cached = facts.get("device_facts") or {}
    if not refresh and cached:
        return cached
    found = probe_remote(target) if target.is_remote else probe_local()
    if found:
        state.record(root, target.name, device_facts=found)
        return found
    return cached


def meta_for(target, manifest_toolchain: Optional[dict], facts: dict) -> dict:
    """The Meta fields (arch, device, cu_num, driver, toolchain, triton) for tuned files."""
    toolchain = dict(manifest_toolchain or {})
    triton = str(toolchain.get("triton_version") or "")
    if target.is_gpu:
        arch = str(target.gpu_arch or "")
        if target.backend == "cuda" and arch.isdigit():
            arch = "sm%s" % arch
        gpus = facts.get("gpus") or []
        gpu = gpus[0] if gpus else {}
        device, cu_num, driver = gpu.get("name", ""), gpu.get("cu_num"), gpu.get("driver", "")
        cu_num = cu_num or getattr(target, "multiprocessors", None)  # not probed: the target's count
        tool = "triton %s (%s %s)" % (triton, toolchain.get("backend", target.backend),
                                      toolchain.get("arch", target.gpu_arch)) if triton else ""
    else:
        arch = target.resolved_arch
        device = facts.get("cpu_name") or facts.get("arch") or ""
        if target.run_under:  # an emulated board: the host CPU is not the device
            device = "%s under %s" % (facts.get("cpu_name") or "host", target.run_under.split()[0])
        cu_num = facts.get("cpus")
        driver = "%s %s" % (facts.get("system", "Linux"), facts["kernel"]) if facts.get("kernel") else ""
        tool = str(toolchain.get("version") or toolchain.get("name") or "")
        if toolchain.get("kind") == "triton-cpu" and triton:
            tool = "triton-cpu %s; %s" % (triton, tool)
    return {"arch": arch, "device": device, "cu_num": cu_num, "driver": driver, "toolchain": tool,
            "triton": triton}
