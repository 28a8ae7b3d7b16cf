import atexit
import fcntl
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
# `harness run` options for tests that check answers, statuses and the flow, not times: once its
# --iters samples are in, a job stops sampling (the default keeps sampling up to 0.75 s a job for a
# steady minimum, which under qemu is most of such a test's time)
ANSWERS_ONLY = ("--max-time", "0.01")
# The compile cache kept across tunes (harness.compile.cache): never the user's, and one for the
# whole run, every xdist worker included (the controller makes it, the workers inherit the
# variable), so that a test's build reuses what an earlier test compiled from the same source,
# flags and toolchain, as a user's second project does: about half the suite's compiles were the
# same artifact again. A test that counts compiles or reuses takes a cache of its own with the
# `fresh_compile_cache` marker, as does one that needs a compile to run (a compile timeout).
if "HARNESS_TEST_COMPILE_CACHE" not in os.environ:
    os.environ["HARNESS_TEST_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="harness-test-cache-")
    atexit.register(shutil.rmtree, os.environ["HARNESS_TEST_COMPILE_CACHE"], True)
os.environ["HARNESS_CACHE_DIR"] = os.environ["HARNESS_TEST_COMPILE_CACHE"]


@pytest.fixture(autouse=True)
def compile_cache(request, tmp_path, monkeypatch):
    """The run's shared compile cache, or (marker ``fresh_compile_cache``) an empty one of the test's own.
    Only the artifacts are shared (the ``compile`` folder, linked): the record of the configs each
    shape's builds took, which a tune searches first (``harness.compile.cache.built_for``), is the
    test's own, so that no test's search follows another's."""
    if request.node.get_closest_marker("fresh_compile_cache"):
        monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "compile-cache"))
    else:
        shared = Path(os.environ["HARNESS_TEST_COMPILE_CACHE"]) / "compile"
        shared.mkdir(exist_ok=True)
        mine = tmp_path / "harness-cache"
        mine.mkdir()
        (mine / "compile").symlink_to(shared)
        monkeypatch.setenv("HARNESS_CACHE_DIR", str(mine))


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


# ---- two workers (pyproject's addopts: pytest-xdist, -n 2 --dist loadgroup) ------------------


def _shares_a_module_fixture(item) -> bool:
    """Whether the test uses a fixture built once for its module (or class): such tests run on
    one worker, in file order, so that the fixture is built once."""
    info = getattr(item, "_fixtureinfo", None)
    return bool(info) and any(d.scope in ("module", "class", "package")
                              for defs in info.name2fixturedefs.values() for d in defs)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Keep each module's shared-fixture tests on one worker (an xdist_group named after the
    file), and under xdist hand the slow tests out first, so that neither worker is left with
    a long test at the end while the other idles. Items of one group stay together and in
    order; the order of the work queue is the collection's (--no-loadscope-reorder)."""
    for item in items:
        if _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    if not hasattr(config, "workerinput"):
        return
    unit = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        key = mark.args[0] if mark else item.nodeid
        first, slow = unit.get(key, (len(unit), False))
        unit[key] = (first, slow or item.get_closest_marker("slow") is not None)

    def rank(indexed):
        index, item = indexed
        mark = item.get_closest_marker("xdist_group")
        first, slow = unit[mark.args[0] if mark else item.nodeid]
        return (not slow, first, index)

    items[:] = [item for _, item in sorted(enumerate(items), key=rank)]


_LOCKS = []  # this worker's open turnstile and gate files


def _worker_locks(config):
    """The two lock files that the workers of one run share (in the run's temp folder, the parent
    of each worker's own), or None when the run has one process."""
    if not hasattr(config, "workerinput"):
        return None
    if not _LOCKS:
        shared = Path(config.option.basetemp).parent
        _LOCKS.extend(open(shared / name, "a") for name in ("turnstile.lock", "gate.lock"))
    return _LOCKS


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked ``alone`` (its assertions compare times) runs while no other test of the run
    does, its module's fixtures included: it holds the gate exclusively, every other test holds
    it shared. An ``alone`` test holds the turnstile while it waits for the gate, so that no new
    test starts meanwhile and it is not starved."""
    locks = _worker_locks(item.config)
    if locks is None:
        return (yield)
    turnstile, gate = locks
    alone = item.get_closest_marker("alone") is not None
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    finally:
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
    try:
        return (yield)
    finally:
        fcntl.flock(gate, fcntl.LOCK_UN)
        if alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
