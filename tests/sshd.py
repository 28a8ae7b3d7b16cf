"""The tests' private sshd on 127.0.0.1: bench/_sshd.py, which the benches that push over SSH use
too (the tests may import from bench/, the benches do not import from tests/)."""

from bench._sshd import SSHD, SSHServer, free_port, make_server  # noqa: F401
