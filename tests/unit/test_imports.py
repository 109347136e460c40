"""Imports flow one way: the module graph of txcalc/ and reference/ (every import statement,
module-level or inside a function, relative ones resolved) has no cycle, and nothing outside
txcalc/cli/ imports the CLI.

The graph is read from the source with ``ast`` (nothing is imported), so an import that runs
only on some code path counts as much as one at the top of the file."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("txcalc", "reference")
CLI = "txcalc.cli"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted name -> file of every module under ``root/<package>``."""
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def imported_names(name: str, path: Path, known=()) -> set[str]:
    """Every module name an import statement of ``name`` refers to, relative ones resolved
    against its package. ``from P import x`` refers to P.x when that is a module of
    ``known``, else to P (x is an attribute: P's __init__ or module runs). Imports under
    ``if TYPE_CHECKING:`` never run (annotations only) and are left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):  # drop the bodies of `if TYPE_CHECKING:` blocks
        if isinstance(node, ast.If) and (
                getattr(node.test, "id", None) == "TYPE_CHECKING"
                or getattr(node.test, "attr", None) == "TYPE_CHECKING"):
            node.body = []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                if not base or not base[0]:
                    raise ValueError(f"{name}: relative import beyond the top-level package")
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module
            for a in node.names:
                out.add(f"{src}.{a.name}" if f"{src}.{a.name}" in known else src)
    return out


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of the same tree it imports (third-party ones dropped). Importing
    ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those implicit edges are left out
    (every module would otherwise sit in a cycle with its package's __init__), the named ones
    kept: ``from .. import load`` in a.b.c is an edge to ``a``."""
    mods = modules(root, packages)
    return {m: {t for t in imported_names(m, p, mods) if t in mods and t != m}
            for m, p in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with a cycle (more than one module, or a module
    importing itself), by Tarjan's algorithm (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1 or v in graph.get(v, ()):
                        out.append(sorted(comp))
    return out


# --- the detector can fail -------------------------------------------------------------------
@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"a"}}, [["a"]]),
    ({"a": {"b", "d"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}},
     [["a", "b"], ["c", "d", "e"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": {"b"}, "x": {"a", "d"}}, [["b", "c", "d"]]),
])
def test_cycle_detector_on_small_graphs(graph, expected):
    assert sorted(cycles(graph)) == expected


def test_walker_sees_relative_and_function_level_imports(tmp_path):
    """A synthetic package whose only cycle runs through a relative import inside a function
    (``from ..top import f`` in pkg/sub/low.py) and a ``from . import`` of a sibling."""
    files = {
        "pkg/__init__.py": "",
        "pkg/top.py": "from .sub import low\n\ndef f():\n    return low\n",
        "pkg/sub/__init__.py": "from . import low  # noqa\n",
        "pkg/sub/low.py": "import json\n\ndef g():\n    from ..top import f\n    return f\n",
        "pkg/leaf.py": "from pkg.sub.low import g\nimport pkg.top\nfrom . import VERSION\n",
        "pkg/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                        "    from .top import f\nelse:\n    from .leaf import g\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.top"] == {"pkg.sub.low"}
    assert graph["pkg.sub"] == {"pkg.sub.low"}
    assert graph["pkg.sub.low"] == {"pkg.top"}  # json is not ours
    assert graph["pkg.leaf"] == {"pkg", "pkg.sub.low", "pkg.top"}
    assert graph["pkg.typed"] == {"pkg.leaf"}  # the TYPE_CHECKING import never runs
    assert cycles(graph) == [["pkg.sub.low", "pkg.top"]]
    (tmp_path / "pkg/sub/low.py").write_text("def g():\n    return 1\n")
    assert cycles(import_graph(tmp_path, ("pkg",))) == []


# --- the project -----------------------------------------------------------------------------
def test_the_project_has_no_import_cycle():
    graph = import_graph(ROOT)
    assert {"txcalc.train.planner", "txcalc.report.model", "reference.validate"} <= set(graph)
    assert "txcalc.report.planning" in graph["txcalc.report.answer"]  # the walker sees them
    assert cycles(graph) == []


#: ``python -m txcalc``: the entry point above the CLI (no module imports it)
ENTRY_POINTS = {"txcalc.__main__"}


def test_nothing_outside_the_cli_imports_it():
    graph = import_graph(ROOT)
    upward = sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                    if (t == CLI or t.startswith(CLI + ".")) and not (
                        m == CLI or m.startswith(CLI + ".") or m in ENTRY_POINTS))
    assert upward == []
    assert not any(e in ts for e in ENTRY_POINTS for ts in graph.values())


def test_the_example_regenerator_is_outside_the_package():
    assert not (ROOT / "txcalc" / "report" / "examples.py").exists()
    assert "txcalc.cli" in imported_names("regenerate", ROOT / "reports" / "regenerate.py",
                                          modules(ROOT))


# --- the layers ------------------------------------------------------------------------------
#: txcalc's packages by layer, bottom first: a module imports only its own layer and those
#: below (model -> engine -> parallel -> train / serve -> answers -> cli / report / web; the
#: floors under all of them). train and serve share a layer and never import each other.
LAYERS = {"floor": 0, "model": 1, "engine": 2, "parallel": 3, "train": 4, "serve": 4,
          "answers": 5, "cli": 6, "report": 6, "web": 6, "emit": 6}
FLOORS = {"errors", "units", "inputs", "safeio", "atomic"}


def layer_of(module: str) -> str | None:
    """The layer of a txcalc module (None: the package's own __init__ and __main__, and
    everything outside txcalc/)."""
    parts = module.split(".")
    if parts[0] != "txcalc" or len(parts) == 1 or parts[1] == "__main__":
        return None
    return "floor" if parts[1] in FLOORS else parts[1]


#: the layers under answers/: they take a ModelConfig, never a name, so none imports the
#: ``txcalc`` package itself (its ``load``, the name loader, runs once, at the top)
BELOW_THE_LOADER = ("model", "engine", "parallel", "train", "serve")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for m, targets in graph.items():
        lm = layer_of(m)
        if lm in BELOW_THE_LOADER and "txcalc" in targets:
            out.append(f"{m} ({lm}) -> txcalc (the name loader)")
        for t in targets:
            lt = layer_of(t)
            if lm is None or lt is None:
                continue
            if LAYERS[lt] > LAYERS[lm] or (LAYERS[lt] == LAYERS[lm] and lt != lm
                                           and lm in ("train", "serve")):
                out.append(f"{m} ({lm}) -> {t} ({lt})")
    return sorted(out)


def test_every_txcalc_module_belongs_to_a_layer():
    graph = import_graph(ROOT)
    unknown = sorted(m for m in graph if layer_of(m) not in (None, *LAYERS))
    assert unknown == []
    assert not list((ROOT / "txcalc").glob("*.py")) or {
        p.stem for p in (ROOT / "txcalc").glob("*.py")} <= FLOORS | {"__init__", "__main__"}


def test_imports_flow_down_the_layers():
    assert upward_imports(import_graph(ROOT)) == []


def test_the_layer_check_can_fail():
    graph = {"txcalc.engine.memory": {"txcalc.train.planner"},
             "txcalc.serve.kv": {"txcalc.train.evaluate"},
             "txcalc.train.fit": {"txcalc.serve.sim", "txcalc.engine.memory"},
             "txcalc.model.hf": {"txcalc.errors"},
             "txcalc.serve.plan": {"txcalc", "txcalc.inputs"},
             "txcalc.cli.plan_cmd": {"txcalc", "txcalc.serve.plan"}}
    assert upward_imports(graph) == [
        "txcalc.engine.memory (engine) -> txcalc.train.planner (train)",
        "txcalc.serve.kv (serve) -> txcalc.train.evaluate (train)",
        "txcalc.serve.plan (serve) -> txcalc (the name loader)",
        "txcalc.train.fit (train) -> txcalc.serve.sim (serve)"]
