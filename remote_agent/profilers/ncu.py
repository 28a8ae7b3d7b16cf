"""Nsight Compute (ncu) on NVIDIA: kernel duration and throughput metrics as counter columns.

The job runs in a child process under ncu. The child does its data generation, reference and
correctness check outside the profiled range, then launches the variant ``profile_launches``
times between cuProfilerStart and cuProfilerStop; ncu runs with ``--profile-from-start off``
and so profiles exactly those launches (with its own cache flush and replay per pass).
``--clock-control none`` leaves the GPU's clocks as they are, as the events profiler sees them.

``parse_ncu_csv`` reads both CSV layouts ncu writes: ``--page raw`` (one row per launch, one
column per metric, then a units row) and the default details page (one row per metric).
"""

import csv
import io
import os
import shutil
import statistics

METRICS = [
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
]
DURATION = "gpu__time_duration.sum"
TIME_SCALE = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
              "second": 1e9, "s": 1e9}
BYTE_SCALE = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
              "kibyte": 1024.0, "mibyte": 1024.0 ** 2, "gibyte": 1024.0 ** 3}


class NcuProfiler(object):
    name = "ncu"
    wraps_process = True
    counter_names = list(METRICS)

    def __init__(self, api=None, options=None):
        self.options = options or {}
        self.metrics = list(METRICS)

    @staticmethod
    def available():
        return shutil.which("ncu") is not None

    def launches(self):
        return max(1, min(5, int(self.options.get("iters", 5))))

    def command(self, child, workdir):
        ncu = shutil.which("ncu") or "ncu"
        return [ncu, "--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(self.metrics),
                "--profile-from-start", "off", "--clock-control", "none", "--target-processes", "all",
                "--log-file", os.path.join(workdir, "ncu.csv")] + list(child)

    def collect(self, workdir, entry, launches):
        """(per-launch times in ns, {metric: median value}) for the launches of ``entry``."""
        path = os.path.join(workdir, "ncu.csv")
        if not os.path.exists(path):
            return [], {}
        with open(path, errors="replace") as f:
            text = f.read()
        return summarize_launches(parse_ncu_csv(text), entry, self.metrics, launches)


def _number(text):
    text = (text or "").strip().replace(",", "")
    if not text or text in ("n/a", "N/A", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _scale(unit, value):
    """Durations in ns, byte counts in bytes; anything else as printed."""
    if value is None:
        return None
    u = (unit or "").strip().lower()
    if u in TIME_SCALE:
        return value * TIME_SCALE[u]
    if u in BYTE_SCALE:
        return value * BYTE_SCALE[u]
    return value


def parse_ncu_csv(text):
    """Rows of an ncu CSV log -> one dict per profiled launch:
    {"id": int, "kernel": name, "metrics": {name: value in base units}}."""
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        if line.startswith('"ID"') or line.startswith('"Kernel Name"') or line.startswith('"Metric Name"'):
            start = i
            break
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(l for l in lines[start:] if not l.startswith("==")))))
    header = rows[0]
    if "Metric Name" in header:  # details page: one row per (launch, metric)
        col = {name: i for i, name in enumerate(header)}
        launches = {}
        for row in rows[1:]:
            if len(row) != len(header):
                continue
            key = row[col["ID"]] if "ID" in col else "0"
            entry = launches.setdefault(key, {"id": int(_number(key) or 0),
                                              "kernel": row[col["Kernel Name"]] if "Kernel Name" in col else "",
                                              "metrics": {}})
            unit = row[col["Metric Unit"]] if "Metric Unit" in col else ""
            entry["metrics"][row[col["Metric Name"]]] = _scale(unit, _number(row[col["Metric Value"]]))
        return sorted(launches.values(), key=lambda e: e["id"])
    # raw page: a units row follows the header (its first cells are empty)
    units = {}
    out = []
    for row in rows[1:]:
        if len(row) != len(header):
            continue
        if row[0].strip() == "" and not units:
            units = dict(zip(header, row))
            continue
        record = dict(zip(header, row))
        metrics = {}
        for name, value in record.items():
            if "__" in name:
                metrics[name] = _scale(units.get(name, ""), _number(value))
        out.append({"id": int(_number(record.get("ID")) or 0), "kernel": record.get("Kernel Name", ""),
                    "metrics": metrics})
    return out


def kernel_matches(name, entry):
    base = name.split("(")[0].strip()
    return base == entry or base.endswith(" " + entry) or name == entry


def summarize_launches(records, entry, metrics, launches=None):
    mine = [r for r in records if kernel_matches(r["kernel"], entry)] if entry else list(records)
    if launches:
        mine = mine[-launches:]
    times = [r["metrics"].get(DURATION) for r in mine if r["metrics"].get(DURATION) is not None]
    counters = {}
    for m in metrics:
        values = [r["metrics"].get(m) for r in mine if r["metrics"].get(m) is not None]
        counters[m] = statistics.median(values) if values else None
    return times, counters
