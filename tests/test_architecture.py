"""The import graph of faultstream's packages: no circles, and arrows only point down.

Layers, lowest first (a module may import its own layer and the layers below it):

    schemas  <  correlators  <  transport  <  connectors, sinks  <  streams

``schemas`` holds the record contract, ``correlators`` the pure engine, ``transport`` the
clients of Kafka and Slurm that inputs and outputs share, ``connectors`` (inputs) and ``sinks``
(outputs) around the engine, ``streams`` the drivers and the CLI.

What counts as an import: every ``import`` / ``from ... import`` statement of a module, at
module level or inside a function, class or ``try`` block (a function-level import is the same
runtime dependency, only deferred, so it cannot hide a circle), relative imports resolved.
Imports under ``if TYPE_CHECKING:`` are left out: they never run and exist only for
annotations. ``from pkg import name`` is an edge to the module ``pkg.name`` when that is a
module, else to ``pkg``. A circle is a strongly connected component of two or more modules.

The graph is built here with :mod:`ast` (no import-graph library is installed); the engine's
own rule (``correlators`` imports no I/O library) is checked on the same graph.
"""

from __future__ import annotations

import pytest
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"schemas": 0, "correlators": 1, "transport": 2, "connectors": 3, "sinks": 3, "streams": 4}
#: third-party or stdlib modules that do I/O: the pure engine imports none of them
IO_MODULES = {"aiokafka", "chdb", "clickhouse_connect", "confluent_kafka", "faust", "httpx", "kubernetes",
              "requests", "rocksdict", "socket", "subprocess", "urllib", "asyncio", "typer", "rich"}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[tuple[str, int, list[str]]]:
    """(module text, relative level, imported names) of every import statement outside
    ``if TYPE_CHECKING:`` blocks, at any depth."""
    out: list[tuple[str, int, list[str]]] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)  # the else branch runs
                continue
            if isinstance(child, ast.Import):
                out.extend((alias.name, 0, []) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                out.append((child.module or "", child.level, [a.name for a in child.names]))
            stack.append(child)
    return out


def build_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(edges between the packages' modules, external top-level modules each module imports)."""
    mods = _modules()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    external: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for name, level, names in _imports(ast.parse(path.read_text("utf-8"), str(path))):
            if level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (level - 1)]
                name = ".".join(base + ([name] if name else []))
            if name.split(".")[0] not in LAYERS:
                external[mod].add(name.split(".")[0])
                continue
            targets = [f"{name}.{n}" if f"{name}.{n}" in mods else name for n in names] or [name]
            for target in targets:
                found = owner(target)
                if found and found != mod:
                    edges[mod].add(found)
    return edges, external


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with two or more modules (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        comp.append(member)
                        if member == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found)


def _layer(mod: str) -> int:
    return LAYERS[mod.split(".")[0]]


@pytest.mark.slow
def test_the_graph_sees_module_level_lazy_and_relative_imports():
    """The checks below are only as good as the graph: it must hold edges of every kind."""
    edges, external = build_graph()
    assert "connectors.registry" in edges["streams.cli"]  # module level
    assert "streams.replay" in edges["streams.cli"]  # inside a function
    assert "correlators.hypothesis" in edges["correlators.detectors"]
    assert "correlators.rules.code" in edges["correlators.rules"]  # package __init__
    assert "transport.kafka" not in edges["connectors.runner"]  # under TYPE_CHECKING only
    assert "yaml" in external["schemas.yamlspec"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.slow
def test_no_import_circles():
    edges, _ = build_graph()
    found = circles(edges)
    detail = []
    for comp in found:
        detail.append(" <-> ".join(comp) + ": " + ", ".join(
            f"{a} -> {b}" for a in comp for b in sorted(edges[a]) if b in comp))
    assert not found, "import circles:\n" + "\n".join(detail)


@pytest.mark.slow
def test_arrows_point_down_the_layers():
    edges, _ = build_graph()
    upward = sorted(f"{a} -> {b}" for a, targets in edges.items() for b in targets if _layer(b) > _layer(a))
    assert not upward, ("imports from a lower layer into a higher one "
                        "(schemas < correlators < transport < connectors, sinks < streams):\n" + "\n".join(upward))


@pytest.mark.slow
def test_the_engine_imports_no_io_library():
    _, external = build_graph()
    bad = sorted(f"{m} imports {', '.join(sorted(libs & IO_MODULES))}"
                 for m, libs in external.items() if m.split(".")[0] == "correlators" and libs & IO_MODULES)
    assert not bad, "correlators/ must stay pure:\n" + "\n".join(bad)


def test_the_dead_letter_model_is_one_class():
    """The dead-letter record is a schema (``schemas.deadletter``): the sink writes the same
    class the exported JSON Schema describes."""
    from schemas.deadletter import DeadLetter
    from schemas.exported import EXPORTED_MODELS
    from sinks.deadletter import DeadLetter as SinkDeadLetter

    assert EXPORTED_MODELS["dead_letter"] is DeadLetter
    assert SinkDeadLetter is DeadLetter, "sinks/deadletter.py must re-export schemas.deadletter.DeadLetter"


# --------------------------------------------------------------------------- one of each


def _error_exit_helpers() -> list[str]:
    """Functions that print ``error: ...`` on stderr and raise ``typer.Exit``: CLI failure
    helpers."""
    found = []
    for mod, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = ast.unparse(node)
            if "typer.Exit" in body and "error: " in body and len(node.body) <= 4:
                found.append(f"{mod}.{node.name}")
    return sorted(found)


@pytest.mark.slow
def test_one_cli_failure_helper():
    assert _error_exit_helpers() == ["connectors.registry.cli_fail"]


def test_the_topic_prefix_is_read_in_one_place(monkeypatch):
    """``FAULTSTREAM_TOPIC_PREFIX`` is read by ``schemas.topics`` only (the worker's settings
    pass their value through ``clean_prefix``), so every process names the same topics."""
    from schemas.topics import catalogue, clean_prefix, topic_prefix
    from streams.settings import WorkerSettings

    readers = sorted(mod for mod, path in _modules().items()
                     if "environ" in (text := path.read_text("utf-8"))
                     and ("PREFIX_ENV" in text or "FAULTSTREAM_TOPIC_PREFIX\"" in text))
    assert readers == ["schemas.topics"]
    assert clean_prefix(None) == clean_prefix("") == clean_prefix("  ") == "faultstream"
    assert clean_prefix(" lab ") == "lab"
    for value, want in (("lab", "lab"), ("  ", "faultstream"), ("", "faultstream")):
        monkeypatch.setenv("FAULTSTREAM_TOPIC_PREFIX", value)
        assert topic_prefix() == want
        assert catalogue()["observations"].name == f"{want}.observations"
        assert WorkerSettings().topic("observations") == f"{want}.observations"
