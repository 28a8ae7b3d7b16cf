"""rocprof on AMD: kernel durations from a kernel trace, the last N dispatches of the variant.

The job runs in a child process under ``rocprofv3 --kernel-trace --output-format csv`` (ROCm 6+)
or, where only the old tool exists, ``rocprof --timestamp on`` (results.csv). Every dispatch is
traced (the fill, error and reference kernels too), so the parser keeps the dispatches whose name
is the variant's entry and takes the last ``launches`` of them: the timed ones come last.

Formats read (tests/data/rocprof has real samples of each):
  rocprofv3 kernel_trace.csv  "Kind","Agent_Id",...,"Kernel_Name",...,"Start_Timestamp","End_Timestamp",...
  rocprofv3 kernel_stats.csv  "Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev"
  rocprof results.csv         "Index","KernelName",...,"BeginNs","EndNs","CompleteNs"[,"DurationNs"]
  rocprof results.stats.csv   "Name","Calls","TotalDurationNs","AverageNs","Percentage"
"""

import csv
import glob
import io
import os
import re
import shutil
import statistics

COUNTERS = ["vgpr", "sgpr", "lds_bytes", "scratch_bytes"]


class RocprofProfiler(object):
    name = "rocprof"
    wraps_process = True
    counter_names = list(COUNTERS)

    def __init__(self, api=None, options=None):
        self.options = options or {}

    @staticmethod
    def tool():
        return "rocprofv3" if shutil.which("rocprofv3") else ("rocprof" if shutil.which("rocprof") else None)

    def launches(self):
        return max(1, int(self.options.get("iters", 10)))

    def command(self, child, workdir):
        tool = self.tool()
        if tool == "rocprofv3":
            return ["rocprofv3", "--kernel-trace", "--output-format", "csv", "-d", workdir, "-o", "trace",
                    "--"] + list(child)
        if tool == "rocprof":
            return ["rocprof", "--timestamp", "on", "-o", os.path.join(workdir, "results.csv")] + list(child)
        raise RuntimeError("neither rocprofv3 nor rocprof is on PATH")

    def collect(self, workdir, entry, launches):
        files = sorted(glob.glob(os.path.join(workdir, "**", "*kernel_trace.csv"), recursive=True))
        files += [f for f in glob.glob(os.path.join(workdir, "**", "results.csv"), recursive=True)]
        records = []
        for path in files:
            with open(path, errors="replace") as f:
                records += parse_trace_csv(f.read())
        return summarize_dispatches(records, entry, launches)


def normalize_kernel_name(name):
    """'matmul_kernel.kd', 'f(int) [clone .kd]', 'void f<float>(float*)' -> the bare entry name."""
    name = name.strip().strip('"')
    name = re.sub(r"\s*\[clone \.kd\]$", "", name)
    if name.endswith(".kd"):
        name = name[:-3]
    name = name.split("(")[0].strip()
    name = re.sub(r"<.*>$", "", name)
    return name.split()[-1] if name else name


def _int(value):
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def parse_trace_csv(text):
    """Dispatch records of a rocprofv3 kernel_trace.csv or a rocprof v1 results.csv:
    [{"kernel", "start", "end", "duration_ns", "vgpr", "sgpr", "lds_bytes", "scratch_bytes"}]."""
    reader = csv.DictReader(io.StringIO(text.strip() + "\n"))
    fields = reader.fieldnames or []
    out = []
    if "Kernel_Name" in fields:  # rocprofv3
        for row in reader:
            if row.get("Kind", "KERNEL_DISPATCH") != "KERNEL_DISPATCH":
                continue
            start, end = _int(row.get("Start_Timestamp")), _int(row.get("End_Timestamp"))
            out.append({"kernel": row["Kernel_Name"], "start": start, "end": end,
                        "duration_ns": end - start if start is not None and end is not None else None,
                        "vgpr": _int(row.get("VGPR_Count") or row.get("Arch_VGPR_Count")),
                        "sgpr": _int(row.get("SGPR_Count")),
                        "lds_bytes": _int(row.get("LDS_Block_Size") or row.get("Group_Segment_Size")),
                        "scratch_bytes": _int(row.get("Scratch_Size") or row.get("Private_Segment_Size"))})
    elif "KernelName" in fields:  # rocprof v1/v2
        for row in reader:
            begin, end = _int(row.get("BeginNs")), _int(row.get("EndNs"))
            duration = _int(row.get("DurationNs"))
            if duration is None and begin is not None and end is not None:
                duration = end - begin
            out.append({"kernel": row["KernelName"], "start": begin, "end": end, "duration_ns": duration,
                        "vgpr": _int(row.get("arch_vgpr") or row.get("vgpr")), "sgpr": _int(row.get("sgpr")),
                        "lds_bytes": _int(row.get("lds")), "scratch_bytes": _int(row.get("scr"))})
    return out


def parse_stats_csv(text):
    """kernel_stats.csv / results.stats.csv -> {kernel name: {"calls", "total_ns", "average_ns", ...}}."""
    out = {}
    for row in csv.DictReader(io.StringIO(text.strip() + "\n")):
        entry = {"calls": _int(row.get("Calls")), "total_ns": _int(row.get("TotalDurationNs")),
                 "average_ns": float(row["AverageNs"]) if row.get("AverageNs") else None,
                 "percentage": float(row["Percentage"]) if row.get("Percentage") else None}
        for key, col in (("min_ns", "MinNs"), ("max_ns", "MaxNs")):
            if row.get(col):
                entry[key] = _int(row[col])
        if row.get("StdDev"):
            entry["stddev_ns"] = float(row["StdDev"])
        out[row["Name"]] = entry
    return out


def summarize_dispatches(records, entry, launches=None):
    mine = [r for r in records if normalize_kernel_name(r["kernel"]) == entry] if entry else list(records)
    mine.sort(key=lambda r: (r["start"] is None, r["start"]))
    if launches:
        mine = mine[-launches:]
    times = [r["duration_ns"] for r in mine if r["duration_ns"] is not None]
    counters = {}
    for key in COUNTERS:
        values = [r[key] for r in mine if r.get(key) is not None]
        counters[key] = statistics.median(values) if values else None
    return times, counters
