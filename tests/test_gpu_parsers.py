"""The ncu and rocprof parsers on recorded real output (tests/data/ncu, tests/data/rocprof)."""

from pathlib import Path

import pytest

from remote_agent.profilers import ncu, rocprof

DATA = Path(__file__).parent / "data"


# ---- ncu: recorded on an H200 (driver 580, Nsight Compute 2025.3.1) by the GPU agent ----------
def test_ncu_raw_page_one_record_per_profiled_launch():
    """--page raw --print-units base, 5 launches between cuProfilerStart/Stop of one variant."""
    records = ncu.parse_ncu_csv((DATA / "ncu" / "h200_raw_page.csv").read_text())
    assert len(records) == 5
    assert [r["id"] for r in records] == [0, 1, 2, 3, 4]
    assert all(r["kernel"] == "matmul_kernel" for r in records)
    first = records[0]["metrics"]
    assert first["gpu__time_duration.sum"] == 889696.0  # nsecond, base unit
    assert first["dram__bytes_read.sum"] == 247145216.0  # "247,145,216" in the file
    assert first["launch__registers_per_thread"] == 72.0
    for name in ncu.METRICS:  # every metric the profiler asks for is in the recording
        assert name in first, name


def test_ncu_raw_page_summary_gives_times_and_medians():
    records = ncu.parse_ncu_csv((DATA / "ncu" / "h200_raw_page.csv").read_text())
    times, counters = ncu.summarize_launches(records, "matmul_kernel", ncu.METRICS, launches=5)
    assert times == [889696.0, 893152.0, 888896.0, 887008.0, 894240.0]
    assert counters["gpu__time_duration.sum"] == 889696.0  # the median launch
    assert counters["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == pytest.approx(24.61)
    times3, _ = ncu.summarize_launches(records, "matmul_kernel", ncu.METRICS, launches=3)
    assert times3 == times[-3:]
    assert ncu.summarize_launches(records, "other_kernel", ncu.METRICS)[0] == []


def test_ncu_details_page_long_format_with_scaled_units():
    """The default page: one row per (launch, metric), units such as "ns" and "byte"."""
    records = ncu.parse_ncu_csv((DATA / "ncu" / "h200_details_page.csv").read_text())
    assert len(records) == 2
    m = records[0]["metrics"]
    assert m["gpu__time_duration.sum"] == 886528.0
    assert m["dram__bytes_read.sum"] == 241845504.0
    assert m["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == pytest.approx(24.8)
    times, counters = ncu.summarize_launches(records, "matmul_kernel", ncu.METRICS)
    assert len(times) == 2
    assert counters["dram__bytes_write.sum"] is None  # not collected: empty, never 0


def test_ncu_units_and_numbers():
    assert ncu._scale("usecond", 1.5) == 1500.0
    assert ncu._scale("msecond", 2.0) == 2e6
    assert ncu._scale("Kbyte", 3.0) == 3000.0
    assert ncu._scale("%", 12.5) == 12.5
    assert ncu._number("1,234.5") == 1234.5
    assert ncu._number("n/a") is None
    assert ncu.parse_ncu_csv("==PROF== Connected to process 1\n==ERROR== no kernels were profiled\n") == []


def test_ncu_command_profiles_only_the_bracketed_launches(tmp_path):
    prof = ncu.NcuProfiler(options={"iters": 50})
    cmd = prof.command(["python3", "-m", "x"], str(tmp_path))
    assert cmd[cmd.index("--profile-from-start") + 1] == "off"
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[-3:] == ["python3", "-m", "x"]
    assert prof.launches() == 5  # ncu replays are slow: at most 5


# ---- rocprof: real outputs published from AMD GPU runs (see tests/data/rocprof/README.md) -------
def test_rocprofv3_kernel_trace_18_columns():
    records = rocprof.parse_trace_csv((DATA / "rocprof" / "rocprofv3_kernel_trace_lumi.csv").read_text())
    assert len(records) == 4
    assert records[0]["kernel"] == "__amd_rocclr_initHeap"
    assert records[1]["duration_ns"] == 1614963547425378 - 1614963488155186
    assert records[1]["scratch_bytes"] == 1024  # Private_Segment_Size
    times, counters = rocprof.summarize_dispatches(records, "taylor_base", launches=2)
    assert times == [1614963607003411 - 1614963547688898, 1614963666422240 - 1614963607259568]
    assert counters["scratch_bytes"] == 1024
    assert counters["vgpr"] is None  # this rocprofv3 version has no register columns


def test_rocprofv3_kernel_trace_22_columns_agent_names():
    records = rocprof.parse_trace_csv((DATA / "rocprof" / "rocprofv3_kernel_trace_sdk.csv").read_text())
    assert len(records) == 1
    r = records[0]
    assert r["duration_ns"] == 1551401624459226 - 1551401624448706
    assert (r["vgpr"], r["sgpr"], r["lds_bytes"], r["scratch_bytes"]) == (8, 16, 0, 0)
    assert rocprof.normalize_kernel_name(r["kernel"]) == "addition_kernel"


def test_rocprof_v1_results_csv_last_n():
    records = rocprof.parse_trace_csv((DATA / "rocprof" / "rocprof_v1_results.csv").read_text())
    assert len(records) == 10
    assert records[0]["duration_ns"] == 26316649  # the DurationNs column
    times, counters = rocprof.summarize_dispatches(records, "bodyForce", launches=3)
    assert times == [26083752, 26098793, 26095267]
    assert counters["vgpr"] == 20 and counters["sgpr"] == 16


def test_rocprof_v1_counter_csv_without_duration_column():
    records = rocprof.parse_trace_csv((DATA / "rocprof" / "rocprof_v1_counters.csv").read_text())
    assert len(records) == 1
    assert records[0]["duration_ns"] == 1594244138305243 - 1594244111978746  # EndNs - BeginNs


def test_rocprof_stats_files():
    v3 = rocprof.parse_stats_csv((DATA / "rocprof" / "rocprofv3_kernel_stats_jacobi.csv").read_text())
    k = v3["JacobiIterationKernel(int, double, double, double const*, double const*, double*, double*)"]
    assert k["calls"] == 1000 and k["total_ns"] == 545275480 and k["min_ns"] == 526082
    assert k["stddev_ns"] == pytest.approx(8821.418627)
    v1 = rocprof.parse_stats_csv((DATA / "rocprof" / "rocprof_v1_results.stats.csv").read_text())
    assert v1["bodyForce(Body*, float, int) [clone .kd]"]["average_ns"] == 26112494


@pytest.mark.parametrize("name, entry", [
    ("matmul_kernel", "matmul_kernel"),
    ("matmul_kernel.kd", "matmul_kernel"),
    ("bodyForce(Body*, float, int) [clone .kd]", "bodyForce"),
    ("void addition_kernel<float>(float*, float const*, float const*, int, int)", "addition_kernel"),
])
def test_rocprof_kernel_names(name, entry):
    assert rocprof.normalize_kernel_name(name) == entry


def test_rocprof_collect_reads_the_files_rocprof_writes(tmp_path):
    """rocprofv3 puts <pid>_kernel_trace.csv in a host-named subfolder; the profiler finds it."""
    sub = tmp_path / "node01" / "1234"
    sub.mkdir(parents=True)
    (sub / "1234_kernel_trace.csv").write_text(
        (DATA / "rocprof" / "rocprofv3_kernel_trace_lumi.csv").read_text())
    times, _ = rocprof.RocprofProfiler().collect(str(tmp_path), "taylor_base", 3)
    assert len(times) == 3
