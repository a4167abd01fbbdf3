"""The package's layers, read from its source: runtime <- agent <- dashboard, with the CLI and
the tools on top, and no import cycle anywhere.

Every import counts, at module level or inside a function (a function-local import that
closes a cycle hides it without removing it); only imports under ``if TYPE_CHECKING:`` are
left out, since they never run. An import of a name resolves to the deepest module it names.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterator

import ember
import pytest

# Source folder -> import name (pyproject.toml's package-dir).
ROOTS = {
    "core": "ember",
    "cli": "ember.cli",
    "dashboard": "ember.dashboard",
    "tune": "ember.tune",
    "train": "ember.train",
    "autoscaler": "ember.autoscaler",
    "serve": "ember.serve",
}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(ember.__file__)))

# Who may import whom: a wing imports only itself and the wings before it in its row.
UPPER = ("ember.dashboard", "ember.cli", "ember.tools")
AGENT = "ember.agent"
# The libraries sit above the runtime: they use its public API, and nothing below imports them.
LIBRARIES = ("ember.tune", "ember.train", "ember.autoscaler", "ember.serve")


def _modules() -> dict[str, str]:
    """{module name: source path} of every module of the package."""
    found = {}
    for folder, package in ROOTS.items():
        top = os.path.join(REPO, folder)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for filename in filenames:
                if not filename.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, filename), top)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                found[".".join([package, *rel])] = os.path.join(dirpath, filename)
    return found


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imported_names(module: str, path: str) -> Iterator[str]:
    """Every dotted name ``module``'s source imports, relative imports resolved."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                continue
            if isinstance(child, ast.Import):
                yield from (a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package
                    for _ in range(child.level - 1):
                        parent = parent.rpartition(".")[0]
                    base = f"{parent}.{base}" if base else parent
                yield base
                yield from (f"{base}.{a.name}" for a in child.names)
            stack.append(child)


def import_graph() -> dict[str, set[str]]:
    """{module: the package's modules it imports}."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in _imported_names(module, path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
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
                        found.append(sorted(component))
    return found


def _in(module: str, wings: tuple[str, ...] | str) -> bool:
    wings = (wings,) if isinstance(wings, str) else wings
    return any(module == w or module.startswith(w + ".") for w in wings)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_graph_is_read_from_the_whole_package(graph: dict[str, set[str]]) -> None:
    # The walk finds every wing, and sees imports inside functions too.
    for module in ("ember.api", "ember.raylet.raylet", "ember.agent.agent", "ember.cli.main"):
        assert module in graph, module
    assert "ember.dashboard.server" in graph
    assert "ember.agent.agent" in graph["ember.dashboard.server"]  # a function-local import


def test_no_import_cycles(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _wrong_way(
    graph: dict[str, set[str]], importers: Callable[[str], bool], forbidden: tuple[str, ...]
) -> list[str]:
    """``importer -> module`` for every import from an importer into a forbidden wing."""
    return sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if importers(m)
        for t in targets
        if _in(t, forbidden)
    )


def test_the_runtime_imports_neither_the_dashboard_nor_the_cli_nor_the_tools(
    graph: dict[str, set[str]],
) -> None:
    assert _wrong_way(graph, lambda m: not _in(m, UPPER), UPPER) == []


def test_the_runtime_does_not_import_the_agent(graph: dict[str, set[str]]) -> None:
    # The raylet starts the agent as a process (-m ember.agent) and core workers send to its
    # socket: neither needs its code.
    assert _wrong_way(graph, lambda m: not _in(m, (*UPPER, AGENT)), (AGENT,)) == []


def test_the_dashboard_does_not_import_the_cli_or_the_tools(graph: dict[str, set[str]]) -> None:
    only_dashboard = ("ember.cli", "ember.tools")
    assert _wrong_way(graph, lambda m: _in(m, "ember.dashboard"), only_dashboard) == []


def test_nothing_below_the_libraries_imports_them(graph: dict[str, set[str]]) -> None:
    assert "ember.autoscaler.scheduler" in graph and "ember.tune.tuner" in graph
    # The CLI (ember up, ember tune ls) and the dashboard (the Config and Tune views) may
    # import a library; the runtime below never does.
    below = lambda m: not _in(m, (*LIBRARIES, *UPPER))  # noqa: E731
    assert _wrong_way(graph, below, LIBRARIES) == []


def test_the_libraries_use_neither_the_dashboard_nor_the_cli(graph: dict[str, set[str]]) -> None:
    assert _wrong_way(graph, lambda m: _in(m, LIBRARIES), UPPER) == []


def test_the_autoscaler_s_readers_read_its_record_not_its_code(
    graph: dict[str, set[str]],
) -> None:
    # `ember status`, the Config view, the autoscaler_* families and the scaling events read
    # the status record the monitor writes to the GCS KV: that record is the interface, so
    # the dashboard never loads the autoscaler (and works with any monitor that writes it).
    assert "ember.dashboard.autoscaler.record" in graph and "ember.cli.status" in graph
    readers = ("ember.dashboard", "ember.cli.status", "ember.cli.status_autoscaler")
    assert _wrong_way(graph, lambda m: _in(m, readers), ("ember.autoscaler",)) == []
