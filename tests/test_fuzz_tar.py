"""Random tars against the extractor that push and fetch use (remote_agent/safetar.py): random
member types, names, link targets and orders, some streams cut short or with bytes flipped.
Every outcome is a clean count or a one-line ExtractError; nothing appears outside the folder
(the listing of a sentinel tree around it stays the same); no link is ever made inside it."""

import io
import os
import random
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from remote_agent.safetar import ExtractError, extract_stream

from tests.conftest import REPO

SEED = 44
COUNT = 2000
SECONDS = 120  # a bound, far above what 2,000 take here
PARTS = ["a", "b", "x", "x.part", "..", ".", "", "f", "results", "d" * 120, "\\", "c:", "~", " "]
TYPES = [tarfile.REGTYPE, tarfile.REGTYPE, tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE,
         tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.CONTTYPE,
         tarfile.GNUTYPE_SPARSE, b"Z"]


PLAIN_PARTS = ["a", "b", "x", "x.part", "f", "results", "."]
PLAIN_TYPES = [tarfile.REGTYPE, tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.CONTTYPE]


def _name(rng, plain=False) -> str:
    name = "/".join(rng.choice(PLAIN_PARTS if plain else PARTS) for _ in range(rng.randint(1, 4)))
    if plain:
        return name
    if rng.random() < 0.1:
        name = "/" + name
    if rng.random() < 0.05:
        name = "../" * rng.randint(1, 4) + name
    return name


def _member(rng, plain) -> tuple:
    info = tarfile.TarInfo(_name(rng, plain))
    info.type = rng.choice(PLAIN_TYPES if plain else TYPES)
    info.mode = rng.choice([0o644, 0o755, 0o4777, 0o000])
    data = None
    if info.type in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        info.linkname = _name(rng)
    elif info.type in (tarfile.REGTYPE, tarfile.CONTTYPE):
        data = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 511, 512, 513, 3000])))
        info.size = len(data)
    if not plain and rng.random() < 0.1:
        info.pax_headers = {"HARNESS.sha256": rng.choice(["0" * 64, "zz", ""])}
    return info, data


def random_tar(rng) -> bytes:
    """A tar of 1 to 8 members; about a third of them plain (files and folders with names that
    are fine), so that extraction over earlier results is exercised too."""
    plain = rng.random() < 0.35
    buf = io.BytesIO()
    fmt = rng.choice([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
    try:
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
            for _ in range(rng.randint(1, 8)):
                info, data = _member(rng, plain)
                try:
                    tar.addfile(info, io.BytesIO(data) if data is not None else None)
                except ValueError:  # a name too long for ustar: leave it out
                    pass
    except ValueError:
        pass
    raw = bytearray(buf.getvalue())
    roll = rng.random() if not plain else 1.0
    if raw and roll < 0.15:
        del raw[rng.randrange(len(raw)):]  # cut short
    elif raw and roll < 0.3:
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] = rng.getrandbits(8)  # flipped bytes
    return bytes(raw)


def _listing(base: Path, root: Path) -> list:
    out = []
    for folder, dirs, files in os.walk(base):
        if Path(folder) == root.parent:
            dirs[:] = [d for d in dirs if Path(folder, d) != root]
        out += [os.path.relpath(os.path.join(folder, n), base) for n in dirs + files]
    return sorted(out)


def _sentinel_tree(base: Path) -> Path:
    (base / "keep").mkdir(parents=True)
    (base / "keep" / "sentinel.txt").write_text("do not touch")
    (base / "f").mkdir()
    root = base / "a" / "b" / "root"
    root.mkdir(parents=True)
    return root


def _links_inside(root: Path) -> list:
    return [p for p in root.rglob("*") if p.is_symlink()]


@pytest.mark.slow
def test_random_tars_extract_cleanly_or_fail_in_one_line_and_never_leave_the_folder(tmp_path):
    rng = random.Random(SEED)
    base = tmp_path / "base"
    root = _sentinel_tree(base)
    before = _listing(base, root)
    outcomes = {"extracted": 0, "refused": 0}
    start = time.monotonic()
    for i in range(COUNT):
        data = random_tar(rng)
        dest = root / str(i % 50)  # some runs extract over what an earlier one left
        try:
            extract_stream(io.BytesIO(data), str(dest))
            outcomes["extracted"] += 1
        except ExtractError as exc:
            message = str(exc)
            assert message and "\n" not in message, (i, message)
            outcomes["refused"] += 1
        assert _listing(base, root) == before, "tar %d wrote outside its folder" % i
        assert time.monotonic() - start < SECONDS, "only %d tars in %d s" % (i, SECONDS)
    assert _links_inside(root) == []
    assert (base / "keep" / "sentinel.txt").read_text() == "do not touch"
    assert outcomes["extracted"] > 100 and outcomes["refused"] > 100, outcomes  # both paths were taken


@pytest.mark.slow
def test_the_command_line_extractor_answers_one_line_and_exit_2(tmp_path):
    """What push runs on the remote: exit 0 with a count, or exit 2 with one line, no traceback."""
    rng = random.Random(SEED + 1)
    base = tmp_path / "base"
    root = _sentinel_tree(base)
    before = _listing(base, root)
    codes = set()
    for i in range(40):
        proc = subprocess.run([sys.executable, "-B", str(REPO / "remote_agent" / "safetar.py"), str(root / str(i))],
                              input=random_tar(rng), capture_output=True, timeout=60)
        err = proc.stderr.decode()
        assert "Traceback" not in err
        assert (proc.returncode, len(err.splitlines())) in ((0, 0), (2, 1)), (proc.returncode, err)
        codes.add(proc.returncode)
    assert codes == {0, 2}
    assert _listing(base, root) == before
