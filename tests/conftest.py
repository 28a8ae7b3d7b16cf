import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.sshd import free_port, make_server

REPO = Path(__file__).resolve().parent.parent
QEMU_RV = "qemu-riscv64 -cpu rv64,v=true,vlen=256,vext_spec=v1.0"
# two register tiles x two widths of the packed CPU matmul, none pruned by registers on AVX-512, NEON or
# RVV 256 (NR: a multiple of every ISA's fp32 lanes; MR small enough for 8 NEON vectors a row)
SMALL_SPACE = "MR: [1, 2]\nNR: [16, 32]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1]\n"
# the compile cache kept across tunes (harness.compile.cache): never the user's, and one per
# test below, so that a test's fresh project compiles what it builds
os.environ["HARNESS_CACHE_DIR"] = tempfile.mkdtemp(prefix="harness-test-cache-")
atexit.register(shutil.rmtree, os.environ["HARNESS_CACHE_DIR"], True)


@pytest.fixture(autouse=True)
def own_compile_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "compile-cache"))


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    server = make_server(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


class Workspace:
    """A project folder with its own targets.yaml; runs the harness CLI as a user would."""

    def __init__(self, path: Path, sshd=None):
        self.path = path
        self.sshd = sshd
        self.env = dict(os.environ, HARNESS_KERNELS_PATH=str(REPO / "tests" / "kernels"),
                        PYTHONPATH=str(REPO), COLUMNS="200")
        self.env.pop("HARNESS_TARGETS", None)
        (path / "space.yaml").write_text(SMALL_SPACE)
        (path / "targets.yaml").write_text(self.targets_yaml())

    def targets_yaml(self) -> str:
        text = ("local:\n  arch: native\n  profiler: perf\n  events: [task-clock, page-faults, cycles]\n"
                "native-qemu-free:\n  arch: native\n  profiler: wallclock\n")
        if self.sshd:
            for name, arch, under in (("rv", "riscv64", QEMU_RV), ("arm", "aarch64", "qemu-aarch64")):
                text += ("%s:\n  arch: %s\n  toolchain: clang\n  profiler: perf\n  events: [task-clock, cycles]\n"
                         "  run_under: %s\n  workdir: %s\n  ssh:\n%s" % (
                             name, arch, under, self.path / ("remote-" + name), self.sshd.target_ssh_yaml()))
                if arch == "riscv64":
                    text += "  march: rv64gcv\n  vlen: 256\n"
            text += ("unreachable:\n  arch: native\n  ssh:\n    host: 127.0.0.1\n    port: %d\n    key: %s\n"
                     % (free_port(), self.sshd.client_key))
        return text

    def harness(self, *args, check=True, timeout=600):
        proc = subprocess.run([sys.executable, "-m", "harness"] + [str(a) for a in args], cwd=self.path,
                              env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError("harness %s exited %d\nstdout:\n%s\nstderr:\n%s" % (
                " ".join(map(str, args)), proc.returncode, proc.stdout, proc.stderr))
        return proc


@pytest.fixture
def workspace(tmp_path, sshd):
    return Workspace(tmp_path, sshd)


@pytest.fixture
def local_workspace(tmp_path):
    return Workspace(tmp_path)


def needs(*tools):
    """Skip where a tool is missing on a developer's machine; in CI (.ci/run installs them all)
    a missing tool fails the test instead."""
    missing = [t for t in tools if not shutil.which(t)]
    return pytest.mark.skipif(bool(missing) and not os.environ.get("CI"), reason="missing %s" % ", ".join(missing))
