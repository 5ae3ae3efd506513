"""How `src/` imports: at the top of modules, and without circles.

Imports sit at the top of a module, where a reader (and import-linter) sees
what it depends on. The one exception is a part a node may never use (the
Kubernetes client, the DRA side, the MPS probe, the CDI spec builder): it is
loaded on first use through the `on_demand` modules, whose small functions
each import their part. This reads every module with `ast` (nothing is
imported) and holds `src/` to that, and to having no import circle inside a
package, type-only imports (`if TYPE_CHECKING:`) included: a circle that
only type checkers follow still means two modules that cannot be read, or
moved, one without the other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# The loaders of what a node may never use; the only homes of function-level imports.
ON_DEMAND = frozenset({"kube/on_demand.py", "labels/on_demand.py", "reconciler/on_demand.py"})
LIMIT = 15
# Function-level imports not yet moved to an `on_demand` module, at most this many per file.
NOT_YET_ON_DEMAND: dict[str, int] = {}
# Packages whose import circles are still being taken apart.
CIRCLES_ALLOWED_IN: frozenset[str] = frozenset()


def _sources() -> Iterator[tuple[str, Path]]:
    for path in sorted(SRC.rglob("*.py")):
        if "_pb2" not in path.name:
            yield path.relative_to(SRC).as_posix(), path


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _function_level(node: ast.AST) -> Iterator[ast.stmt]:
    """Imports inside function bodies, the type checkers' `if TYPE_CHECKING:` blocks left out."""
    return _among(list(ast.iter_child_nodes(node)), in_function=False)


def _among(nodes: list[ast.AST], *, in_function: bool) -> Iterator[ast.stmt]:
    for node in nodes:
        if isinstance(node, ast.If) and _type_checking(node):
            yield from _among(list(node.orelse), in_function=in_function)
            continue
        if in_function and isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        nested = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _among(list(ast.iter_child_nodes(node)), in_function=in_function or nested)


def _function_level_imports() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, path in _sources():
        lines = [
            f"{name}:{node.lineno}: {ast.unparse(node)}"
            for node in _function_level(ast.parse(path.read_text(), str(path)))
        ]
        if lines:
            found[name] = lines
    return found


def test_function_level_imports_live_only_in_the_on_demand_modules() -> None:
    found = _function_level_imports()
    elsewhere = {
        name: lines
        for name, lines in found.items()
        if name not in ON_DEMAND and len(lines) > NOT_YET_ON_DEMAND.get(name, 0)
    }
    assert not elsewhere, "import at the top, or through an on_demand module:\n" + "\n".join(
        line for lines in elsewhere.values() for line in lines
    )
    loaders = [line for name in sorted(ON_DEMAND) for line in found.get(name, [])]
    assert len(loaders) <= LIMIT, "\n".join(loaders)


def test_the_reading_of_src_sees_each_on_demand_modules_loaders() -> None:
    # Read from the real files: a reading that found nothing would pass the test above.
    found = _function_level_imports()
    for name in ON_DEMAND:
        assert found.get(name), f"no function-level import read in {name}"


def test_the_on_demand_modules_and_the_allowance_name_real_files() -> None:
    # A renamed file must not leave a stale entry that would admit new imports.
    for name in (*ON_DEMAND, *NOT_YET_ON_DEMAND):
        assert (SRC / name).is_file(), name


def test_the_reading_sees_function_level_imports_and_skips_type_checking_blocks() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import a\n"
        "def f():\n"
        "    import b\n"
        "    if TYPE_CHECKING:\n        import c\n"
        "    else:\n        import d\n"
        "    def g():\n        from e import x\n"
        "class K:\n    import f\n    def m(self):\n        import g\n"
    )
    assert [ast.unparse(node) for node in _function_level(tree)] == [
        "import b",
        "import d",
        "from e import x",
        "import g",
    ]


def _module_name(relative: str) -> str:
    parts = relative.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the modules of `src/` it imports, wherever the import sits."""
    modules = {_module_name(name): name for name, _ in _sources()}
    graph: dict[str, set[str]] = {}
    for module, name in modules.items():
        package = module if name.endswith("__init__.py") else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse((SRC / name).read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.add(submodule if submodule in modules else base)
        graph[module] = {target for target in targets if target in modules and target != module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return circles


def test_no_package_imports_itself_in_a_circle() -> None:
    graph = _import_graph()
    circles = [
        circle
        for circle in _circles(graph)
        if not all(module.split(".")[0] in CIRCLES_ALLOWED_IN for module in circle)
    ]
    assert not circles, "\n".join(
        " <-> ".join(circle)
        + ": "
        + "; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(circle)))}" for m in circle)
        for circle in circles
    )


def test_the_import_graph_follows_top_level_type_only_and_function_level_imports() -> None:
    # Known edges of src/, so that a graph read wrong cannot pass the circle test vacuously.
    graph = _import_graph()
    assert "settings.sections" in graph["settings.sharing"]  # from a module import a name
    assert "inspection.telemetry" in graph["reconciler.observation.metrics"]  # a submodule
    assert "devices.model" in graph["reconciler.on_demand"]  # only under TYPE_CHECKING
    assert "mps.probe" in graph["reconciler.on_demand"]  # only inside a function


def test_the_circle_finder_finds_a_circle_and_ignores_a_chain() -> None:
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}, "b.v": set()}
    assert _circles(graph) == [["a.x", "a.y", "a.z"]]
    assert _circles({"a.x": {"a.y"}, "a.y": set()}) == []
