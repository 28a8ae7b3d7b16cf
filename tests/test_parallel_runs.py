"""What lets the suite run on two workers (pyproject's addopts): a private sshd whose port was
taken between asking and binding starts on another, and a test marked ``alone`` runs while no
other test of the run does."""

import socket

from bench import _sshd


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
