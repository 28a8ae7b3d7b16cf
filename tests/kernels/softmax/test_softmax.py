"""The row-wise softmax end to end, declared in this folder only: natively, and on the emulated
RVV board over the loopback sshd. Its operands, dims and check come from its declaration."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ANSWERS_ONLY, needs

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SHAPES = "8x100,33x257:fp16,64x64:bf16"
IDS = ["8x100_fp32", "33x257_fp16", "64x64_bf16"]
SPACE = "BLOCK_ROWS: [1, 4]\nVEC: [1, 8]\n"
TOL = {"fp32": 1e-5, "fp16": 1e-2, "bf16": 2e-2}
# the winners' re-measure runs (its rounds are tested with matmul, tests/test_cli_tune.py), in
# its fewest rounds: the default's 3 x 5 of every shape were two thirds of these tunes
FEW_REMEASURES = ("--top", "2", "--repeats", "2")


def _results(ws, target):
    return pd.read_csv(ws.path / "results" / target / "softmax" / "results.csv")


def _assert_all_ok(ws, target):
    df = _results(ws, target)
    ran = df[df.status != "pruned"]
    assert set(ran.status) == {"ok"}, ran[["variant_id", "shape_id", "status", "message"]]
    assert sorted(set(ran.shape_id)) == sorted(IDS)
    for _, row in ran.iterrows():
        assert row.rel_err <= TOL[row["dtype"]] and row.err_ratio == 0.0
    # the results carry the kernel's own dimensions in place of M, N, K
    assert {"ROWS", "COLS"} <= set(df.columns) and not {"M", "N", "K"} & set(df.columns)
    assert sorted(zip(ran.ROWS, ran.COLS)) == sorted(zip(ran.ROWS, ran.COLS)) and set(ran.ROWS) == {8, 33, 64}
    best = json.loads((ws.path / "tuned" / target / "softmax.json").read_text())["best"]
    assert sorted(b["shape"] for b in best) == sorted(IDS)
    assert {(b["ROWS"], b["COLS"]) for b in best} == {(8, 100), (33, 257), (64, 64)}


@pytest.mark.slow
def test_tune_on_the_local_target_and_the_check_reads_the_declared_reference(local_workspace):
    ws = local_workspace
    (ws.path / "space.yaml").write_text(SPACE)
    ws.harness("tune", "softmax", "--target", "local", "--shapes", SHAPES, "--space", "space.yaml", "--iters", "3",
               *FEW_REMEASURES, *ANSWERS_ONLY)
    _assert_all_ok(ws, "local")
    manifest = json.loads((ws.path / "build/local/softmax/manifest.json").read_text())
    shape = next(s for s in manifest["shapes"] if s["id"] == "33x257_fp16")
    assert shape["dims"] == {"ROWS": 33, "COLS": 257} and shape["layout"] == ""
    assert [(o["name"], o["role"], o["dtype"]) for o in shape["operands"]] == [
        ("x", "input", "fp16"), ("y", "output", "fp16"), ("ref", "reference", "fp32")]
    assert list(shape["scalars"]) == ["ROWS", "COLS", "stride_x", "stride_y"] and sorted(shape["data"]) == ["ref", "x"]
    assert manifest["checks"] == [{"output": "y", "reference": "ref", "kind": "rel_err"}]
    # the stored reference is what the answer is checked against: doubled, every variant is wrong
    ref_file = ws.path / "build/local/softmax" / shape["data"]["ref"]
    ref = np.fromfile(ref_file, dtype=np.float32)
    assert np.allclose(ref.reshape(33, 257).sum(axis=1), 1.0, atol=1e-5)
    (ref * 2).tofile(ref_file)
    # the manifest names the new bytes (the agent refuses data that does not match its sha256)
    manifest_path = ws.path / "build/local/softmax/manifest.json"
    doubled = json.loads(manifest_path.read_text())
    for s in doubled["shapes"]:
        if s["id"] == "33x257_fp16":
            s["sha256"]["ref"] = hashlib.sha256(ref_file.read_bytes()).hexdigest()
    manifest_path.write_text(json.dumps(doubled))
    (ws.path / "results/local/softmax/results.csv").unlink()
    ws.harness("run", "--iters", "2", *ANSWERS_ONLY)
    df = _results(ws, "local")
    bad = df[(df.shape_id == "33x257_fp16") & (df.status != "pruned")]
    assert len(bad) and set(bad.status) == {"wrong_answer"} and (bad.rel_err > 0.4).all()
    others = df[(df.shape_id != "33x257_fp16") & (df.status != "pruned")]
    assert set(others.status) == {"ok"}


def test_shapes_are_written_as_the_kernel_declares_them(local_workspace):
    ws = local_workspace
    proc = ws.harness("build", "softmax", "--target", "local", "--shapes", "64x64x64", check=False)
    assert proc.returncode == 2 and "bad shape '64x64x64': write ROWSxCOLS[:dtype]" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = ws.harness("build", "softmax", "--target", "local", "--shapes", "64x64:fp16:NT", check=False)
    assert proc.returncode == 2 and "bad shape" in proc.stderr


@pytest.mark.slow
@needs("qemu-riscv64", "clang", "riscv64-linux-gnu-ld")
def test_tune_on_the_emulated_rvv_board_over_ssh(workspace):
    ws = workspace
    (ws.path / "space.yaml").write_text(SPACE)
    ws.harness("tune", "softmax", "--target", "rv", "--shapes", SHAPES, "--space", "space.yaml", "--iters", "3",
               *FEW_REMEASURES, *ANSWERS_ONLY)
    manifest = json.loads((ws.path / "build/rv/softmax/manifest.json").read_text())
    assert manifest["target"]["vlen"] == 256
    assert (ws.path / "remote-rv/results/rv/softmax/results.csv").exists()  # measured on the remote side
    _assert_all_ok(ws, "rv")


def test_this_folder_is_the_only_place_that_names_the_kernel():
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    naming = []
    for rel in files:
        path = REPO / rel
        if HERE in path.parents or not path.is_file():
            continue
        if b"softmax" in path.read_bytes().lower():
            naming.append(rel)
    assert naming == []


GPU_TARGET = ("h200:\n  backend: cuda\n  arch: x86_64\n  gpu_arch: 90\n  shared_mem_max: 232448\n"
              "  multiprocessors: 132\n  profiler: events\n")
GPU_SPACE = "BLOCK_ROWS: [1, 4]\nBLOCK_COLS: [256]\nnum_warps: [4]\nnum_stages: [1]\n"


@pytest.mark.slow
def test_builds_for_an_sm90_gpu_from_this_folder_with_its_device_plugin(local_workspace):
    """The GPU bundle (Triton compiles for sm90 here, no GPU needed) carries the folder's Triton
    kernel, its reference kernel and its device plug-in, and asks for its library."""
    import pytest

    pytest.importorskip("triton")
    ws = local_workspace
    with open(ws.path / "targets.yaml", "a") as f:
        f.write(GPU_TARGET)
    (ws.path / "gpu.yaml").write_text(GPU_SPACE)
    ws.harness("build", "softmax", "--target", "h200", "--shapes", "64x1000:fp16,33x257:bf16", "--space", "gpu.yaml",
               "--library")
    manifest = json.loads((ws.path / "build/h200/softmax/manifest.json").read_text())
    assert {v["status"] for v in manifest["variants"]} == {"ok"} and len(manifest["variants"]) >= 2
    assert {v["launch"]["entry"] for v in manifest["variants"]} == {"softmax_kernel"}
    assert sorted(manifest["toolchain"]["support"]) == ["error_bf16", "error_fp16", "error_fp32", "fill_bf16",
                                                        "fill_fp16", "reference_bf16", "reference_fp16"]
    plugin = manifest["device_plugin"]
    assert (ws.path / "build/h200/softmax" / plugin["file"]).read_bytes() == (HERE / "device.py").read_bytes()
    assert manifest["library"] == {"torch.softmax": ["64x1000_fp16", "33x257_bf16"]}


def test_the_triton_kernels_in_the_interpreter_agree_with_numpy(tmp_path):
    """softmax_kernel (several rows per program, column blocks narrower than a row) and
    softmax_reference, run by Triton's CPU interpreter on numpy buffers."""
    import pytest

    pytest.importorskip("triton")
    script = (
        "import json\nimport numpy as np\nimport triton.language as tl\n"
        "from triton.runtime import interpreter\n"
        "from tests.triton_interp import _i32, _ptr\n"
        "from tests.kernels.softmax.triton_kernel import softmax_kernel, softmax_reference\n"
        "rows, cols = 5, 300\n"
        "x = np.random.default_rng(3).uniform(-4, 4, (rows, cols)).astype(np.float32)\n"
        "def launch(fn, programs, y, **constexprs):\n"
        "    args = dict(x_ptr=_ptr(x, tl.float32), y_ptr=_ptr(y, tl.float32), ROWS=_i32(rows), COLS=_i32(cols),\n"
        "                stride_x=_i32(cols), stride_y=_i32(cols), **constexprs)\n"
        "    scope = interpreter._patch_lang(fn.fn)\n"
        "    try:\n"
        "        interpreter.interpreter_builder.set_grid_dim(programs, 1, 1)\n"
        "        for p in range(programs):\n"
        "            interpreter.interpreter_builder.set_grid_idx(p, 0, 0)\n"
        "            fn.fn(**args)\n"
        "    finally:\n"
        "        scope.restore()\n"
        "y = np.full_like(x, np.nan)\n"
        "launch(softmax_kernel, 2, y, BLOCK_ROWS=4, BLOCK_COLS=128)\n"
        "r = np.full_like(x, np.nan)\n"
        "launch(softmax_reference, rows, r, BLOCK_COLS=128)\n"
        "e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))\n"
        "want = e / e.sum(axis=1, keepdims=True)\n"
        "print(json.dumps([float(abs(y - want).max()), float(abs(r - want).max())]))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    kernel_err, reference_err = json.loads(proc.stdout.strip().splitlines()[-1])
    assert kernel_err < 1e-6 and reference_err < 1e-6


@pytest.mark.slow
def test_tunes_on_the_cpu_stand_in_gpu_with_its_plugin_checking_its_reference(local_workspace):
    """The GPU path end to end on this machine: the sm90 bundle built from this folder, run by
    the real GPU agent with the CPU stand-in in the driver's place (standin.py, here): the device
    plug-in checks the reference kernel against the host, every variant is checked against it,
    and the library rows are torch.softmax's."""
    import pytest

    pytest.importorskip("triton")
    ws = local_workspace
    with open(ws.path / "targets.yaml", "a") as f:
        f.write(GPU_TARGET)
    (ws.path / "gpu.yaml").write_text(GPU_SPACE)
    ws.env["HARNESS_GPU_API"] = "tests.kernels.softmax.standin:SoftmaxStandinApi"
    out = ws.harness("tune", "softmax", "--target", "h200", "--shapes", "64x1000:fp16,33x257:bf16", "--space",
                     "gpu.yaml", "--library", "--strategy", "exhaustive", "--top", "0", "--iters", "3",
                     "--min-time-ms", "1").stdout
    df = _results(ws, "h200")
    assert set(df.status) == {"ok"}, df[["variant_id", "shape_id", "status", "message"]]
    assert set(df.shape_id) == {"64x1000_fp16", "33x257_bf16"}
    assert set(df[df.variant_id.str.startswith("lib:")].variant_id) == {"lib:torch.softmax"}
    assert (df.rel_err <= df["dtype"].map(TOL)).all()
    assert "against the library" in out
