"""Tar extraction refuses absolute paths, '..', links of any kind and devices, and never
follows a link already in the folder."""

import io
import tarfile

import pytest

from remote_agent.safetar import UnsafeMember, extract_stream


def _tar(*members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return buf


def _file(name, data=b"x"):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def test_plain_files_extract(tmp_path):
    assert extract_stream(_tar(_file("a/b.txt", b"hello"), _file("c")), str(tmp_path)) == 2
    assert (tmp_path / "a/b.txt").read_bytes() == b"hello"


@pytest.mark.parametrize("members, why", [
    ([_file("/etc/evil")], "absolute"),
    ([_file("a/../../evil")], "'..'"),
    ([_link("up", "../outside")], "links are not accepted"),
    ([_link("abs", "/etc/passwd")], "links are not accepted"),
    ([_link("ok", "."), _file("ok/../../x")], "links are not accepted"),
    ([_link("hard", "/etc/passwd", tarfile.LNKTYPE)], "links are not accepted"),
    ([_link("inner", "a", tarfile.LNKTYPE)], "links are not accepted"),
])
def test_unsafe_members_are_refused(tmp_path, members, why):
    dest = tmp_path / "dest"
    with pytest.raises(UnsafeMember, match=why):
        extract_stream(_tar(*members), str(dest))
    assert not (tmp_path / "evil").exists() and not (tmp_path / "outside").exists()


def test_write_through_an_inner_link_that_points_out_is_refused(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "inner").symlink_to(tmp_path)  # planted before extraction
    with pytest.raises(UnsafeMember, match="goes through a link"):
        extract_stream(_tar(_file("inner/evil")), str(dest))
    assert not (tmp_path / "evil").exists()


def test_device_is_refused(tmp_path):
    info = tarfile.TarInfo("dev")
    info.type = tarfile.CHRTYPE
    with pytest.raises(UnsafeMember, match="not a file"):
        extract_stream(_tar((info, None)), str(tmp_path))
