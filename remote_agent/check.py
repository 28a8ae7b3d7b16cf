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
