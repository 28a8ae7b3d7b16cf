"""The L2 flush before each timed GPU launch: the read flush's PTX, and what the worker does when
the driver cannot load it or HARNESS_GPU_FLUSH is wrong (with the CPU stand-in driver, whose
loader refuses every image that is not an ELF, as a HIP node refuses PTX)."""

import os
import subprocess

import pytest

from remote_agent import contract
from remote_agent.agent import AgentError
from remote_agent.runners.gpu_flush import READ_LAUNCH, READ_PTX
from remote_agent.supervisor import SupervisorError
from tests.test_gpu_supervisor import make_bundle, options, run_agent


def test_the_read_flush_assembles_for_sm90_and_keeps_its_loads(tmp_path):
    compiler = pytest.importorskip("triton.backends.nvidia.compiler")
    ptxas = compiler.get_ptxas(90).path
    (tmp_path / "flush.ptx").write_bytes(READ_PTX)
    subprocess.run([ptxas, "-arch=sm_90", str(tmp_path / "flush.ptx"), "-o", str(tmp_path / "flush.cubin")],
                   check=True, capture_output=True)
    sass = subprocess.run([os.path.join(os.path.dirname(ptxas), "nvdisasm"), str(tmp_path / "flush.cubin")],
                          check=True, capture_output=True, text=True).stdout
    assert ".text.%s" % READ_LAUNCH["entry"] in sass
    assert "LDG.E.128" in sass  # the loads were not optimized away: their result decides a store


def test_a_read_flush_the_driver_cannot_load_falls_back_to_the_written_one_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GPU_FLUSH", "read")
    rows, logs = run_agent(make_bundle(tmp_path / "b"), tmp_path / "results.csv", options(), monkeypatch,
                           devices=("cuda:0",))
    assert rows and all(r["status"] == contract.OK for r in rows)
    ready = [line for line in logs if "worker for cuda:0 ready" in line]
    assert ready and "L2 flush: read flush not loaded" in ready[0] and "INVALID_IMAGE" in ready[0]
    assert "written instead" in ready[0]


def test_the_written_flush_is_the_default_and_an_unknown_flush_stops_the_run_with_its_name(tmp_path, monkeypatch):
    monkeypatch.delenv("HARNESS_GPU_FLUSH", raising=False)
    rows, logs = run_agent(make_bundle(tmp_path / "b"), tmp_path / "results.csv", options(), monkeypatch,
                           devices=("cuda:0",))
    assert any("L2 flush: write" in line for line in logs if "ready" in line)
    monkeypatch.setenv("HARNESS_GPU_FLUSH", "sideways")
    with pytest.raises((SupervisorError, AgentError), match="HARNESS_GPU_FLUSH=sideways: expected write, read or 0"):
        run_agent(make_bundle(tmp_path / "c"), tmp_path / "results2.csv", options(), monkeypatch, devices=("cuda:0",))
