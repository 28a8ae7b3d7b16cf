"""The GPU's SM clock and throttle reasons, read through NVML (libnvidia-ml.so.1, ctypes) where
the driver has it; ``None`` everywhere else (HIP nodes, the stand-in, a node without NVML).
cuDeviceGetAttribute's clock rate is the static maximum, so it says nothing about a run.

Throttle reasons that make a job re-measured: HW slowdown, SW and HW thermal slowdown, HW power
brake. The power cap (SW power cap) is recorded but is what a sustained GEMM normally runs
under, so it does not count as throttled. Standard library only."""

import ctypes
import os

THROTTLE_NAMES = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
                  0x80: "hw_power_brake"}
THROTTLED = 0x8 | 0x20 | 0x40 | 0x80
NVML_CLOCK_SM = 1


class Clocks(object):
    def __init__(self, index=None):
        self.lib = None
        self.handle = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return
            handle = ctypes.c_void_p()
            if index is None:
                index = int((os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0])
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) != 0:
                return
            self.lib, self.handle = lib, handle
        except (OSError, AttributeError, ValueError):
            self.lib = None

    def sm_mhz(self):
        if self.lib is None:
            return None
        mhz = ctypes.c_uint()
        if self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(mhz)) != 0:
            return None
        return float(mhz.value)

    def reasons(self):
        """The throttle-reason bit mask, or None."""
        if self.lib is None:
            return None
        mask = ctypes.c_ulonglong()
        if self.lib.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle, ctypes.byref(mask)) != 0:
            return None
        return int(mask.value)


def reason_words(mask):
    if not mask:
        return ""
    return ",".join(name for bit, name in sorted(THROTTLE_NAMES.items()) if mask & bit)


def throttled(mask):
    return bool(mask and mask & THROTTLED)
