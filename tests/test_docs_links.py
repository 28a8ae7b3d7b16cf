"""The user docs point at what exists: every relative link in README.md, docs/ and bench/README.md
reaches a file (and its heading, for a #anchor), and every bench/ path the README and docs/*.md
name is a file of bench/ (the dated notes under docs/notes/ are history and may name old paths)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
BENCH_PATH = re.compile(r"\bbench/[A-Za-z0-9_./-]*[A-Za-z0-9_]")


def markdown_files():
    return [REPO / "README.md", REPO / "bench" / "README.md"] + sorted((REPO / "docs").rglob("*.md"))


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(path: Path) -> set:
    return {anchor(m.group(1)) for m in re.finditer(r"^#+ (.*)$", path.read_text(), flags=re.M)}


def broken_links(path: Path) -> list:
    broken = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue  # a URL
            file_part, _, fragment = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = "%s:%d: %s" % (path.relative_to(REPO), number, target)
            if not dest.exists():
                broken.append(where + " (no such file)")
            elif fragment and dest.is_file() and fragment not in anchors_of(dest):
                broken.append(where + " (no such heading)")
    return broken


def test_anchor_follows_githubs_rule():
    assert anchor("Tensor descriptors made on the host (2026-11-24)") == \
        "tensor-descriptors-made-on-the-host-2026-11-24"
    assert anchor("Host: `harness/compile/triton_gpu.py`") == "host-harnesscompiletriton_gpupy"


def test_every_relative_link_in_the_docs_reaches_its_file_and_heading():
    broken = [b for path in markdown_files() for b in broken_links(path)]
    assert not broken, "\n".join(broken)


def test_every_bench_path_the_docs_name_exists():
    missing = []
    for path in [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name in BENCH_PATH.findall(line):
                if not (REPO / name).exists():
                    missing.append("%s:%d: %s" % (path.relative_to(REPO), number, name))
    assert not missing, "\n".join(missing)
