"""What this machine has: python, arch, perf and the events it counts, GPUs."""

import os
import platform
import shutil
import subprocess
import sys


def facts(events):
    return {
        "python": platform.python_version(),
        "python_ok": sys.version_info >= (3, 8),
        "arch": platform.machine(),
        "system": platform.platform(),
        "cpus": os.cpu_count(),
        "perf": perf_facts(events),
        "gpus": gpu_facts(),
        "numpy": _has_module("numpy"),
        "torch": _has_module("torch"),
        "caches": cache_sizes(),
    }


def perf_facts(events):
    perf = shutil.which("perf")
    if not perf:
        return {"found": False}
    probe = subprocess.run([perf, "stat", "-x,", "-e", "task-clock", "--", "true"], capture_output=True, text=True)
    supported, unsupported = [], []
    for event in events:
        proc = subprocess.run([perf, "stat", "-x,", "-e", event, "--", "true"], capture_output=True, text=True)
        counted = proc.returncode == 0 and "<not supported>" not in proc.stderr
        (supported if counted else unsupported).append(event)
    version = subprocess.run([perf, "--version"], capture_output=True, text=True).stdout.strip()
    return {"found": True, "runs": probe.returncode == 0, "version": version,
            "events_supported": supported, "events_unsupported": unsupported}


def gpu_facts():
    gpus = []
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True)
        gpus += [{"vendor": "nvidia", "info": line.strip()} for line in proc.stdout.splitlines() if line.strip()]
    if shutil.which("rocm-smi"):
        proc = subprocess.run(["rocm-smi", "--showproductname"], capture_output=True, text=True)
        gpus += [{"vendor": "amd", "info": line.strip()} for line in proc.stdout.splitlines() if "GPU" in line]
    return gpus


def _has_module(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def cache_sizes():
    """Bytes of L1 data, L2 and L3 cache of the first core ({} where the OS does not say): Linux's
    /sys/devices/system/cpu/cpu0/cache, else getconf."""
    found = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        entries = []
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            level = open(os.path.join(base, entry, "level")).read().strip()
            kind = open(os.path.join(base, entry, "type")).read().strip()
            size = _size_bytes(open(os.path.join(base, entry, "size")).read().strip())
        except (OSError, ValueError):
            continue
        key = {("1", "Data"): "l1d", ("2", "Unified"): "l2", ("2", "Data"): "l2", ("3", "Unified"): "l3"}.get(
            (level, kind))
        if key and size:
            found.setdefault(key, size)
    for key, name in (("l1d", "LEVEL1_DCACHE_SIZE"), ("l2", "LEVEL2_CACHE_SIZE"), ("l3", "LEVEL3_CACHE_SIZE")):
        if key not in found and shutil.which("getconf"):
            proc = subprocess.run(["getconf", name], capture_output=True, text=True)
            value = proc.stdout.strip()
            if proc.returncode == 0 and value.isdigit() and int(value) > 0:
                found[key] = int(value)
    return found


def _size_bytes(text):
    """'48K', '2048K', '300M' or a plain count -> bytes."""
    units = {"K": 1024, "M": 1024 * 1024, "G": 1024 ** 3}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)
