"""No import cycles in harness/ or remote_agent/.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import``
statement counts, including those inside functions (a lazy import hides a cycle, it does not
remove it). A package's ``__init__`` importing its own submodules is left out: that is how a
package assembles itself, not a layer crossing. A module's edge goes to the module it names:
``from harness.transport import fetch`` points at ``harness.transport.fetch`` when that is a module,
otherwise at the package ``harness.transport``.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "remote_agent")


def module_files(root: Path = REPO, packages=PACKAGES) -> Dict[str, Path]:
    """Dotted module name -> file, for every .py file under the packages."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def resolve_relative(module: str, is_package: bool, level: int, name: str) -> str:
    """The absolute module that ``from <level dots><name> import ...`` in ``module`` names."""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imported_modules(module: str, path: Path, modules: Dict[str, Path]) -> Set[str]:
    """The modules of the packages that ``module`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (resolve_relative(module, is_package, node.level, node.module or "")
                    if node.level else node.module or "")
            for alias in node.names:
                child = base + "." + alias.name
                targets.append(child if child in modules else base)
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a name inside a.b
                target = target.rpartition(".")[0]
            if not target or target == module:
                continue
            if is_package and target.startswith(module + "."):
                continue  # a package importing its own submodules
            found.add(target)
    return found


def import_graph(root: Path = REPO, packages=PACKAGES) -> Dict[str, Set[str]]:
    modules = module_files(root, packages)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Tarjan's components with more than one module (iterative: the graph is deep)."""
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return result


def one_cycle(graph: Dict[str, Set[str]], component: List[str]) -> List[str]:
    """A shortest cycle through the component's first module, for the failure message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        next_frontier = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    return paths[node] + [start]
                if child not in paths:
                    paths[child] = paths[node] + [child]
                    next_frontier.append(child)
        frontier = next_frontier
    return component


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    graph = import_graph()
    # rounds.py imports transport code only inside functions, relatively
    assert any(target.startswith("harness.") for target in graph["harness.rounds"])
    assert "harness.errors" in graph["harness.cli"] or "harness.commands" in graph["harness.cli"]


def cycle_lines(graph: Dict[str, Set[str]]) -> List[str]:
    """One line per group of modules that import each other: a cycle, then the whole group."""
    return ["%s  (modules in the cycle: %s)" % (" -> ".join(one_cycle(graph, c)), ", ".join(c))
            for c in strongly_connected(graph)]


def test_a_cycle_through_a_function_level_relative_import_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")  # a package importing its own: left out
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n    from .. import c\n")
    (pkg / "c.py").write_text("import os\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg"] == set()
    assert graph["pkg.sub.b"] == {"pkg.a", "pkg.c"}
    assert cycle_lines(graph) == ["pkg.a -> pkg.sub.b -> pkg.a  (modules in the cycle: pkg.a, pkg.sub.b)"]


def test_no_import_cycles():
    cycles = cycle_lines(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
