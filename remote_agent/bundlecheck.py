"""What the agent checks in a bundle before it runs anything from it (docs/security.md).

A bundle is trusted only as far as these checks go:
- every path the manifest names (artifacts, support kernels, data files) stays inside the
  bundle, after links are resolved;
- a pushed bundle (``run --pushed``) has the push's marker, written last by the push, and the
  marker's sha256 of manifest.json and of each of the agent's own files match what is here, so
  a push cut short, or agent code changed since, stops the run with one line;
- each data file the run reads matches its sha256 in the manifest (artifacts are checked by
  their hash in agent.py before they run);
- the disk has room for what the run writes.
"""

import errno
import glob
import hashlib
import json
import os
import socket

from .errors import AgentError

AGENT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder holding remote_agent/
START_ROOM = 16 * 1024  # bytes an agent needs to start: log, pid, lock and exit files, the first rows
# (a disk that fills later stops the run with "No space left on device", the rows before it kept)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def bundle_path(bundle, rel, what):
    """bundle/rel for a path the manifest names, refused (AgentError) unless it is a relative
    path that stays inside the bundle once every link in it is resolved."""
    if not isinstance(rel, str) or not rel or os.path.isabs(rel) or ".." in rel.replace("\\", "/").split("/"):
        raise AgentError("manifest.json: %s path %r leaves the bundle; rebuild and push again" % (what, rel))
    root = os.path.realpath(bundle)
    path = os.path.realpath(os.path.join(root, rel))
    if not path.startswith(root + os.sep):
        raise AgentError("manifest.json: %s path %r leads outside the bundle (%s)" % (what, rel, path))
    return path


def manifest_paths(manifest):
    """(what, relative path) for every file the manifest names."""
    for v in manifest.get("variants") or []:
        if v.get("artifact"):
            yield "variant %s artifact" % v.get("id"), v["artifact"]
    for name, support in ((manifest.get("toolchain") or {}).get("support") or {}).items():
        if isinstance(support, dict) and support.get("artifact"):
            yield "support kernel %s artifact" % name, support["artifact"]
    for s in manifest.get("shapes") or []:
        for operand, rel in (s.get("data") or {}).items():
            yield "shape %s data %s" % (s.get("id"), operand), rel


def check_manifest_paths(bundle, manifest):
    """Every path the manifest names stays in the bundle (AgentError at the first that does not)."""
    for what, rel in manifest_paths(manifest):
        bundle_path(bundle, rel, what)


def check_push_marker(bundle, agent_root=AGENT_ROOT):
    """The push that brought this bundle finished (its marker is there and names this
    manifest), and the agent's own files are the ones pushed with it."""
    manifest = sha256_file(os.path.join(bundle, "manifest.json"))
    for path in sorted(glob.glob(os.path.join(bundle, ".pushed-*"))):
        try:
            with open(path) as f:
                marker = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(marker, dict) and marker.get("manifest_sha256") == manifest:
            check_agent_code(marker.get("agent_sha256") or {}, agent_root)
            return
    raise AgentError("the bundle in %s is not a whole push (no push marker names its manifest.json): the last "
                     "push did not finish; run harness push again" % bundle)


def check_agent_code(expected, agent_root):
    """Each agent file named in the marker has the sha256 it was pushed with."""
    for rel, digest in sorted(expected.items()):
        path = os.path.join(agent_root, rel)
        try:
            ok = sha256_file(path) == digest
        except OSError:
            ok = False
        if not ok:
            raise AgentError("the agent's own file %s on %s is not the one pushed; run harness push again"
                             % (rel, socket.gethostname()))


def check_data(bundle, shapes, remove_damaged=False):
    """Each data file of these shapes (manifest entries) matches its sha256. ``remove_damaged``
    (a pushed bundle): a damaged file is removed, so that the next push sends it again (a push
    sends what the remote lacks or holds with another size)."""
    for s in shapes:
        for operand, rel in sorted((s.get("data") or {}).items()):
            path = bundle_path(bundle, rel, "shape %s data %s" % (s.get("id"), operand))
            expected = (s.get("sha256") or {}).get(operand)
            try:
                digest = sha256_file(path)
            except OSError as exc:
                raise AgentError("data file %s of shape %s is missing (%s); run harness push again"
                                 % (rel, s.get("id"), exc.strerror or exc))
            if expected and digest != expected:
                if remove_damaged:
                    remove_quietly(path)
                raise AgentError("data file %s of shape %s does not match its sha256; run harness push again"
                                 % (rel, s.get("id")))


def remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def nearest_folder(path):
    """``path`` or the nearest folder above it that exists."""
    path = os.path.abspath(path)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def free_bytes(folder):
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def require_room(folder, needed):
    """AgentError 'disk full on HOST: N bytes free, M needed' unless ``needed`` bytes are free
    on the file system of ``folder`` (made if missing)."""
    try:
        os.makedirs(folder, exist_ok=True)
        free = free_bytes(folder)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise AgentError("cannot use %s: %s" % (folder, exc.strerror or exc))
        free = free_bytes(nearest_folder(folder))
    if free < needed:
        raise AgentError("disk full on %s: %d bytes free, %d needed" % (socket.gethostname(), free, needed))
