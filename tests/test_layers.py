"""The package's import structure, read from the source: no module imports itself back through others (no import
circle, whether the import sits at the top of a file or inside a function), and the lower layers never reach up
into the ones that use them. A new import that breaks either fails here, naming the modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "pacs_rl"

# What the lower layers may not import: models, sampling, data, rewards, algorithms, the shared settings, the
# device choice, the run folder's layout, the checks before torch (preflight), the lazy package face, the progress
# bars and the stop request are used by training, evaluation and compare, never the other way round.
LOWER = (
    "algorithms",
    "data",
    "device",
    "lazy",
    "models",
    "preflight",
    "progress",
    "rewards",
    "run_folder",
    "sampling",
    "settings",
    "stopping",
)
UPPER = ("training", "evaluation", "compare", "cli", "integrations")
# evaluation sits beside training: it may use the lower layers, not training (nor compare, above both)
BESIDE = {"evaluation": ("training", "compare")}
# Known exceptions: none (a new one is named here with why, and the last assert below fails once it is gone)
KNOWN: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = SRC / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: Path) -> set[str]:
    """The pacs_rl modules ``path`` imports anywhere in it: ``from a.b import c`` is a.b.c where c is a module, else
    a.b."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("pacs_rl"):
            subs = [f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}")]
            found.update(subs if len(subs) == len(node.names) else [*subs, node.module])
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("pacs_rl"))
    return found


GRAPH = {module_name(p): imports(p) - {module_name(p)} for p in PACKAGE.rglob("*.py")}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root] & graph.keys())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child] & graph.keys()))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_reader_sees_the_imports_it_must():
    assert "pacs_rl.training.run" in GRAPH["pacs_rl.training.cli"]  # a top-of-file import
    assert "pacs_rl.training.run" in GRAPH["pacs_rl.compare.job"]  # one inside a function
    assert "pacs_rl.data.procedural" in GRAPH["pacs_rl.data.loaders"]  # `from pacs_rl.data import procedural`
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    assert circles(GRAPH) == []


def test_lower_layers_never_import_the_upper_ones():
    upward = sorted(
        (module, target)
        for module, targets in GRAPH.items()
        for target in targets
        if (layer(module) in LOWER and layer(target) in UPPER)
        or layer(target) in BESIDE.get(layer(module), ())
    )
    assert [pair for pair in upward if pair not in KNOWN] == []
    assert set(upward) == KNOWN, "a known exception is gone: take it out of KNOWN"


def test_the_lazy_package_faces_load_nothing_heavy_and_hand_on_every_name():
    """pacs_rl.training, .evaluation, .rewards, .algorithms (and .compare) are lazy faces (pacs_rl.lazy.lazy_face):
    importing one, or the torch-free modules of the algorithms (the losses' options, read by every command before
    torch loads; pass@k), loads no torch, TRL or math-verify (checked in a fresh process), and every name of its table
    resolves to the object its module defines."""
    import importlib
    import subprocess
    import sys

    faces = ["pacs_rl.training", "pacs_rl.evaluation", "pacs_rl.rewards", "pacs_rl.algorithms", "pacs_rl.compare"]
    light = ["pacs_rl.algorithms.options", "pacs_rl.algorithms.passk", "pacs_rl.training.schema"]
    script = "import sys\n" + "".join(f"import {f}\n" for f in [*faces, *light])
    script += "print([m for m in ('torch', 'trl', 'math_verify', 'sympy') if m in sys.modules])\n"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={"PYTHONPATH": str(SRC)}
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    for face in faces:
        package = importlib.import_module(face)
        for name in package.__all__:
            value = getattr(package, name)
            module = package._EXPORTS[name]
            module = module if module.startswith("pacs_rl.") else f"{face}.{module}"
            assert value is getattr(importlib.import_module(module), name), (face, name)
    with pytest.raises(AttributeError, match="has no attribute 'nosuch'"):
        _ = importlib.import_module("pacs_rl.training").nosuch
