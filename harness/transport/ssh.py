"""The SSH transport (Fabric). Every remote command is one SSH exec; binary streams (tar in,
tar out) go over their own channel. Arguments are quoted with shlex.quote, always."""

from __future__ import annotations

import io
import os
import shlex
import socket
import tarfile
import threading
from pathlib import Path

from ..errors import HarnessError

WINDOW = 1 << 26  # bytes in flight per channel: keeps a push at wire speed


class SSHTransport:
    name = "ssh"
    is_remote = True
    capabilities = frozenset()  # base.Transport's calls and a remote's; nothing optional

    def __init__(self, target, host=None, port=None, workdir=None):
        import fabric
        import paramiko

        ssh = target.ssh
        self.target = target
        self.host = host or ssh.host
        self.port = port or ssh.port
        self.label = "%s@%s:%s" % (ssh.user or os.environ.get("USER", ""), self.host, self.port)
        connect_kwargs = {"look_for_keys": ssh.key is None, "allow_agent": ssh.key is None,
                          "timeout": 10, "banner_timeout": 10, "auth_timeout": 10}
        if ssh.key:
            connect_kwargs["key_filename"] = os.path.expanduser(ssh.key)
        self.conn = fabric.Connection(self.host, user=ssh.user, port=self.port, connect_kwargs=connect_kwargs)
        client = self.conn.client
        known = os.path.expanduser(ssh.known_hosts) if ssh.known_hosts else None
        if known and os.path.exists(known):
            client.load_host_keys(known)
        if ssh.accept_new_host_keys:
            client.set_missing_host_key_policy(_LoggedAutoAdd(self.label))
        else:
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        self.workdir = _remote_path(workdir or target.workdir)
        self.python = target.python

    # -- connection -------------------------------------------------------------------------
    def open(self):
        import paramiko

        try:
            self.conn.open()
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc) or "Server" in str(exc) and "not found" in str(exc):
                raise HarnessError("host key of %s is not in known_hosts; add it (ssh-keyscan) or set "
                                   "ssh.accept_new_host_keys: true for a lab board" % self.label)
            raise HarnessError("cannot connect to %s: %s" % (self.label, exc))
        except (socket.error, OSError, EOFError) as exc:
            raise HarnessError("cannot reach %s: %s" % (self.label, exc.strerror if getattr(exc, "strerror", None) else exc))
        transport = self.conn.client.get_transport()
        transport.set_keepalive(15)
        return self

    def close(self):
        self.conn.close()

    def _channel(self, command: str):
        if not self.conn.is_connected:
            self.open()
        chan = self.conn.client.get_transport().open_session(window_size=WINDOW, max_packet_size=1 << 15)
        chan.exec_command(command)
        return chan

    # -- commands ---------------------------------------------------------------------------
    def run(self, argv: list, on_line=None, cwd=None, env=None) -> tuple:
        """Run argv remotely (quoted), streaming stdout lines; returns (rc, stderr)."""
        command = self.shell_command(argv, cwd, env)
        chan = self._channel(command)
        err_chunks = []
        reader = threading.Thread(target=_drain, args=(chan.makefile_stderr("rb"), err_chunks), daemon=True)
        reader.start()
        stdout = chan.makefile("rb")
        for raw in stdout:
            if on_line:
                on_line(raw.decode("utf-8", "replace").rstrip("\n"))
        rc = chan.recv_exit_status()
        reader.join()
        return rc, b"".join(err_chunks).decode("utf-8", "replace")

    def shell_command(self, argv: list, cwd=None, env=None) -> str:
        parts = []
        if cwd is not None:
            parts.append("cd %s &&" % self.quote_path(cwd))
        for key, value in (env or {}).items():
            parts.append("%s=%s" % (key, shlex.quote(str(value))))
        parts.append(" ".join(shlex.quote(str(a)) for a in argv))
        return " ".join(parts)

    def quote_path(self, path: str) -> str:
        return shlex.quote(path) if path else "."

    def run_capture(self, command: str) -> tuple:
        """(rc, stdout bytes, stderr text) of a command string built by shell_command."""
        chan = self._channel(command)
        err_chunks = []
        reader = threading.Thread(target=_drain, args=(chan.makefile_stderr("rb"), err_chunks), daemon=True)
        reader.start()
        out = chan.makefile("rb").read()
        rc = chan.recv_exit_status()
        reader.join()
        return rc, out, b"".join(err_chunks).decode("utf-8", "replace")

    def list_files(self, rel_dir: str) -> set:
        """Files under workdir/rel_dir, in one round trip. SFTP where the server offers it (no
        login shell to start: on a slow board that is most of the cost), else `find`."""
        target = "%s/%s" % (self.workdir, rel_dir) if self.workdir else rel_dir
        try:
            return self._list_sftp(target)
        except (IOError, OSError, EOFError) as exc:
            if getattr(exc, "errno", None) == 2:  # no such folder: nothing there yet
                return set()
        except Exception as exc:  # paramiko.SSHException: no SFTP subsystem
            if not type(exc).__module__.startswith("paramiko"):
                raise
        command = "mkdir -p %s && cd %s && find . -type f ! -name '*.part' -print" % (
            shlex.quote(target), shlex.quote(target))
        rc, out, err = self.run_capture(command)
        if rc != 0:
            raise HarnessError("cannot list %s on %s: %s" % (target, self.label, err.strip()))
        return {line[2:] for line in out.decode().splitlines() if line.startswith("./")}

    def _list_sftp(self, top: str) -> set:
        import stat

        sftp = self.conn.sftp()
        found, todo = set(), [""]
        while todo:
            sub = todo.pop()
            for entry in sftp.listdir_attr("%s/%s" % (top, sub) if sub else top):
                rel = "%s/%s" % (sub, entry.filename) if sub else entry.filename
                if stat.S_ISDIR(entry.st_mode):
                    todo.append(rel)
                elif stat.S_ISREG(entry.st_mode) and not rel.endswith(".part"):
                    found.add(rel)
        return found

    def put_files(self, pairs: list, on_bytes=None, remove=()) -> int:
        """Send (local path, path under workdir) pairs in one tar stream; the remote extracts
        it with remote_agent/safetar.py. ``remove``: files under workdir deleted first (in
        the same command). Returns bytes sent."""
        from remote_agent import safetar

        # GNU tar where the remote has it (C speed; it refuses '..' and strips leading '/', and
        # the host sends regular files only); otherwise safetar.py, which refuses all three.
        dest = shlex.quote(self.workdir or ".")
        script = Path(safetar.__file__).read_text()  # its __main__ block extracts stdin into argv[1]
        rm = "".join("rm -f %s/%s && " % (dest, shlex.quote(r)) for r in remove)
        command = rm + ("mkdir -p {d} && if tar --version 2>/dev/null | grep -q GNU; then "
                        "tar -x -f - --no-same-owner --no-same-permissions -C {d}; "
                        "else {py} -c {script} {d}; fi").format(d=dest, py=shlex.quote(self.python),
                                                               script=shlex.quote(script))
        chan = self._channel(command)
        writer = _ChannelWriter(chan, on_bytes)
        try:
            for local, arcname in pairs:
                _check_arcname(arcname)
                _send_tar_member(writer, Path(local), arcname)
            writer.write(b"\0" * (2 * tarfile.BLOCKSIZE))  # end of archive
            writer.flush()
            chan.shutdown_write()
        except Exception as exc:
            chan.close()  # the remote extractor stops; nothing half-sent is kept (.part files)
            if isinstance(exc, HarnessError):
                raise
            raise HarnessError("push to %s failed: %s" % (self.label, exc))
        err = chan.makefile_stderr("rb").read().decode("utf-8", "replace")
        rc = chan.recv_exit_status()
        if rc != 0:
            raise HarnessError("push to %s failed: %s" % (self.label, err.strip() or "exit %d" % rc))
        return writer.sent

    def fetch_tree(self, rel_dir: str, dest: Path) -> int:
        """Copy workdir/rel_dir into dest/rel_dir in one tar stream (safely extracted)."""
        from remote_agent import safetar

        base = self.workdir or "."
        command = "if [ -e %s/%s ]; then cd %s && tar cf - %s; fi" % (
            shlex.quote(base), shlex.quote(rel_dir), shlex.quote(base), shlex.quote(rel_dir))
        rc, out, err = self.run_capture(command)
        if rc != 0:
            raise HarnessError("cannot fetch %s from %s: %s" % (rel_dir, self.label, err.strip()))
        if not out:
            return 0
        return safetar.extract_stream(io.BytesIO(out), str(dest))


def _send_tar_member(writer, local: Path, arcname: str) -> None:
    """One regular file as a tar member: the header from tarfile, the bytes in 1 MiB reads
    (tarfile's own copy loop moves 16 KiB at a time, which costs a push a third of its speed)."""
    st = local.stat()
    info = tarfile.TarInfo(arcname)
    info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), st.st_mode & 0o755
    writer.write(info.tobuf(format=tarfile.PAX_FORMAT))
    with open(local, "rb") as f:
        sent = 0
        while True:
            chunk = f.read(_ChannelWriter.CHUNK)
            if not chunk:
                break
            writer.write(chunk)
            sent += len(chunk)
    if sent != info.size:
        raise HarnessError("%s changed size while it was sent" % local)
    if sent % tarfile.BLOCKSIZE:
        writer.write(b"\0" * (tarfile.BLOCKSIZE - sent % tarfile.BLOCKSIZE))


class _ChannelWriter(io.RawIOBase):
    """Collects small writes into 1 MiB sends: fewer, fuller SSH packets."""

    CHUNK = 1 << 20

    def __init__(self, chan, on_bytes=None):
        self.chan = chan
        self.sent = 0
        self.on_bytes = on_bytes
        self.buffer = bytearray()

    def writable(self):
        return True

    def write(self, data):
        if not self.buffer and len(data) >= self.CHUNK:
            self._send(data)  # a full chunk goes out as it is, without a copy
            return len(data)
        self.buffer += data
        if len(self.buffer) >= self.CHUNK:
            self.flush()
        return len(data)

    def _send(self, data):
        self.chan.sendall(data)
        self.sent += len(data)
        if self.on_bytes:
            self.on_bytes(len(data))

    def flush(self):
        if self.buffer:
            self._send(bytes(self.buffer))
            self.buffer.clear()


class _LoggedAutoAdd:
    """Accept a host key not yet known (lab boards opt in per target) and say so."""

    def __init__(self, label):
        self.label = label

    def missing_host_key(self, client, hostname, key):
        from .. import ui

        ui.console.print("[yellow]accepting new host key %s %s for %s (ssh.accept_new_host_keys)[/]"
                         % (key.get_name(), key.get_base64()[:24] + "...", self.label))
        client.get_host_keys().add(hostname, key.get_name(), key)


def _check_arcname(arcname: str) -> None:
    if arcname.startswith("/") or ".." in arcname.split("/"):
        raise HarnessError("refusing to send %r: absolute or '..' path" % arcname)


def _drain(stream, chunks):
    for chunk in iter(lambda: stream.read(65536), b""):
        chunks.append(chunk)


def _remote_path(path: str) -> str:
    """'~/x' becomes 'x': SSH commands start in the login folder, and nothing is left for the
    remote shell to expand."""
    if path in ("~", "~/"):
        return ""
    if path.startswith("~/"):
        return path[2:]
    return path
