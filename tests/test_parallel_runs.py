"""What lets the suite run on several workers (pyproject's addopts): a private sshd whose port was
taken between asking and binding starts on another, and a test marked ``alone`` runs while no
other test of the run does."""

import os
import socket
import subprocess
import sys

from bench import _sshd
from tests.conftest import REPO


def test_an_sshd_whose_port_is_taken_meanwhile_starts_on_another(tmp_path, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = [taken.getsockname()[1]]
    real_free_port = _sshd.free_port
    monkeypatch.setattr(_sshd, "free_port", lambda: ports.pop(0) if ports else real_free_port())
    try:
        server = _sshd.make_server(tmp_path / "sshd")
        try:
            assert server.port != taken.getsockname()[1] and not ports  # the taken port was tried first
            assert ("[127.0.0.1]:%d " % server.port) in server.known_hosts.read_text()
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
                assert s.recv(4) == b"SSH-"
        finally:
            server.stop()
    finally:
        taken.close()


CHILD_CONFTEST = "from tests.conftest import pytest_collection_modifyitems, pytest_runtest_protocol  # noqa: F401\n"
CHILD_TESTS = '''import os, time
import pytest

def _record(name):
    start = time.time()
    time.sleep(0.6)
    with open(os.path.join(os.environ["SPANS"], name), "w") as f:
        f.write("%f %f" % (start, time.time()))

@pytest.mark.alone
def test_alone():
    _record("alone")

@pytest.mark.parametrize("n", range(6))
def test_other(n):
    _record("other%d" % n)
'''


def test_an_alone_test_overlaps_no_other_while_the_others_run_in_parallel(tmp_path):
    """A child run on two workers with this suite's hooks: six plain tests and one ``alone``."""
    (tmp_path / "conftest.py").write_text(CHILD_CONFTEST)
    (tmp_path / "test_child.py").write_text(CHILD_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: x\n    slow: x\n")
    spans = tmp_path / "spans"
    spans.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadgroup", "--no-loadscope-reorder", "test_child.py"], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO), SPANS=str(spans)),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    span = {p.name: tuple(map(float, p.read_text().split())) for p in spans.iterdir()}
    assert len(span) == 7
    overlaps = lambda a, b: a[0] < b[1] and b[0] < a[1]  # noqa: E731
    others = [span["other%d" % n] for n in range(6)]
    assert not any(overlaps(span["alone"], o) for o in others), span
    assert any(overlaps(a, b) for i, a in enumerate(others) for b in others[i + 1:]), span  # two workers
