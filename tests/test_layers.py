"""The package's structure: layers import only downward and no modules import each other
in a cycle (docs/architecture.md, "Layout"), checked on the installed package.

Every ``import`` statement counts, including those inside functions: a function-local
import that breaks an import-time cycle is still a cycle in the design. Layers, from the
bottom: ``errors`` < ``ir`` < ``frontend`` < ``transforms`` < ``executors`` < ``runtime`` <
the API (the top-level modules) < ``tools``; a module may import its own layer and those
below it.
"""

from __future__ import annotations

import ast
import os
import sysconfig
from pathlib import Path

import thunder_mlir

PACKAGE = Path(thunder_mlir.__file__).parent
LAYERS = ["errors", "ir", "frontend", "transforms", "executors", "runtime", "api", "tools"]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


MODULES = _modules()


def layer(module: str) -> str:
    """The layer of a thunder_mlir module: its subpackage, ``errors``, or ``api`` for the
    other top-level modules."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return "api"


def _resolve(name: str) -> str | None:
    """The thunder_mlir module an imported name refers to (``a.b.c`` where ``c`` is not a
    module of ``a.b`` resolves to ``a.b``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str) -> set[str]:
    """The thunder_mlir modules that ``module`` imports, anywhere in its source."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out.update(m for n in names if n.startswith("thunder_mlir")
                   and (m := _resolve(n)) is not None and m != module)
    return out


GRAPH = {m: imports(m) for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_suite_runs_the_installed_wheel():
    """CI builds the wheel and installs it: the package imported here is the installed one,
    in site-packages, not the checkout's source roots."""
    assert os.path.commonpath([PACKAGE, sysconfig.get_paths()["purelib"]]) == \
        sysconfig.get_paths()["purelib"], PACKAGE
    for subpackage in ("ir", "frontend", "transforms", "executors", "runtime", "tools"):
        assert (PACKAGE / subpackage / "__init__.py").is_file(), subpackage


def test_layers_import_only_downward():
    upward = [f"{m} ({layer(m)}) imports {t} ({layer(t)})"
              for m in sorted(GRAPH) for t in sorted(GRAPH[m])
              if LAYERS.index(layer(t)) > LAYERS.index(layer(m))]
    assert upward == [], "\n".join(upward)


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


def test_the_checks_can_fail():
    """The cycle finder finds a cycle, and the layer order flags an upward import."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert LAYERS.index(layer("thunder_mlir.frontend.tracing")) > \
        LAYERS.index(layer("thunder_mlir.ir.prims"))
    assert layer("thunder_mlir.jit") == "api" and layer("thunder_mlir.errors") == "errors"
