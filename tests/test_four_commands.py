"""The four commands exactly as a user types them, on a fresh project folder whose targets.yaml
makes `laptop` the default: an RVV board (VLEN 256, emulated by qemu) behind the loopback sshd,
its host, port and key read from the environment by targets.yaml."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.conftest import QEMU_RV, REPO, needs

TARGETS_YAML = """\
default: laptop

laptop:
  description: a RISC-V board with RVV 1.0 (VLEN 256) over SSH
  arch: riscv64
  toolchain: clang
  march: rv64gcv
  vlen: 256
  profiler: perf
  events: [task-clock]
  run_under: ${HARNESS_LAPTOP_RUN_UNDER:-}
  workdir: ${HARNESS_LAPTOP_WORKDIR:-~/.harness-remote}
  ssh:
    host: ${HARNESS_LAPTOP_HOST}
    user: ${HARNESS_LAPTOP_USER:-root}
    port: ${HARNESS_LAPTOP_PORT:-22}
    key: ${HARNESS_LAPTOP_KEY:-~/.ssh/id_ed25519}
    known_hosts: ${HARNESS_LAPTOP_KNOWN_HOSTS:-~/.ssh/known_hosts}
"""
SHAPES = "32x32x32,48x40x64:fp16"
SPACE = "MR: [1, 2]\nNR: [16]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1]\n"


@pytest.mark.fresh_compile_cache
@pytest.mark.slow
@needs("qemu-riscv64", "clang", "riscv64-linux-gnu-ld")
def test_build_push_run_report_as_typed(tmp_path, sshd):
    project = tmp_path / "project"
    project.mkdir()
    (project / "targets.yaml").write_text(TARGETS_YAML)
    (tmp_path / "space.yaml").write_text(SPACE)
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200",
               HARNESS_LAPTOP_HOST="127.0.0.1", HARNESS_LAPTOP_PORT=str(sshd.port),
               HARNESS_LAPTOP_USER=os.environ.get("USER", "root") if os.geteuid() else "root",
               HARNESS_LAPTOP_KEY=str(sshd.client_key), HARNESS_LAPTOP_KNOWN_HOSTS=str(sshd.known_hosts),
               HARNESS_LAPTOP_WORKDIR=str(tmp_path / "board"), HARNESS_LAPTOP_RUN_UNDER=QEMU_RV,
               # a small space and two shapes keep the emulated board quick
               HARNESS_SHAPES=SHAPES, HARNESS_SPACE=str(tmp_path / "space.yaml"))
    for name in ("HARNESS_TARGETS", "HARNESS_KERNELS_PATH"):
        env.pop(name, None)
    out = {}
    for line in ("harness build matmul", "harness push laptop", "harness run --remote", "harness report"):
        proc = subprocess.run([sys.executable, "-m"] + line.split(), cwd=project, env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, (line, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stdout + proc.stderr
        out[line] = proc.stdout + proc.stderr

    assert "target: laptop (targets.yaml:1 says `default: laptop`" in out["harness build matmul"]
    assert "built matmul for laptop: 4 variants (4 compiled" in out["harness build matmul"]
    assert "pushed matmul to laptop" in out["harness push laptop"]
    assert "results on laptop:" in out["harness run --remote"]
    assert (tmp_path / "board/results/laptop/matmul/results.csv").exists()  # measured on the board's side
    assert "best config per shape" in out["harness report"]
    best = json.loads((project / "tuned/laptop/matmul.json").read_text())["best"]
    assert sorted(b["shape"] for b in best) == ["32x32x32_fp32_NN", "48x40x64_fp16_NN"]
    rows = pd.read_csv(project / "results/laptop/matmul/results.csv")  # fetched by the report
    assert len(rows) == 4 and set(rows.status) == {"ok"}
    for entry in best:
        row = rows[(rows.variant_id == entry["variant_id"]) & (rows.shape_id == entry["shape"])].iloc[-1]
        assert row.rel_err <= {"fp32": 1e-5, "fp16": 1e-2}[row["dtype"]]
    manifest = json.loads((project / "build/laptop/matmul/manifest.json").read_text())
    assert manifest["target"]["vlen"] == 256
