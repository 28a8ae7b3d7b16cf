"""bench/ stays apart from the product: bench/README.md names every file in it, and nothing in
harness/ or remote_agent/ imports from bench or names one of its files (issue 41)."""

import ast
import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
PRODUCT = ("harness", "remote_agent")


def bench_files():
    """Every file under bench/, relative to it, leaving out Python's caches."""
    found = []
    for folder, dirs, files in os.walk(BENCH):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith(".pyc"):
                found.append((Path(folder) / name).relative_to(BENCH).as_posix())
    return sorted(found)


def names_in_readme():
    """The paths bench/README.md names in backticks in the first column of its tables."""
    text = (BENCH / "README.md").read_text()
    return set(re.findall(r"^\| `([^`]+)` \|", text, flags=re.M))


def product_sources():
    for top in PRODUCT:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                yield path


def imported_modules(path):
    """Every module a Python file imports, at any depth (imports inside functions too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def test_bench_readme_names_every_file_in_bench():
    files = bench_files()
    assert "README.md" in files and "probes/streamk_probe.py" in files  # the walk sees subfolders
    missing = [f for f in files if f not in names_in_readme()]
    assert not missing, "bench/README.md does not name: %s" % ", ".join(missing)


def test_bench_readme_names_no_file_that_is_gone():
    gone = sorted(n for n in names_in_readme() if not (BENCH / n).is_file())
    assert not gone, "bench/README.md names files that are not in bench/: %s" % ", ".join(gone)


def test_no_product_module_imports_from_bench():
    offenders = []
    for path in product_sources():
        if path.suffix == ".py":
            for module in imported_modules(path):
                if module == "bench" or module.startswith("bench."):
                    offenders.append("%s imports %s" % (path.relative_to(REPO), module))
    assert not offenders, "\n".join(offenders)


def test_no_product_file_names_a_bench_file():
    names = ["bench/" + f for f in bench_files()]
    names += [Path(f).stem for f in bench_files() if f.startswith("probes/") and f.endswith("_probe.py")]
    offenders = []
    for path in product_sources():
        text = path.read_text(errors="replace")
        offenders += ["%s names %s" % (path.relative_to(REPO), n) for n in names if n in text]
    assert not offenders, "\n".join(offenders)
