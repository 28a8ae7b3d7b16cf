"""Tar extraction that refuses absolute paths, '..', links that leave the tree and devices.

Used on both sides: the host extracts fetched results with it, and push sends this file's
source as the remote extraction command, so it must stay self-contained (stdlib, Python 3.8).
"""

import os
import sys
import tarfile


class UnsafeMember(Exception):
    pass


def _inside(root, path):
    root = os.path.realpath(root)
    path = os.path.realpath(path)
    return path == root or path.startswith(root + os.sep)


def check_member(member, dest):
    name = member.name
    if name.startswith("/") or name.startswith("\\") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeMember("absolute path in archive: %s" % name)
    if ".." in name.replace("\\", "/").split("/"):
        raise UnsafeMember("'..' in archive path: %s" % name)
    target = os.path.join(dest, name)
    if not _inside(dest, os.path.dirname(target) or dest):
        raise UnsafeMember("path leaves the tree through a link: %s" % name)
    if member.issym() or member.islnk():
        link = member.linkname
        base = os.path.dirname(target) if member.issym() else dest
        if os.path.isabs(link) or not _inside(dest, os.path.join(base, link)):
            raise UnsafeMember("link leaves the tree: %s -> %s" % (name, link))
    elif not (member.isfile() or member.isdir()):
        raise UnsafeMember("not a file or folder: %s" % name)


def extract_stream(stream, dest):
    """Extract a tar stream into dest, member by member, refusing anything unsafe.

    Files are written to a temporary name and moved in place, so a reader never sees half a file.
    Returns the number of files written.
    """
    count = 0
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(fileobj=stream, mode="r|", bufsize=1 << 20) as tar:
        for member in tar:
            check_member(member, dest)
            path = os.path.join(dest, member.name)
            if member.isdir():
                os.makedirs(path, exist_ok=True)
            elif member.issym():
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if os.path.lexists(path):
                    os.unlink(path)
                os.symlink(member.linkname, path)
            elif member.isfile():
                os.makedirs(os.path.dirname(path) or dest, exist_ok=True)
                tmp = path + ".part"
                source = tar.extractfile(member)
                with open(tmp, "wb") as out:
                    while True:
                        chunk = source.read(1 << 20)
                        if not chunk:
                            break
                        out.write(chunk)
                os.chmod(tmp, member.mode & 0o755 | 0o600)
                os.replace(tmp, path)
                count += 1
            else:  # hard link inside the tree: copy its target
                raise UnsafeMember("hard links are not accepted: %s" % member.name)
    return count


if __name__ == "__main__":
    try:
        n = extract_stream(sys.stdin.buffer, sys.argv[1])
    except (UnsafeMember, tarfile.TarError, OSError) as exc:
        sys.stderr.write("harness: refused to extract: %s\n" % exc)
        sys.exit(2)
    sys.stdout.write("extracted %d files\n" % n)
