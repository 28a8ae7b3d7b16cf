"""`harness build --shapes-file LOG --thr --summary --library`, `harness report --format/--html/
--only-faster/--merge` and `--compare-wo-tuning`, through the real CLI on this machine.

A workload's hipBLASLt log gives the shapes and their call counts; the library reference
(lib:openblas, OpenBLAS) runs in the same run; every tuned file is read back by what consumes it.
"""

import json

import pandas as pd
import pytest
import yaml

from harness.report import aiter_csv
from tests.conftest import ANSWERS_ONLY, Workspace
from tests.test_shapes_sources import gemm_line

TARGET = "native-qemu-free"  # this machine, wall-clock timing
SPACE = "MR: [1, 2]\nNR: [16, 32]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1]\n"
LOG = "\n".join([
    gemm_line(64, 32, 32, "T", "N", "f32_r", 100),    # 1: 90.8 % of FLOPs x calls
    gemm_line(32, 32, 32, "T", "N", "f32_r", 20),     # 2: 9.1 %
    gemm_line(16, 16, 16, "N", "N", "f32_r", 2),      # 3: 0.1 %, under --thr 1
    "- {function: matmul, M: 48, N: 48, K: 48, transA: T",  # 4: cut off mid-line
    gemm_line(32, 32, 32, "T", "N", "f32_r", 5),      # 5: the GEMM of line 2 again
]) + "\n"
SHAPES = ["64x32x32_fp32_NT", "32x32x32_fp32_NT"]


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    w = Workspace(tmp_path_factory.mktemp("report"))
    (w.path / "space.yaml").write_text(SPACE)
    (w.path / "gemms.log").write_text(LOG)
    out = w.harness("build", "matmul", "--target", TARGET, "--shapes-file", "gemms.log", "--thr", "1",
                    "--summary", "workload.csv", "--space", "space.yaml", "--library")
    w.build_out = out.stdout + out.stderr
    w.harness("run", "--iters", "3", "--warmup", "1", *ANSWERS_ONLY)
    return w


def results(ws):
    return pd.read_csv(ws.path / "results" / TARGET / "matmul" / "results.csv")


def test_hipblaslt_log_gives_weighted_shapes_and_library_rows(ws):
    assert "gemms.log:4: skipped" in ws.build_out  # the bad line is reported with its number
    assert "2 shapes kept at --thr 1 %" in ws.build_out and "99.89 %" in ws.build_out
    summary = pd.read_csv(ws.path / "workload.csv")
    assert list(summary["calls"]) == [100, 25, 2] and list(summary["kept"]) == [True, True, False]
    manifest = json.loads((ws.path / "build" / TARGET / "matmul" / "manifest.json").read_text())
    assert {s["id"]: s["weight"] for s in manifest["shapes"]} == {SHAPES[0]: 100.0, SHAPES[1]: 25.0}
    df = results(ws)
    lib = df[df["variant_id"].str.startswith("lib:")]
    assert sorted(lib["shape_id"]) == sorted(SHAPES) and set(lib["variant_id"]) == {"lib:openblas:fp32"}
    assert set(lib["status"]) == {"ok"} and lib.filter(like="cfg_").isna().all().all()
    assert set(df["status"]) == {"ok"} and len(df) == 2 * 4 + 2


@pytest.mark.slow
def test_report_writes_every_format_with_metadata_and_uplift(ws):
    refused = ws.harness("report", "--format", "triton", check=False)  # aiter has no fp32 Triton GEMM family
    assert refused.returncode == 2 and "--format triton: no shape is left" in refused.stderr
    assert "32x32x32_fp32_NT left out: aiter's Triton GEMM-A16W16 is X @ W^T (layout NT) in fp16 or bf16" in (
        refused.stderr.replace("\n", " "))
    out = ws.harness("report", "--format", "aiter", "-f", "yaml", "--all-candidates", "--html").stdout
    tuned = ws.path / "tuned" / TARGET
    df = results(ws)
    kernels = df[~df["variant_id"].str.startswith("lib:")]
    best = json.loads((tuned / "matmul.json").read_text())
    chosen = {b["shape"]: b for b in best["best"]}
    assert sorted(chosen) == sorted(SHAPES) and not any(b["variant_id"].startswith("lib:") for b in best["best"])
    # aiter/CK tuned CSV: the exact columns, one row per shape, the library left out, metadata filled
    a = pd.read_csv(tuned / "matmul.aiter.csv")
    assert list(a.columns) == aiter_csv.columns()
    assert sorted(a["kernelId"]) == sorted(b["variant_id"] for b in chosen.values())
    assert set(a["gfx"]) == {"x86_64"} and (a["cu_num"] >= 1).all() and a["device"].str.len().min() > 0
    assert a["driver"].str.startswith("Linux").all() and a["toolchain"].str.contains(r"gcc|clang|g\+\+").all()
    assert len(pd.read_csv(tuned / "matmul.aiter.all.csv")) == len(kernels)
    # tune_gemm YAML loads; the header records the metadata
    text = (tuned / "matmul.yaml").read_text()
    assert len(yaml.safe_load(text)) == 2 and "# arch: x86_64" in text and "# cu_num: " in text
    # the plain tuned files record where they hold too
    assert best["arch"] == "x86_64" and best["cu_num"] >= 1 and best["toolchain"] and best["driver"]
    assert {"arch", "device_name", "cu_num", "driver", "toolchain", "triton"} <= set(
        pd.read_csv(tuned / "matmul.csv").columns)
    meta = json.loads((ws.path / "results" / TARGET / "matmul" / "meta.json").read_text())
    assert meta["cu_num"] == best["cu_num"] and meta["facts"]["arch"] == "x86_64"
    # uplift over the library, weighted by the log's call counts
    assert "against the library" in out and "weighted speedup over the library" in out
    up = pd.read_csv(tuned / "matmul.uplift.csv").set_index("shape_id")
    assert up.loc[SHAPES[0], "weight"] == 100 and up.loc[SHAPES[1], "weight"] == 25
    assert (up["library"] == "lib:openblas:fp32").all()
    lib_ns = up["library_ns"]
    used = up.apply(lambda r: r["tuned_ns"] if r["kept"] else r["library_ns"], axis=1)
    expected = (up["weight"] * lib_ns).sum() / (up["weight"] * used).sum()
    assert "%.3fx" % expected in out
    page = (tuned / "matmul.html").read_text()
    assert page.count("<img") >= 2 and "lib:openblas:fp32" in page and "<table" in page


@pytest.mark.slow
def test_only_faster_keeps_what_beats_the_library(ws):
    ws.harness("report", "--format", "aiter", "--only-faster", "--err-ratio", "0", "--out", "shipped")
    up = pd.read_csv(ws.path / "shipped" / "matmul.uplift.csv")
    kept = sorted(up.loc[up["kept"], "shape_id"])
    path = ws.path / "shipped" / "matmul.aiter.csv"  # none when OpenBLAS beats every tuned config
    a = pd.read_csv(path) if path.exists() else pd.DataFrame({"M": [], "N": [], "K": []})
    assert sorted("%dx%dx%d_fp32_NT" % t for t in zip(a["M"], a["N"], a["K"])) == kept
    bad = ws.harness("report", "--err-ratio", "2", check=False)
    assert bad.returncode == 2 and "--err-ratio" in bad.stderr


@pytest.mark.slow
def test_compare_without_tuning_rebuilds_exactly_the_tuned_configs(ws):
    ws.harness("report", "--format", "aiter,yaml")
    before = len(results(ws))
    tuned = ws.path / "tuned" / TARGET / "matmul.aiter.csv"
    out = ws.harness("report", "--compare-wo-tuning", tuned, "--library", "--iters", "3").stdout
    assert "2 entries: ok 2" in out
    cmp = pd.read_csv(ws.path / "tuned" / TARGET / "compare-matmul.aiter.csv.csv")
    claimed = pd.read_csv(tuned)
    assert list(cmp["claimed_us"]) == list(claimed["us"])
    assert set(cmp["status"]) == {"ok"} and (cmp["measured_us"] > 0).all() and (cmp["rel_err"] < 1e-5).all()
    assert cmp["library"].eq("lib:openblas:fp32").all() and (cmp["speedup_vs_library"] > 0).all()
    assert list(cmp["config"]) == [" ".join("%s=%s" % kv for kv in aiter_csv.parse_kernel_name(n, kernel="matmul").items())
                                   for n in claimed["kernelName"]]
    assert len(results(ws)) == before  # nothing mixed into the target's own results
    # the tune_gemm YAML names the same configs
    out = ws.harness("report", "--compare-wo-tuning", ws.path / "tuned" / TARGET / "matmul.yaml").stdout
    assert "2 entries: ok 2" in out


@pytest.mark.slow
def test_compare_without_tuning_catches_a_wrong_answer(tmp_path):
    ws = Workspace(tmp_path)
    entry = {"M": 32, "N": 32, "K": 32, "dtype": "fp32", "layout": "NN", "time_ns_median": 2000.0,
             "config": {"MR": 1, "NR": 16, "KC": 64, "MC": 16, "NC": 64, "PACK_B": 1, "FAULT": "none"}}
    wrong = dict(entry, config=dict(entry["config"], FAULT="wrong"))
    (tmp_path / "theirs.json").write_text(json.dumps({"kernel": "faulty_matmul", "best": [entry, wrong]}))
    proc = ws.harness("report", "--target", TARGET, "--kernel", "faulty_matmul", "--compare-wo-tuning",
                      "theirs.json", "--iters", "2", check=False)
    assert proc.returncode == 1, proc.stderr
    assert "1 of 2 tuned entries did not pass" in proc.stdout
    cmp = pd.read_csv(tmp_path / "tuned" / TARGET / "compare-theirs.json.csv")
    assert list(cmp["status"]) == ["ok", "wrong_answer"] and cmp.loc[1, "rel_err"] > 1e-5
    assert "relative error" in cmp.loc[1, "message"]


def test_compare_refuses_configs_the_kernel_does_not_have(ws):
    (ws.path / "gpu.yaml").write_text(
        "# harness tuned configs\n"
        "- {'M': 32, 'N': 32, 'K': 32, 'rowMajorA': 'T', 'rowMajorB': 'T', 'dtype': 'fp32', 'MR': 2, 'NR': 32, "
        "'KC': 64, 'MC': 16, 'NC': 64, 'PACK_B': 1, 'num_warps': 4} # TFLOPS: 1.00 time(us): 2.00\n")
    proc = ws.harness("report", "--compare-wo-tuning", "gpu.yaml", check=False)
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "gpu.yaml:2" in lines[0] and "unknown: num_warps" in lines[0]
    proc = ws.harness("report", "--compare-wo-tuning", "missing.csv", check=False)
    assert proc.returncode == 2 and "tuned file missing.csv does not exist" in proc.stderr


@pytest.mark.slow
def test_merge_refuses_another_arch_unless_forced(ws):
    ws.harness("report", "--format", "aiter")
    mine = ws.path / "tuned" / TARGET / "matmul.aiter.csv"
    theirs = pd.read_csv(mine)
    theirs["us"] = theirs["us"] / 2  # faster, on another board
    theirs["gfx"] = "riscv64"
    theirs.to_csv(ws.path / "theirs.csv", index=False)
    proc = ws.harness("report", "--merge", mine, "--merge", "theirs.csv", "--out", "merged.csv", check=False)
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "refusing to merge" in lines[0] and "riscv64" in lines[0]
    ws.harness("report", "--merge", mine, "--merge", "theirs.csv", "--out", "merged.csv", "--force")
    merged = pd.read_csv(ws.path / "merged.csv")
    assert sorted(merged["gfx"]) == ["riscv64", "riscv64", "x86_64", "x86_64"]
    # same arch: one row per shape, the fastest kept
    theirs["gfx"] = "x86_64"
    theirs.to_csv(ws.path / "theirs.csv", index=False)
    ws.harness("report", "--merge", mine, "--merge", "theirs.csv", "--out", "merged.csv")
    merged = pd.read_csv(ws.path / "merged.csv")
    assert len(merged) == 2 and list(merged.sort_values("M")["us"]) == list(theirs.sort_values("M")["us"])
    proc = ws.harness("report", "--merge", mine, check=False)
    assert proc.returncode == 2 and "--merge needs --out" in proc.stderr


def test_summary_needs_a_hipblaslt_log(ws):
    (ws.path / "list.txt").write_text("32x32x32\n")
    proc = ws.harness("build", "matmul", "--target", TARGET, "--shapes-file", "list.txt", "--summary", "s.csv",
                      check=False)
    assert proc.returncode == 2 and "--summary writes a hipBLASLt log's workload summary" in proc.stderr
    proc = ws.harness("report", "--format", "excel", check=False)
    assert proc.returncode == 2 and "unknown --format 'excel'" in proc.stderr


def test_report_reads_results_without_a_host_column(ws):
    """A results CSV from an older agent has no host column: the report says none, no KeyError."""
    path = ws.path / "results" / TARGET / "matmul" / "results.csv"
    saved = path.read_text()
    try:
        pd.read_csv(path, dtype=str, keep_default_na=False).drop(columns=["host"]).to_csv(path, index=False)
        ws.harness("report", "--no-fetch", "--format", "aiter", "--out", "nohost")
        assert json.loads((ws.path / "nohost" / "matmul.json").read_text())["hosts"] == []
        assert len(pd.read_csv(ws.path / "nohost" / "matmul.aiter.csv")) == 2
    finally:
        path.write_text(saved)


def test_a_shape_without_an_ok_row_is_told_its_commonest_failure():
    import pandas as pd

    from harness.api.report import _why_no_ok

    rows = pd.DataFrame({"shape_id": ["a", "a", "a", "a", "b", "c"],
                         "status": ["load_error", "load_error", "wrong_answer", "pruned", "pruned", "crash"],
                         "message": ["no fill kernel for bf16", "no fill kernel for bf16", "rel_err 0.5", "", "", None]})
    assert _why_no_ok(rows, ["a", "b", "c"]) == ["a: 2 of 3 rows load_error: no fill kernel for bf16",
                                                 "c: 1 of 1 rows crash"]
