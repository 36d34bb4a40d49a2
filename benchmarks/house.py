"""The shape of the package, measured from its source: how many lines handle settings, which functions are long,
which imports sit inside functions, and whether any import runs in a circle or up a layer. Nothing is run or
imported; the figures are read with `ast` and `tokenize`, so the script measures any checkout, this one or an
older commit's:

    python benchmarks/house.py                                  # this checkout; prints the figures
    python benchmarks/house.py --root /tmp/old --label before   # another checkout (git worktree add /tmp/old REV)
    python benchmarks/house.py --record docs/benchmarks/house.json --label after

With --record the figures are written under --label in that JSON file (the other labels it holds are kept), so
a before and an after of one redesign sit side by side.

Settings code is the lines of the modules whose job is the settings: declaring them (names, types, defaults,
help, checks), renaming older spellings, reading and typing them, and checking them before torch loads, plus the
config classes' own fields and checks; of a module with another job too, its settings parts (SETTINGS_PARTS). The modules are named below for each layout the package has had; a line
of code is a line with a token that is neither a string, a comment nor whitespace (so help prose and docstrings
are in the raw lines only).
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import platform
import subprocess
import sys
import time
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The settings modules of each layout, whichever the checkout has.
SETTINGS_MODULES = (
    "settings.py",  # the vocabulary train, eval and compare share (one file until issue 56)
    "settings/declarations.py",  # (issue 56) the vocabulary split by job: a setting's declaration and checks,
    "settings/data.py",  # the shared data and prompt settings,
    "settings/aliases.py",  # other spellings,
    "settings/reading.py",  # reading files and --set values, typing them,
    "settings/errors.py",  # and their one-line refusal
    "training/settings.py",  # (before the redesign) schema, type table, checks, and the run's data
    "training/fields.py",  # (before) TRL's fields classified
    "training/schema.py",  # (after) every setting declared once
    "training/trl_fields.py",  # (after) TRL's fields: type and treatment, one table
    "training/checks.py",  # (after) reading, typing and checking settings before torch
    "training/config.py",  # PACSConfig: the PACS fields over GRPOConfig, the checks that need TRL
    "integrations/verl/options.py",  # (issue 49) the verl plug-in's PACS fields, declared once
    "algorithms/options.py",  # (issue 56) the losses' options, declared once as plain data
)
# The settings parts of modules with another job too (counted by their top-level definitions): PPO's config
# class; the command line's argument rewriting and data options (the rest of command.py is its error plumbing);
# the libraries a setting needs and an output folder's check (in settings.py until issue 56).
SETTINGS_PARTS = {
    "training/ppo.py": ("PPOConfig",),
    "command.py": (
        "Command", "settings_as_options", "_BOOL_TEXT", "data_option", "declared_option", "rewrite_args",
        "_old_option", "_option_value",
    ),
    "preflight.py": (
        "TRACKERS", "_installed", "tracker_names", "Missing", "missing_requirements", "missing_packages",
        "install_line",
    ),
    "run_folder.py": ("output_dir_problem",),
    # eval's settings: EvalConfig and its checks; the command's reading of --set and its options' help
    "evaluation/runner.py": (
        "EvalConfig", "_grader", "_KS", "LOCKED_SETTINGS", "DTYPES", "BACKENDS", "VLLM_ARGUMENT_OPTIONS",
    ),
    "evaluation/cli.py": ("_option", "read_sets", "EVAL_FIELDS", "SET_KEYS", "TASK_KEYS", "DEFAULTS", "OWN"),
    # the verl plug-in's settings: its config class and their checks before Ray starts
    "integrations/verl/core.py": ("PACSPolicyLossConfig", "_pacs_options"),
    "integrations/verl/guard.py": ("_pacs_option_problems",),
}  # fmt: skip

# Imports that may sit inside a function: heavy or optional libraries, loaded where they are needed.
HEAVY = {
    "torch", "transformers", "trl", "vllm", "datasets", "matplotlib", "scipy", "rich", "math_verify", "sympy",
    "latex2sympy2_extended", "reasoning_gym", "deepspeed", "peft", "accelerate", "huggingface_hub", "tokenizers",
    "pyarrow", "verl", "ray", "safetensors", "numpy", "gguf", "omegaconf", "hydra",
}  # fmt: skip
LOWER = (
    "algorithms",
    "data",
    "device",
    "lazy",
    "models",
    "progress",
    "rewards",
    "run_folder",
    "sampling",
    "settings",
)
UPPER = ("training", "evaluation", "compare", "cli", "integrations")


def code_lines(text: str) -> int:
    """Lines holding a token other than a string, a comment or layout."""
    skip = {
        tokenize.STRING,
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
    }
    skip |= {
        getattr(tokenize, n)
        for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
        if hasattr(tokenize, n)
    }
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in skip and tok.type != tokenize.ENDMARKER:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines)


def _defined_name(node: ast.AST) -> str | None:
    """The name a top-level statement defines (a def, a class, a single assignment)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
    return target.id if isinstance(target, ast.Name) else None


def settings_code(package: Path) -> dict:
    """Raw and code lines of the settings modules this checkout has."""
    files = {}
    for rel in SETTINGS_MODULES:
        path = package / rel
        if path.is_file():
            text = path.read_text()
            files[rel] = {"lines": len(text.splitlines()), "code_lines": code_lines(text)}
    for rel, names in SETTINGS_PARTS.items():
        path = package / rel
        if not path.is_file():
            continue
        text = path.read_text()
        lines = text.splitlines()
        found = [n for n in ast.parse(text).body if _defined_name(n) in names]
        part = "\n\n".join("\n".join(lines[n.lineno - 1 : n.end_lineno]) for n in found)
        key = f"{rel}: {', '.join(_defined_name(n) for n in found)}"
        files[key] = {
            "lines": sum(n.end_lineno - n.lineno + 1 for n in found),
            "code_lines": code_lines(part),
        }
    return {
        "lines": sum(f["lines"] for f in files.values()),
        "code_lines": sum(f["code_lines"] for f in files.values()),
        "files": files,
    }


def _is_option_list(fn: ast.FunctionDef) -> bool:
    """A typer command: its parameters' defaults are typer.Option(...) / typer.Argument(...) declarations."""
    defaults = [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]
    calls = [d for d in defaults if isinstance(d, ast.Call)]
    return bool(calls) and len(calls) >= len(defaults) // 2


def function_length(fn: ast.FunctionDef) -> int:
    """Lines from the def to the end; for a typer command, from its body's first line (its option list is a
    declaration)."""
    start = fn.body[0].lineno if _is_option_list(fn) else fn.lineno
    return fn.end_lineno - start + 1


def module_name(package: Path, path: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(package: Path, path: Path, node: ast.AST) -> list[str]:
    """The modules an import statement names (``from a import b``: a, and a.b where b is a module), relative
    imports resolved."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        here = module_name(package, path).split(".")
        here = here if path.name == "__init__.py" else here[:-1]
        base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
    subs = [f"{base}.{a.name}" for a in node.names]
    lazy = _lazy_names(package, base)  # a package face that loads its names on first use
    subs = [lazy.get(s.rsplit(".", 1)[1], s) for s in subs]
    return [base, *(s for s in subs if (package.parent / s.replace(".", "/")).with_suffix(".py").is_file())]


def _lazy_names(package: Path, module: str) -> dict[str, str]:
    """name -> module, for a package whose __init__ hands its names on lazily (an ``_EXPORTS`` table)."""
    init = package.parent / module.replace(".", "/") / "__init__.py"
    if not init.is_file():
        return {}
    for node in ast.parse(init.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets) and isinstance(
            node.value, ast.Dict
        ):
            pairs = zip(node.value.keys, node.value.values, strict=True)
            return {
                k.value: (v.value if v.value.startswith("pacs_rl.") else f"{module}.{v.value}")
                for k, v in pairs
            }
    return {}


def _local_imports(package: Path) -> dict[str, set[str]]:
    """module -> the modules it imports at its top level (what loads when it loads)."""
    return {
        module_name(package, path): {
            n for node in ast.parse(path.read_text()).body for n in imported(package, path, node)
        }
        for path in package.rglob("*.py")
    }


def heavy_modules(package: Path) -> set[str]:
    """The pacs_rl modules that load a heavy library when they load (directly or through another)."""
    imports = _local_imports(package)
    heavy = {m for m, names in imports.items() if any(n.split(".")[0] in HEAVY for n in names)}
    changed = True
    while changed:
        changed = False
        for module, names in imports.items():
            if module not in heavy and any(n in heavy for n in names):
                heavy.add(module)
                changed = True
    return heavy


def inner_imports(package: Path) -> dict:
    """Imports inside functions: how many, and those of light modules (neither heavy nor optional)."""
    heavy = heavy_modules(package)
    total, light = 0, []
    for path in sorted(package.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                total += 1
                names = imported(package, path, node)
                if any(n.split(".")[0] in HEAVY or n in heavy for n in names):
                    continue  # a heavy or optional library, or a module that loads one
                # light: a stdlib module, or a pacs_rl module that loads nothing heavy (nor does what it names)
                targets = [n for n in names if n != "pacs_rl"]
                if targets:
                    light.append(f"{path.relative_to(package.parent)}:{fn.name}: {', '.join(targets)}")
    return {"count": total, "light": len(light), "light_imports": light}


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> the pacs_rl modules it imports anywhere in it."""
    graph = {}
    for path in package.rglob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").startswith("pacs_rl")
            ):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    is_mod = (package.parent / sub.replace(".", "/")).with_suffix(".py").is_file()
                    found.add(sub if is_mod else node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("pacs_rl"))
        graph[module_name(package, path)] = found
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that reach each other through imports (a module reaching itself back counts)."""
    reach = {m: set() for m in graph}
    for start in graph:
        todo = list(graph[start] & graph.keys())
        while todo:
            m = todo.pop()
            if m not in reach[start]:
                reach[start].add(m)
                todo += list(graph[m] & graph.keys())
    groups = {frozenset({m} | {o for o in reach[m] if m in reach[o]}) for m in graph if m in reach[m]}
    return sorted(sorted(g) for g in groups)


def upward(graph: dict[str, set[str]]) -> list[str]:
    def layer(m: str) -> str:
        parts = m.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    beside = {"evaluation": ("training", "compare")}
    return sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        for t in targets
        if (layer(m) in LOWER and layer(t) in UPPER) or layer(t) in beside.get(layer(m), ())
    )


def measure(root: Path) -> dict:
    package = root / "src" / "pacs_rl"
    files = sorted(package.rglob("*.py"))
    lines = {str(p.relative_to(package)): len(p.read_text().splitlines()) for p in files}
    long = []
    for path in files:
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and function_length(fn) > 60:
                long.append(
                    {"function": f"{path.relative_to(package)}:{fn.name}", "lines": function_length(fn)}
                )
    graph = import_graph(package)
    training = sum(n for f, n in lines.items() if f.startswith("training/"))
    total = sum(lines.values())
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "src"], capture_output=True, text=True
    )
    return {
        "commit": commit.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else ""),
        "source_lines": total,
        "training_lines": training,
        "training_share": round(training / total, 3),
        "largest_files": sorted(
            ({"file": f, "lines": n} for f, n in lines.items()), key=lambda r: -r["lines"]
        )[:5],
        "settings_code": settings_code(package),
        "functions_over_60_lines": sorted(long, key=lambda r: -r["lines"]),
        "imports_inside_functions": inner_imports(package),
        "import_circles": circles(graph),
        "upward_imports": upward(graph),
    }


def summary(m: dict) -> list[str]:
    s = m["settings_code"]
    inner = m["imports_inside_functions"]
    return [
        f"commit {m['commit']}: {m['source_lines']} source lines, training/ {m['training_lines']} "
        f"({m['training_share']:.0%})",
        f"settings code: {s['lines']} lines ({s['code_lines']} of code) in {len(s['files'])} modules",
        f"functions over 60 lines: {len(m['functions_over_60_lines'])}"
        + "".join(f"\n  {r['function']} {r['lines']}" for r in m["functions_over_60_lines"]),
        f"imports inside functions: {inner['count']}, {inner['light']} of light modules"
        + "".join(f"\n  {x}" for x in inner["light_imports"]),
        f"import circles: {m['import_circles'] or 'none'}",
        f"upward imports: {m['upward_imports'] or 'none'}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=REPO, help="the checkout to measure (default: this one)")
    ap.add_argument("--label", default="now", help="the name of these figures in the record")
    ap.add_argument("--record", type=Path, help="a JSON file to write the figures into, under --label")
    a = ap.parse_args()
    figures = measure(a.root.resolve())
    for line in summary(figures):
        print(line)
    if a.record:
        record = (
            json.loads(a.record.read_text()) if a.record.is_file() else {"benchmark": "benchmarks/house.py"}
        )
        record[a.label] = {
            "date": time.strftime("%Y-%m-%d"),
            "command": f"python benchmarks/house.py --record {a.record} --label {a.label}"
            + (f" --root <checkout of {figures['commit'].split()[0]}>" if a.root.resolve() != REPO else ""),
            "python": platform.python_version(),
            **figures,
        }
        a.record.write_text(json.dumps(record, indent=1) + "\n")
        print(f"recorded in {a.record} as {a.label!r}")


if __name__ == "__main__":
    sys.exit(main())
