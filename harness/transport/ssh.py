"""The SSH transport (Fabric). Every remote command is one SSH exec; binary streams (tar in,
tar out) go over their own channel. Arguments are quoted with shlex.quote, always."""

from __future__ import annotations

import hashlib
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

    def list_files(self, rel_dir: str) -> dict:
        """Files under workdir/rel_dir with their sizes ({path: bytes}), in one round trip. SFTP
        where the server offers it (no login shell to start: on a slow board that is most of the
        cost), else `find`. Files still named ``*.part`` (a write in progress or cut off) are not
        listed: they are not there yet."""
        target = "%s/%s" % (self.workdir, rel_dir) if self.workdir else rel_dir
        try:
            return self._list_sftp(target)
        except (IOError, OSError, EOFError) as exc:
            if getattr(exc, "errno", None) == 2:  # no such folder: nothing there yet
                return {}
        except Exception as exc:  # paramiko.SSHException: no SFTP subsystem
            if not type(exc).__module__.startswith("paramiko"):
                raise
        command = "mkdir -p %s && cd %s && find . -type f ! -name '*.part' -printf '%%s %%p\\n'" % (
            shlex.quote(target), shlex.quote(target))
        rc, out, err = self.run_capture(command)
        if rc != 0:
            raise HarnessError("cannot list %s on %s: %s" % (target, self.label, err.strip()))
        found = {}
        for line in out.decode("utf-8", "replace").splitlines():
            size, _, path = line.partition(" ")
            if path.startswith("./") and size.isdigit():
                found[path[2:]] = int(size)
        return found

    def _list_sftp(self, top: str) -> dict:
        import stat

        sftp = self.conn.sftp()
        found, todo = {}, [""]
        while todo:
            sub = todo.pop()
            for entry in sftp.listdir_attr("%s/%s" % (top, sub) if sub else top):
                rel = "%s/%s" % (sub, entry.filename) if sub else entry.filename
                if stat.S_ISDIR(entry.st_mode):
                    todo.append(rel)
                elif stat.S_ISREG(entry.st_mode) and not rel.endswith(".part"):
                    found[rel] = entry.st_size
        return found

    def put_files(self, pairs: list, on_bytes=None, remove=()) -> int:
        """Send (local path, path under workdir) pairs in one tar stream; the remote extracts
        it with remote_agent/safetar.py: each file lands as ``.part``, is checked against its
        size and the sha256 sent in its header, and only then takes its name, in the order
        sent (so the last pair, a push's marker, exists only when every file before it is
        whole). The remote first checks that the bytes sent fit on its disk. ``remove``:
        files (or folders of files) under workdir deleted first, in the same command.
        Returns bytes sent."""
        from remote_agent import safetar

        digests = [(Path(local), arcname, _sha256(Path(local))) for local, arcname in pairs]
        for _, arcname, _ in digests:
            _check_arcname(arcname)
        dest = shlex.quote(self.workdir or ".")
        script = Path(safetar.__file__).read_text()  # its main() extracts stdin into argv[1]
        argv = [self.workdir or ".", "--need", str(room_needed(local for local, _, _ in digests))]
        for rel in remove:
            argv += ["--remove", rel]
        command = "mkdir -p {d} && {py} -B -c {script} {args}".format(
            d=dest, py=shlex.quote(self.python), script=shlex.quote(script),
            args=" ".join(shlex.quote(a) for a in argv))
        chan = self._channel(command)
        writer = _ChannelWriter(chan, on_bytes)
        try:
            for local, arcname, digest in digests:
                _send_tar_member(writer, local, arcname, digest)
            writer.write(b"\0" * (2 * tarfile.BLOCKSIZE))  # end of archive
            writer.flush()
            chan.shutdown_write()
        except Exception as exc:
            err = _stderr_now(chan)
            chan.close()  # the remote extractor stops; nothing half-sent is kept (.part files)
            if isinstance(exc, HarnessError):
                raise
            raise HarnessError("push to %s failed: %s" % (self.label, err or exc))
        err = chan.makefile_stderr("rb").read().decode("utf-8", "replace")
        rc = chan.recv_exit_status()
        if rc != 0:
            lines = err.strip().splitlines()
            raise HarnessError("push to %s failed: %s" % (self.label, lines[-1] if lines else "exit %d" % rc))
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
        try:
            return safetar.extract_stream(io.BytesIO(out), str(dest))
        except safetar.ExtractError as exc:  # what a remote sends is checked, never trusted
            raise HarnessError("refused what %s sent for %s: %s" % (self.label, rel_dir, exc))


def _send_tar_member(writer, local: Path, arcname: str, digest: str) -> None:
    """One regular file as a tar member: the header from tarfile (with the file's sha256 in a
    PAX field the remote checks before the file takes its name), the bytes in 1 MiB reads
    (tarfile's own copy loop moves 16 KiB at a time, which costs a push a third of its speed)."""
    from remote_agent.safetar import SHA256_FIELD

    st = local.stat()
    info = tarfile.TarInfo(arcname)
    info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), st.st_mode & 0o755
    info.pax_headers = {SHA256_FIELD: digest}
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


def room_needed(paths) -> int:
    """Bytes a push of these files takes on the remote at most: each file's size rounded up
    to whole 4 KiB blocks (what a file system allocates), plus one block for its folder entry."""
    block = 4096
    return sum((-(-Path(p).stat().st_size // block) + 1) * block for p in paths)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _stderr_now(chan) -> str:
    """The remote's last stderr line when a send broke off (its extractor said why it stopped)."""
    import time

    deadline = time.monotonic() + 5
    data = b""
    while time.monotonic() < deadline:
        if chan.recv_stderr_ready():
            data += chan.recv_stderr(65536)
        elif chan.exit_status_ready():
            while chan.recv_stderr_ready():
                data += chan.recv_stderr(65536)
            break
        else:
            time.sleep(0.05)
    lines = data.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else ""


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
