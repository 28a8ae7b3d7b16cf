"""Issue 44 defects 1 to 4, each caused for real: a hostile remote (a loopback sshd that answers
every command with a crafted tar), a full disk (a tmpfs mounted by the test as the remote's
workdir), a crafted manifest, and a targets.yaml whose target name climbs out of the project.
docs/security.md says what each check is."""

import hashlib
import io
import itertools
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from remote_agent import safetar
from tests.conftest import ANSWERS_ONLY, REPO, SMALL_SPACE, Workspace
from tests.sshd import make_server

BOX = "  arch: native\n  profiler: wallclock\n"

# the link chain of issue 44: the links pass a check made member by member, then the file x
# is written through x.part; two folders deep it lands one folder above the extraction's
CHAIN = [("x.part", tarfile.SYMTYPE, "a/f"), ("a", tarfile.SYMTYPE, "b/../../.."), ("b", tarfile.SYMTYPE, "."),
         ("x", tarfile.REGTYPE, b"written by the remote\n")]


def _tar(members) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, arg in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = len(arg)
                tar.addfile(info, io.BytesIO(arg))
            else:
                info.linkname = arg
                tar.addfile(info)
    return buf.getvalue()


def _ws(path: Path, sshd=None) -> Workspace:
    path.mkdir(parents=True, exist_ok=True)
    return Workspace(path, sshd)


def _files_under(path: Path) -> list:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if not p.is_dir())


def _one_line_error(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [l for l in proc.stderr.splitlines() if l.strip() and "━" not in l]  # not the progress bar
    assert len(errors) == 1, proc.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


@pytest.fixture
def hostile_sshd(tmp_path):
    """A real sshd on 127.0.0.1 whose every command prints ``evil.tar`` (a remote that lies)."""
    server = make_server(tmp_path / "sshd-hostile")
    server.stop()
    evil = server.dir / "evil.tar"
    with open(server.dir / "sshd_config", "a") as f:
        f.write("ForceCommand cat %s\n" % evil)
    server.start()
    yield server, evil
    server.stop()


# -- defect 1: a remote can write on the host ------------------------------------------------

def test_a_link_chain_from_a_hostile_remote_writes_nothing_on_the_host(tmp_path, hostile_sshd):
    server, evil = hostile_sshd
    evil.write_bytes(_tar([("results/evil/%s" % n, kind, arg) for n, kind, arg in CHAIN]))
    ws = _ws(tmp_path / "ws")
    (ws.path / "targets.yaml").write_text("evil:\n" + BOX + "  workdir: w\n  ssh:\n" + server.target_ssh_yaml())
    temp = tmp_path / "temp" / "inner"  # the fetch extracts into a folder made here
    temp.mkdir(parents=True)
    ws.env["TMPDIR"] = str(temp)
    before = _files_under(tmp_path / "temp")
    proc = ws.harness("report", "--target", "evil", "--kernel", "matmul", check=False)
    assert _files_under(tmp_path / "temp") == before == []  # on main: inner/f, written through the links
    assert not (ws.path / "f").exists()
    line = _one_line_error(proc, "links are not accepted", "x.part")
    assert line.startswith("error:")


@pytest.mark.parametrize("depth", [0, 1, 2, 3])
def test_the_link_chain_in_every_order_and_depth_writes_nothing_outside(tmp_path, depth):
    prefix = "".join("d%d/" % i for i in range(depth))
    for n, order in enumerate(itertools.permutations(CHAIN[:3])):
        base = tmp_path / str(n)
        dest = base / "l1" / "l2" / "l3" / "dest"
        dest.mkdir(parents=True)
        members = [(prefix + name, kind, arg) for name, kind, arg in list(order) + CHAIN[3:]]
        with pytest.raises(safetar.UnsafeMember, match="links are not accepted"):
            safetar.extract_stream(io.BytesIO(_tar(members)), str(dest))
        assert _files_under(base) == []


def test_a_link_planted_under_a_final_name_is_replaced_not_followed(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "x").symlink_to(outside)
    (dest / "x.part").symlink_to(outside)
    assert safetar.extract_stream(io.BytesIO(_tar([("x", tarfile.REGTYPE, b"new")])), str(dest)) == 1
    assert outside.read_text() == "keep"
    assert not (dest / "x").is_symlink() and (dest / "x").read_bytes() == b"new"


# -- defect 2: a failed push counts as done --------------------------------------------------

def _mount_tmpfs(disk: Path, size: str):
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        if os.environ.get("CI"):
            raise AssertionError("cannot mount a tmpfs: %s" % mounted.stderr)
        pytest.skip("cannot mount a tmpfs here (%s)" % mounted.stderr.decode().strip())


@pytest.fixture
def tiny_disk(tmp_path):
    """A real tmpfs of 8 MiB (a bundle here is about 3.5 MB with the agent)."""
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "8m")
    yield disk
    subprocess.run(["umount", "-l", str(disk)])


@pytest.fixture
def tiny_remote(tmp_path):
    """(sshd, tmpfs of 8 MiB): the sshd starts after the mount, so that its private mount
    namespace (tests/sshd.py) has the tmpfs too."""
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "8m")
    server = make_server(tmp_path / "sshd-tiny")
    yield server, disk
    server.stop()
    subprocess.run(["umount", "-l", str(disk)])


def _fill(disk: Path, leave: int) -> Path:
    """A file that leaves ``leave`` bytes free on ``disk``."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * (st.f_bavail * st.f_frsize - leave))
    return filler


def _box(tmp_path, sshd, workdir) -> Workspace:
    ws = _ws(tmp_path / "ws", sshd)
    (ws.path / "targets.yaml").write_text("box:\n" + BOX + "  workdir: %s\n  ssh:\n%s" % (workdir, sshd.target_ssh_yaml()))
    ws.harness("build", "matmul", "--target", "box", "--shapes", "32x32x32", "--space", "space.yaml")
    return ws


@pytest.mark.slow
def test_a_push_onto_a_full_disk_says_so_and_leaves_nothing_taken_for_done(tmp_path, tiny_remote):
    sshd, tiny_disk = tiny_remote
    ws = _box(tmp_path, sshd, tiny_disk / "w")
    filler = _fill(tiny_disk, 1 << 20)  # room for an artifact or so, not for the bundle
    _one_line_error(ws.harness("push", "box", check=False), "disk full on", "bytes free", "needed")
    bundle = tiny_disk / "w/bundles/box/matmul"
    left = [p for p in (tiny_disk / "w").rglob("*") if p.is_file()] if (tiny_disk / "w").exists() else []
    assert not (bundle / "manifest.json").exists() and not list(bundle.glob(".pushed-*"))
    assert [p for p in left if p.stat().st_size == 0] == []  # on main: 0-byte manifest, data, agent, marker
    filler.unlink()
    pushed = ws.harness("push", "box").stdout
    assert "0 files sent" not in pushed and "files sent" in pushed
    ws.harness("run", "--remote", "box", "--iters", "2", *ANSWERS_ONLY)
    status = ws.harness("status", "box")
    assert "finished (exit 0)" in status.stdout and "4 rows" in status.stdout


def test_a_file_cut_short_by_a_full_disk_never_takes_its_name(tiny_disk):
    filler = _fill(tiny_disk, 64 * 1024)
    with pytest.raises(safetar.DiskFull, match="disk full on .*: \\d+ bytes free, \\d+ needed"):
        safetar.extract_stream(io.BytesIO(_tar([("small", tarfile.REGTYPE, b"s" * 100),
                                         ("big", tarfile.REGTYPE, b"b" * (256 * 1024))])), str(tiny_disk / "d"))
    assert (tiny_disk / "d" / "small").read_bytes() == b"s" * 100  # whole files before it stay
    assert sorted(os.listdir(tiny_disk / "d")) == ["small"]  # no big, no big.part
    filler.unlink()


def test_a_damaged_file_never_takes_its_name(tmp_path):
    info = tarfile.TarInfo("data.bin")
    info.size = 4
    info.pax_headers = {"HARNESS.sha256": hashlib.sha256(b"good").hexdigest()}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(b"evil"))
    with pytest.raises(Exception, match="does not match"):
        safetar.extract_stream(io.BytesIO(buf.getvalue()), str(tmp_path / "d"))
    assert os.listdir(tmp_path / "d") == []


@pytest.mark.slow
def test_an_agent_started_on_a_full_disk_says_so_and_runs_once_there_is_room(tmp_path, tiny_remote):
    sshd, tiny_disk = tiny_remote
    ws = _box(tmp_path, sshd, tiny_disk / "w")
    ws.harness("push", "box")
    filler = _fill(tiny_disk, 8 * 1024)
    _one_line_error(ws.harness("run", "--remote", "box", "--iters", "2", *ANSWERS_ONLY, check=False), "disk full on", "8192 bytes free")
    filler.unlink()
    ws.harness("run", "--remote", "box", "--iters", "2", *ANSWERS_ONLY)  # on main: EOFError, marshal data too short
    assert "finished (exit 0)" in ws.harness("status", "box").stdout
    assert not list((tiny_disk / "w" / "agent").rglob("*.pyc"))


@pytest.mark.slow
def test_the_agent_refuses_a_push_that_did_not_finish_and_agent_code_changed_since(tmp_path, sshd):
    ws = _box(tmp_path, sshd, tmp_path / "w")
    ws.harness("push", "box")
    bundle = tmp_path / "w/bundles/box/matmul"
    marker = next(bundle.glob(".pushed-*"))
    agent_file = tmp_path / "w/agent/remote_agent/stats.py"
    agent_file.write_text(agent_file.read_text() + "\n# changed on the remote\n")
    _one_line_error(ws.harness("run", "--remote", "box", "--iters", "2", *ANSWERS_ONLY, check=False), "remote_agent/stats.py",
                    "not the one pushed")
    marker.unlink()  # as if the push had stopped before its last file
    _one_line_error(ws.harness("run", "--remote", "box", "--iters", "2", *ANSWERS_ONLY, check=False), "not a whole push")
    ws.harness("push", "box")
    data = next((bundle / "data").iterdir())
    data.write_bytes(b"\0" * data.stat().st_size)  # same size, other bytes
    _one_line_error(ws.harness("run", "--remote", "box", "--iters", "2", *ANSWERS_ONLY, check=False), data.name,
                    "does not match its sha256")
    assert not (tmp_path / "w/results/box/matmul/results.csv").exists()
    assert "1 files sent" in ws.harness("push", "box").stdout  # the damaged file was set aside
    ws.harness("run", "--remote", "box", "--iters", "2", *ANSWERS_ONLY)
    assert "finished (exit 0)" in ws.harness("status", "box").stdout


@pytest.mark.slow
def test_a_push_while_the_next_rounds_replace_the_manifest_sends_the_manifest_it_hashed(tmp_path, sshd):
    """A tune pushes its bundle while it builds its next rounds, each writing manifest.json anew:
    the manifest sent is the one whose sha256 went into the push's header and marker."""
    import threading

    from harness.bundle import Manifest
    from harness.push import push
    from harness.targets import load_targets
    from harness.transport import for_hosts

    ws = _box(tmp_path, sshd, tmp_path / "w")
    bundle = ws.path / "build/box/matmul"
    manifest = Manifest.load(bundle / "manifest.json")
    text = (bundle / "manifest.json").read_text()
    stop = threading.Event()

    def next_rounds():  # as Manifest.save does: a whole file each time, put in place at once
        for i in itertools.count():
            if stop.is_set():
                return
            tmp = bundle / "manifest.json.tmp-test"
            tmp.write_text(text.replace('"created": "', '"created": "%s' % ("x" * (i % 50))))
            os.replace(tmp, bundle / "manifest.json")

    writer = threading.Thread(target=next_rounds, daemon=True)
    writer.start()
    transport = for_hosts(load_targets(ws.path / "targets.yaml")["box"])[0].open()
    try:
        for _ in range(3):
            for pushed in (tmp_path / "w/bundles/box/matmul").glob(".pushed-*"):
                pushed.unlink()  # each push sends the manifest again
            push(bundle, manifest, transport)
    finally:
        stop.set()
        writer.join()
        transport.close()
    remote = tmp_path / "w/bundles/box/matmul"
    marker = json.loads(next(remote.glob(".pushed-*")).read_text())
    assert marker["manifest_sha256"] == hashlib.sha256((remote / "manifest.json").read_bytes()).hexdigest()


# -- defect 3: the agent runs a program outside the bundle ------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("field", ["artifact", "data"])
def test_a_manifest_path_out_of_the_bundle_runs_and_reads_nothing(tmp_path, field):
    ws = _ws(tmp_path / "ws")
    ws.harness("build", "matmul", "--target", "native-qemu-free", "--shapes", "32x32x32", "--space", "space.yaml")
    bundle = ws.path / "build/native-qemu-free/matmul"
    canary = tmp_path / "RAN"
    script = tmp_path / "x.sh"  # bundle/../../../../x.sh
    script.write_text("#!/bin/sh\ntouch %s\n" % canary)
    script.chmod(0o755)
    manifest = json.loads((bundle / "manifest.json").read_text())
    if field == "artifact":
        manifest["variants"][0]["artifact"] = "../../../../x.sh"
        manifest["variants"][0]["sha256"] = hashlib.sha256(script.read_bytes()).hexdigest()
    else:
        shape = manifest["shapes"][0]
        name = sorted(shape["data"])[0]
        shape["data"][name] = "../../../../x.sh"
        shape["sha256"][name] = hashlib.sha256(script.read_bytes()).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    proc = subprocess.run([sys.executable, "-m", "remote_agent", "run", "--bundle", str(bundle),
                           "--results", str(tmp_path / "r.csv"), "--iters", "2"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert not canary.exists()  # on main: the script ran as variant 0
    _one_line_error(proc, "../../../../x.sh", "leaves the bundle")
    assert not (tmp_path / "r.csv").exists()


# -- defect 4: a target name that climbs out of the project ----------------------------------

@pytest.mark.slow
def test_a_target_named_out_of_the_project_is_refused_with_its_line(tmp_path):
    ws = _ws(tmp_path / "a" / "b" / "ws")
    (ws.path / "targets.yaml").write_text("ok-1.board_2:\n" + BOX + "'../../../x':\n" + BOX)
    for command in (["build", "matmul", "--target", "../../../x", "--shapes", "32x32x32", "--space", "space.yaml"],
                    ["run", "--target", "../../../x"], ["targets"]):
        proc = ws.harness(*command, check=False)
        assert sorted(os.listdir(tmp_path / "a")) == ["b"]  # on main: a/x/matmul/, a bundle outside the project
        assert sorted(os.listdir(tmp_path / "a" / "b")) == ["ws"]
        line = _one_line_error(proc, "targets.yaml:4", "target name '../../../x'")
        assert "letters, digits" in line


@pytest.mark.parametrize("name", [".hidden", "a/b", "x y", "..", "~me"])
def test_unsafe_target_names_are_refused(tmp_path, name):
    ws = _ws(tmp_path)
    (ws.path / "targets.yaml").write_text("%s:\n%s" % (json.dumps(name), BOX))
    _one_line_error(ws.harness("targets", check=False), "targets.yaml:1", "target name")


def test_a_kernel_name_out_of_the_project_is_refused(tmp_path):
    ws = _ws(tmp_path / "a" / "ws")
    (ws.path / "space.yaml").write_text(SMALL_SPACE)
    _one_line_error(ws.harness("report", "--target", "local", "--kernel", "../../x", check=False), "kernel name")
    assert sorted(os.listdir(tmp_path / "a")) == ["ws"]
