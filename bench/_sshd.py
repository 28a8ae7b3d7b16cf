"""A private sshd on 127.0.0.1 for the tests and the benches that push over SSH: real SSH, started
and stopped by its user. It lives in bench/ so that the benches need nothing from tests/ (the tests
import it through tests/sshd.py).

Recipe from DESIGN.md: its own config, host key, pid file and authorized keys in a temp dir;
as root without /run/sshd it runs in a private mount namespace with its own /run.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass
class SSHServer:
    dir: Path
    port: int
    client_key: Path
    known_hosts: Path
    proc: subprocess.Popen = None

    def target_ssh_yaml(self, indent="    ") -> str:
        return ("{i}host: 127.0.0.1\n{i}user: {user}\n{i}port: {port}\n{i}key: {key}\n{i}known_hosts: {kh}\n"
                .format(i=indent, user=os.environ.get("USER", "root") if os.geteuid() else "root",
                        port=self.port, key=self.client_key, kh=self.known_hosts))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def kill_hard(self):
        """The machine's sshd dies with every session it carries (a dropped connection);
        processes that left those sessions (a detached agent) live on."""
        if not self.proc:
            return
        victims = descendants(self.proc.pid) + [self.proc.pid]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def start(self):
        d = self.dir
        config = d / "sshd_config"
        argv = [SSHD, "-D", "-e", "-f", str(config)]
        if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
            run = d / "run"
            (run / "sshd").mkdir(parents=True, exist_ok=True)
            os.chmod(run / "sshd", 0o755)
            argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                    'mount --bind "$1" /run && exec "$2" -D -e -f "$3"', "sh", str(run), SSHD, str(config)]
        log = open(d / "sshd.log", "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("sshd exited: %s" % (d / "sshd.log").read_text())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    if s.recv(4).startswith(b"SSH"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not start: %s" % (d / "sshd.log").read_text())


def descendants(pid: int) -> list:
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open("/proc/%s/stat" % entry).read()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT_TRIES = 5  # a port free when asked can be taken before sshd binds it


def make_server(d: Path) -> SSHServer:
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o755)
    host_key, client_key = d / "host_ed25519", d / "client_ed25519"
    for key in (host_key, client_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    shutil.copy(str(client_key) + ".pub", d / "authorized_keys")
    os.chmod(d / "authorized_keys", 0o600)
    for _ in range(PORT_TRIES - 1):
        try:
            return _configure(d, free_port(), host_key, client_key).start()
        except RuntimeError as exc:
            if "Address already in use" not in str(exc):
                raise
            (d / "sshd.log").unlink()
    return _configure(d, free_port(), host_key, client_key).start()


def _configure(d: Path, port: int, host_key: Path, client_key: Path) -> SSHServer:
    """Write sshd_config and the client's known_hosts for ``port``."""
    (d / "sshd_config").write_text(
        "ListenAddress 127.0.0.1\nPort %d\nHostKey %s\nPidFile %s\nAuthorizedKeysFile %s\n"
        "StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\nLogLevel ERROR\n"
        "MaxStartups 50\nMaxSessions 50\n"
        % (port, host_key, d / "sshd.pid", d / "authorized_keys"))
    host_pub = (Path(str(host_key) + ".pub")).read_text().split()
    known = d / "known_hosts"
    known.write_text("[127.0.0.1]:%d %s %s\n" % (port, host_pub[0], host_pub[1]))
    return SSHServer(d, port, client_key, known)
