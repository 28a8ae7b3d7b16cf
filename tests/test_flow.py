"""The four commands end to end: native here, and emulated boards over a real loopback sshd."""

import json

import pandas as pd
import pytest

from tests.conftest import ANSWERS_ONLY, needs

SHAPES = "32x32x32,48x40x64:fp16"


def _results(ws, target, kernel="matmul"):
    return pd.read_csv(ws.path / "results" / target / kernel / "results.csv")


def _assert_best_ok(ws, target, shapes):
    best = json.loads((ws.path / "tuned" / target / "matmul.json").read_text())["best"]
    assert sorted(b["shape"] for b in best) == sorted(shapes)
    df = _results(ws, target)
    for entry in best:
        row = df[(df.variant_id == entry["variant_id"]) & (df.shape_id == entry["shape"])].iloc[-1]
        assert row.status == "ok"
        assert row.rel_err <= {"fp32": 1e-5, "fp16": 1e-2}[row["dtype"]]  # the answer was checked
        assert row.samples >= 5 and row.iterations >= row.samples and 0 <= row.noise


@pytest.mark.slow
def test_local_target_native(local_workspace):
    ws = local_workspace
    ws.harness("build", "matmul", "--target", "local", "--shapes", SHAPES, "--space", "space.yaml")
    ws.harness("run", "--iters", "5", *ANSWERS_ONLY)
    out = ws.harness("report").stdout
    assert "best config per shape" in out
    _assert_best_ok(ws, "local", ["32x32x32_fp32_NN", "48x40x64_fp16_NN"])
    df = _results(ws, "local")
    assert set(df.status) == {"ok"}
    # perf counts task-clock here; cycles is not supported on this machine or is a number: never 0
    assert df["ctr_task_clock"].notna().all()
    assert not (df["ctr_cycles"] == 0).any()


@pytest.mark.slow
@needs("qemu-riscv64", "clang", "riscv64-linux-gnu-ld")
def test_riscv_rvv_board_over_ssh(workspace):
    ws = workspace
    ws.harness("build", "matmul", "--target", "rv", "--shapes", SHAPES, "--space", "space.yaml")
    manifest = json.loads((ws.path / "build/rv/matmul/manifest.json").read_text())
    assert manifest["target"]["vlen"] == 256 and "-riscv-v-vector-bits-min=256" in manifest["toolchain"]["flags"]
    out = ws.harness("push", "rv").stdout
    assert "files sent" in out
    ws.harness("run", "--remote", "rv", "--iters", "5", *ANSWERS_ONLY)
    assert (ws.path / "remote-rv/results/rv/matmul/results.csv").exists()  # written on the remote side
    assert not (ws.path / "results/rv/matmul/results.csv").exists()
    ws.harness("report")  # fetches
    _assert_best_ok(ws, "rv", ["32x32x32_fp32_NN", "48x40x64_fp16_NN"])


@pytest.mark.slow
@needs("qemu-aarch64", "clang", "aarch64-linux-gnu-ld")
def test_aarch64_board_over_ssh_with_tune(workspace):
    ws = workspace
    # the flow, not the timing, is under test here: short jobs, two re-measure rounds
    ws.harness("tune", "matmul", "--target", "arm", "--shapes", SHAPES, "--space", "space.yaml", "--iters", "5",
               *ANSWERS_ONLY, "--repeats", "2")
    _assert_best_ok(ws, "arm", ["32x32x32_fp32_NN", "48x40x64_fp16_NN"])


@pytest.mark.fresh_compile_cache
@pytest.mark.slow
@needs("qemu-riscv64", "clang")
def test_rebuild_compiles_nothing_and_repush_sends_nothing(workspace):
    ws = workspace
    ws.harness("build", "matmul", "--target", "rv", "--shapes", SHAPES, "--space", "space.yaml")
    ws.harness("push", "rv")
    again = ws.harness("build", "matmul", "--target", "rv", "--shapes", SHAPES, "--space", "space.yaml").stdout
    assert "0 compiled" in again and "8 cached" in again
    repush = ws.harness("push", "rv").stdout
    assert "0 files sent" in repush and "in 1 SSH commands" in repush
    # one more config: only its artifacts are compiled and sent
    (ws.path / "space.yaml").write_text("MR: [1, 2, 4]\nNR: [16, 32]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1]\n")
    grown = ws.harness("build", "matmul", "--target", "rv", "--shapes", SHAPES, "--space", "space.yaml").stdout
    assert "8 cached" in grown and "4 compiled" in grown
    assert "4 files sent, 14 already there" in ws.harness("push", "rv").stdout


@pytest.mark.slow
def test_targets_list_and_check_over_ssh(workspace):
    ws = workspace
    listing = ws.harness("targets").stdout
    assert "rv" in listing and "riscv64 VLEN 256" in listing and "127.0.0.1" in listing
    out = ws.harness("targets", "check", "rv").stdout
    assert "python 3." in out and "x86_64" in out  # the loopback "board" is this machine
    assert "perf:" in out and "task-clock" in out.split("counts:")[1]


@pytest.mark.slow
@needs("qemu-riscv64", "clang")
def test_openmp_launcher_walks_the_grid_in_threads_on_rvv(local_workspace):
    ws = local_workspace
    (ws.path / "targets.yaml").write_text(
        "rvomp:\n  arch: riscv64\n  toolchain: clang\n  march: rv64gcv\n  vlen: 256\n  threads: 4\n"
        "  profiler: wallclock\n  run_under: %s\n" % "qemu-riscv64 -cpu rv64,v=true,vlen=256,vext_spec=v1.0")
    ws.harness("build", "matmul", "--target", "rvomp", "--shapes", "128x96x64", "--space", "space.yaml")
    launcher = next((ws.path / "build/rvomp/matmul/objs").glob("launcher-*.cpp")).read_text()
    assert "#pragma omp parallel for" in launcher and "num_threads(4)" in launcher
    ws.harness("run", "--iters", "2", *ANSWERS_ONLY)
    df = _results(ws, "rvomp")
    assert set(df.status) == {"ok"} and len(df) == 4
