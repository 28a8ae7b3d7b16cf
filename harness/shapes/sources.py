"""Shapes file formats, detected from the content or named with --shapes-format."""

from __future__ import annotations

from pathlib import Path

from ..errors import HarnessError
from . import dedupe, parse_shape

FORMATS = ("auto", "list")


def read(path: Path, fmt: str, default_dtype: str) -> list:
    text = _read_text(path)
    if fmt not in FORMATS:
        raise HarnessError("unknown shapes format %r (known: %s)" % (fmt, ", ".join(FORMATS)))
    return read_list(path, text, default_dtype)


def read_list(path: Path, text: str, default_dtype: str) -> list:
    shapes = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        for part in line.replace(",", " ").split():
            shapes.append(parse_shape(part, default_dtype, where="%s:%d" % (path, number)))
    if not shapes:
        raise HarnessError("no shapes in the file", where=str(path))
    return dedupe(shapes)


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise HarnessError("shapes file %s does not exist" % path)
    data = path.read_bytes()
    if b"\0" in data[:4096]:
        raise HarnessError("shapes file is binary, not text", where=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise HarnessError("shapes file is not UTF-8 text", where=str(path))
