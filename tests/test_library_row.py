"""The library row on CPU targets (issue 39): a current OpenBLAS whose kernel core fits this CPU
(an inherited OPENBLAS_CORETYPE set aside), named with its version and core in the results and in
every report, carried to an SSH board with its shared library (checked by hash there), and the one
line that says what riscv64 gets instead."""

import platform
import re
import subprocess
import sys

import pandas as pd
import pytest

from harness.library import RISCV64_WHY
from tests.conftest import REPO, needs

# OpenBLAS's cores (openblas_get_corename()) that run a CPU's widest vector ISA: what a library row
# on such a CPU may name. Anything else (Prescott, Core2, Nehalem, ...) is a generic fallback.
AVX512_CORES = {"SkylakeX", "Cooperlake", "SapphireRapids"}
AVX2_CORES = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"}
LIBRARY = re.compile(r"^OpenBLAS (\d+)\.(\d+)\.(\d+)\S*, core (\S+)$")
# gemv (M or N of 1) in both storage orders of its matrix, and sgemm in every layout
ONE_CONFIG = "MR: [1]\nNR: [16]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1]\n"  # the kernel is not what is tested
SHAPES = "1x64x48:fp32:NT,1x40x24:fp32:NN,40x1x24:fp32:TN,24x1x40:fp32:NN,33x17x19:fp32:TT,48x40x64:fp32:NT"


def cores_for_this_cpu():
    """The cores a library row may name here, from /proc/cpuinfo's flags; None if neither ISA."""
    with open("/proc/cpuinfo") as f:
        flags = set(re.search(r"^flags\s*:(.*)$", f.read(), re.M).group(1).split())
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return AVX512_CORES
    if {"avx2", "fma"} <= flags:
        return AVX2_CORES
    return None


def library_rows(ws, target):
    df = pd.read_csv(ws.path / "results" / target / "matmul" / "results.csv")
    return df[df.variant_id.str.startswith("lib:")]


@pytest.mark.skipif(platform.machine() != "x86_64" or cores_for_this_cpu() is None,
                    reason="an x86-64 CPU with AVX2 or AVX-512")
@pytest.mark.slow
def test_library_row_runs_a_current_openblas_on_the_core_of_this_cpu_and_every_report_names_it(local_workspace):
    ws = local_workspace
    (ws.path / "one.yaml").write_text(ONE_CONFIG)
    ws.harness("build", "matmul", "--target", "local", "--shapes", SHAPES, "--space", "one.yaml", "--library")
    # an OPENBLAS_CORETYPE inherited from the shell (SSE3's Prescott here) is set aside, and the row says so
    ws.env = dict(ws.env, OPENBLAS_CORETYPE="Prescott")
    ws.harness("run", "--iters", "3", "--max-time", "0.2")
    lib = library_rows(ws, "local")
    assert lib.message.str.startswith("OPENBLAS_CORETYPE=Prescott in the agent's environment set aside").all()
    assert set(lib.variant_id) == {"lib:openblas:fp32"} and len(lib) == 6
    assert set(lib.status) == {"ok"} and (lib.rel_err <= 1e-5).all()  # sgemv and sgemm, every layout
    assert lib.library.nunique() == 1
    version_core = LIBRARY.match(lib.library.iloc[0])
    assert version_core, lib.library.iloc[0]
    major, minor, patch, core = version_core.groups()
    assert (int(major), int(minor), int(patch)) >= (0, 3, 34)  # scipy-openblas32, not Debian's 0.3.21
    assert core in cores_for_this_cpu(), "the library ran OpenBLAS's generic %s core on this CPU" % core
    words = "OpenBLAS %s.%s.%s" % (major, minor, patch)
    out = ws.harness("report", "--html").stdout
    summary = [l for l in out.splitlines() if l.startswith("weighted speedup over the library")]
    assert summary and summary[0].endswith(", core %s)" % core) and words in summary[0]
    uplift = pd.read_csv(ws.path / "tuned" / "local" / "matmul.uplift.csv")
    assert uplift.library_build.str.contains("core %s" % core).all()
    page = (ws.path / "tuned" / "local" / "matmul.html").read_text()
    assert "core %s" % core in page and words in page
    # the bench reads these results, times the library's program again beside numpy, names the core
    (ws.path / "two.txt").write_text("48x40x64:fp32:NT\n1x64x48:fp32:NT  # gemv\n")
    bench = subprocess.run([sys.executable, str(REPO / "bench" / "cpu_vs_library.py"), "--shapes-file",
                            str(ws.path / "two.txt"), "--results", "results/local/matmul/results.csv",
                            "--seconds", "0.05"], cwd=ws.path, capture_output=True, text=True, timeout=120)
    assert bench.returncode == 0, bench.stderr
    lines = bench.stdout.splitlines()
    measured = [l for l in lines if l.startswith(("48x40x64_fp32_NT", "1x64x48_fp32_NT"))]
    assert len(measured) == 2 and all(l.endswith(", core %s" % core) and words in l for l in measured)
    assert lines[-1].startswith("geomean over 2 shapes: tuned/library ")


@pytest.mark.slow
@needs("readelf")
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the shared OpenBLAS is the x86-64 one")
def test_shared_openblas_travels_to_an_ssh_board_and_is_checked_by_its_hash(workspace):
    ws = workspace
    (ws.path / "one.yaml").write_text(ONE_CONFIG)
    with open(ws.path / "targets.yaml", "a") as f:
        f.write("x86:\n  arch: native\n  profiler: wallclock\n  workdir: %s\n  ssh:\n%s"
                % (ws.path / "remote-x86", ws.sshd.target_ssh_yaml()))
    ws.harness("build", "matmul", "--target", "x86", "--shapes", "40x24x32:fp32:NT", "--space", "one.yaml",
               "--library")
    ws.harness("push", "x86")
    remote = ws.path / "remote-x86" / "bundles" / "x86" / "matmul" / "artifacts"
    libs = list(remote.glob("lib-*/libscipy_openblas.so"))
    assert len(libs) == 1
    lib_elf = [p for p in remote.glob("*.elf") if b"HARNESS_LIBRARY" in p.read_bytes()]
    dynamic = subprocess.run(["readelf", "-d", str(lib_elf[0])], capture_output=True, text=True).stdout
    assert "[$ORIGIN/%s]" % libs[0].parent.name in dynamic  # found next to the ELF, not on the host
    ws.harness("run", "--remote", "x86", "--iters", "3", "--max-time", "0.2")
    ws.harness("report")
    lib = library_rows(ws, "x86")
    assert list(lib.status) == ["ok"] and LIBRARY.match(lib.library.iloc[0])
    data = bytearray(libs[0].read_bytes())
    data[len(data) // 2] ^= 0xFF  # the board's copy damaged
    libs[0].write_bytes(bytes(data))
    ws.harness("run", "--remote", "x86", "--all", "--iters", "3", "--max-time", "0.2")
    ws.harness("report")
    last = library_rows(ws, "x86").iloc[-1]  # --all appends: the latest row of the key counts
    assert last.status == "load_error" and "does not match its hash" in last.message


@pytest.mark.slow
@needs("qemu-aarch64", "aarch64-linux-gnu-g++")
def test_emulated_aarch64_board_runs_debian_openblas_on_the_core_it_detects(workspace):
    ws = workspace
    (ws.path / "one.yaml").write_text(ONE_CONFIG)
    ws.harness("build", "matmul", "--target", "arm", "--shapes", "40x24x32:fp32:NT,1x24x40:fp32:NN",
               "--space", "one.yaml", "--library")
    ws.harness("push", "arm")
    ws.harness("run", "--remote", "arm", "--iters", "3", "--max-time", "0.2")
    out = ws.harness("report").stdout
    lib = library_rows(ws, "arm")
    assert set(lib.status) == {"ok"} and (lib.rel_err <= 1e-5).all() and len(lib) == 2
    # qemu-aarch64's default CPU (max) is no part OpenBLAS 0.3.21 knows: its generic NEON core
    assert set(lib.library) == {"OpenBLAS 0.3.21, core armv8"}
    assert "core armv8" in out


@pytest.mark.slow
@needs("clang", "riscv64-linux-gnu-ld")
def test_riscv64_gets_the_reference_build_and_one_line_that_says_why(workspace):
    (workspace.path / "one.yaml").write_text(ONE_CONFIG)
    out = workspace.harness("build", "matmul", "--target", "rv", "--shapes", "32x32x32", "--space", "one.yaml",
                            "--library").stdout
    assert ("library for fp32 shapes: %s; lib:reference instead" % RISCV64_WHY) in " ".join(out.split())
