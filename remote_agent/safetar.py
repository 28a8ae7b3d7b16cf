"""Tar extraction that cannot leave its folder, whatever the members and their order.

Used on both sides: the host extracts results fetched from a remote with it, and push sends
this file's source as the remote's extraction command, so it stays self-contained (standard
library, Python 3.8).

How it stays inside its folder: only regular files and folders are accepted (symbolic links,
hard links, devices, FIFOs and sparse files are refused: neither a push nor a results folder
has any), and every path is walked one component at a time from a descriptor of the folder,
each opened with O_NOFOLLOW, so a link already there (planted before, or by a member of a
tar made elsewhere) stops the extraction instead of being followed.

How nothing half-written counts: a file is written under ``<name>.part``, its size checked
against its header and its sha256 against the ``HARNESS.sha256`` PAX field when the sender
gave one (push does), and only then renamed to its name. A full disk is named as such.
"""

import argparse
import errno
import hashlib
import os
import socket
import sys
import tarfile

SHA256_FIELD = "HARNESS.sha256"  # PAX header field: the sha256 of a member's bytes
CHUNK = 1 << 20


class ExtractError(Exception):
    """Why an extraction stopped, in one line."""


class UnsafeMember(ExtractError):
    """A member that could write outside the folder, or is not a plain file or folder."""


class DiskFull(ExtractError):
    """The folder's file system has no room for what is being written."""


def disk_full_message(path, needed):
    """'disk full on HOST: N bytes free, M needed' for the file system holding ``path``."""
    return "disk full on %s: %d bytes free, %d needed" % (socket.gethostname(), free_bytes(path), needed)


def free_bytes(path):
    """Bytes an unprivileged writer may still use on the file system holding ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def member_parts(name):
    """The path components of a member name; refuses absolute paths and '..'."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise UnsafeMember("absolute path in archive: %s" % name)
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts or ".." in name.replace("\\", "/").split("/"):
        raise UnsafeMember("'..' in archive path: %s" % name)
    return parts


def check_member(member):
    """Refuse every member that is not a regular file or a folder."""
    if member.issym() or member.islnk():
        raise UnsafeMember("links are not accepted: %s -> %s" % (member.name, member.linkname))
    if member.issparse():
        raise UnsafeMember("sparse files are not accepted: %s" % member.name)
    if not (member.isfile() or member.isdir()):
        raise UnsafeMember("not a file or folder: %s" % member.name)


def open_dir(root_fd, parts, create):
    """A descriptor of the folder root/parts[0]/parts[1]/..., never following a link;
    folders are made on the way when ``create``. The caller closes it."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.dup(root_fd)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                child = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link, or a file, on the way
                    raise UnsafeMember("path goes through a link or a file: %s" % "/".join(parts))
                raise
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_member(tar, member, dir_fd, leaf):
    """Write one file member as ``leaf.part`` in dir_fd, check it, rename it to ``leaf``."""
    tmp = leaf + ".part"
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
    try:
        digest, written = hashlib.sha256(), 0
        source = tar.extractfile(member)
        with os.fdopen(fd, "wb") as out:  # a buffered writer retries short writes: a full disk raises
            fd = None
            while True:
                chunk = source.read(CHUNK)
                if not chunk:
                    break
                out.write(chunk)
                digest.update(chunk)
                written += len(chunk)
            os.fchmod(out.fileno(), member.mode & 0o755 | 0o600)
        if written != member.size:
            raise ExtractError("%s arrived cut short (%d of %d bytes)" % (member.name, written, member.size))
        expected = member.pax_headers.get(SHA256_FIELD)
        if expected and digest.hexdigest() != expected:
            raise ExtractError("%s arrived damaged: its sha256 does not match the sender's" % member.name)
        os.replace(tmp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def extract_member(tar, member, root_fd):
    """Extract one checked member under root_fd; returns 1 for a file written, else 0."""
    check_member(member)
    parts = member_parts(member.name)
    if member.isdir():
        os.close(open_dir(root_fd, parts, create=True))
        return 0
    if not parts:
        raise UnsafeMember("a file member without a name")
    dir_fd = open_dir(root_fd, parts[:-1], create=True)
    try:
        write_member(tar, member, dir_fd, parts[-1])
    finally:
        os.close(dir_fd)
    return 1


def extract_stream(stream, dest, needed=None):
    """Extract a tar stream into dest, member by member, refusing anything unsafe.

    Returns the number of files written. Every failure is an ExtractError with a one-line
    message (UnsafeMember, DiskFull, or a damaged or malformed stream); files written before
    it are whole and checked, the one being written is removed. ``needed``: the bytes the
    whole stream will take, named in a disk-full message (default: the member's size).
    """
    os.makedirs(dest, exist_ok=True)
    root_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    count, member = 0, None
    try:
        with tarfile.open(fileobj=stream, mode="r|", bufsize=CHUNK) as tar:
            for member in tar:
                count += extract_member(tar, member, root_fd)
    except ExtractError:
        raise
    except OSError as exc:
        what = member.name if member is not None else dest
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(disk_full_message(dest, needed or (member.size if member is not None else 0)))
        raise ExtractError("cannot extract %s: %s" % (what, exc.strerror or exc))
    except (tarfile.TarError, EOFError, ValueError, OverflowError, UnicodeError, KeyError, IndexError) as exc:
        raise ExtractError("not a valid tar stream: %s" % (str(exc).splitlines() or [type(exc).__name__])[0])
    finally:
        os.close(root_fd)
    return count


def remove_paths(dest, rels):
    """Remove files (or folders of files, such as ``__pycache__``) under dest, never
    following a link; a path that is not there is skipped."""
    root_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for rel in rels:
            parts = member_parts(rel)
            if not parts:
                continue
            try:
                dir_fd = open_dir(root_fd, parts[:-1], create=False)
            except (OSError, UnsafeMember):
                continue
            try:
                _remove_leaf(dir_fd, parts[-1])
            finally:
                os.close(dir_fd)
    finally:
        os.close(root_fd)


def _remove_leaf(dir_fd, leaf):
    try:
        os.unlink(leaf, dir_fd=dir_fd)
        return
    except FileNotFoundError:
        return
    except (IsADirectoryError, PermissionError):
        pass
    try:
        sub = open_dir(dir_fd, [leaf], create=False)
    except (OSError, UnsafeMember):
        return
    try:
        for name in os.listdir(sub):
            try:
                os.unlink(name, dir_fd=sub)
            except OSError:
                pass
    finally:
        os.close(sub)
    try:
        os.rmdir(leaf, dir_fd=dir_fd)
    except OSError:
        pass


def main(argv=None):
    """python3 safetar.py DEST [--need BYTES] [--remove REL ...] < stream.tar

    Removes the --remove paths, checks that BYTES are free, extracts stdin into DEST.
    One line on stderr and exit 2 on any failure."""
    parser = argparse.ArgumentParser(prog="safetar")
    parser.add_argument("dest")
    parser.add_argument("--need", type=int, default=0, help="bytes the stream will take")
    parser.add_argument("--remove", action="append", default=[], help="path under DEST to remove first")
    args = parser.parse_args(argv)
    try:
        os.makedirs(args.dest, exist_ok=True)
        remove_paths(args.dest, args.remove)
        if args.need and free_bytes(args.dest) < args.need:
            raise DiskFull(disk_full_message(args.dest, args.need))
        n = extract_stream(sys.stdin.buffer, args.dest, needed=args.need or None)
    except (ExtractError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            exc = DiskFull(disk_full_message(args.dest, args.need))
        sys.stderr.write("%s\n" % (exc if isinstance(exc, ExtractError) else "cannot extract: %s" % exc))
        return 2
    sys.stdout.write("extracted %d files\n" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
