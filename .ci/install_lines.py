"""Every `pip install` line that README.md and docs/*.md print, resolved by pip's dry run from the root of the
clone, and the resolution checked: TRL with the vLLM and DeepSpeed it declares it supports (its own `vllm` and
`deepspeed` extras), and the torch a code block tells users to install first not swapped by its next lines.

    python .ci/install_lines.py            # resolve and check every line (needs the package index)
    python .ci/install_lines.py --list     # only list the lines found (no network)

A line that does not install this project itself (`pip install vllm`) is resolved beside it (`-e .` added): it
would land in an environment that has pacs-rl. Lines with a placeholder (`torch==<the build you want>`) and
offline installs from a wheelhouse (`--no-index`, scripts/wheelhouse.py) are listed and skipped. tests/test_extras.py imports the extraction (no network) and checks that the lines use the
project's extras; this script is the CI step that resolves them (.ci/install_lines.sh), so the next TRL or vLLM
release cannot break an install line of the docs silently.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
# TRL's extras whose package it pins a range of: the package must resolve inside the range TRL declares.
TRL_ENGINES = ("vllm", "deepspeed")
# Printed install lines this check knows break the rule, each with why it is left (the owner of the file that
# prints it is asked to fix it); tests/test_extras.py fails once a line here is no longer printed, so the entry
# goes with the fix.
KNOWN: dict[str, str] = {}

# Printed as lines that do not resolve (docs/VERL.md says why): checked to fail still, so the docs change with them.
UNRESOLVABLE: dict[str, str] = {
    'pip install -e ".[verl]" "verl[vllm,fsdp]==0.9.1"': "verl's fsdp extra pins trl==0.27.0",
}


@dataclass(frozen=True)
class InstallLine:
    command: str  # "pip install -e \".[vllm]\""
    where: str  # "README.md:56"
    block: str | None  # "README.md:104" for a line of a fenced code block (its first line), else None

    @property
    def args(self) -> list[str]:
        return shlex.split(self.command)[2:]

    @property
    def placeholder(self) -> bool:
        return "<" in self.command

    @property
    def offline(self) -> bool:
        """An install from a wheelhouse (scripts/wheelhouse.py builds it): nothing to resolve against an index."""
        return "--no-index" in self.args

    @property
    def installs_project(self) -> bool:
        return any(a == "." or a.startswith(".[") for a in self.args)


def _pip_parts(text: str) -> list[str]:
    """The `pip install ...` commands of one shell line (`&&` and `;` chains split, a trailing comment dropped)."""
    text = re.split(r"\s+#", text, maxsplit=1)[0]
    parts = [p.strip() for p in re.split(r"&&|;", text)]
    return [p for p in parts if p.startswith("pip install ")]


def doc_files(repo: Path = REPO) -> list[Path]:
    """README.md and the docs' pages (not the measurement records under docs/benchmarks/)."""
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def printed_install_lines(repo: Path = REPO) -> list[InstallLine]:
    """Every `pip install` command in the docs' fenced code blocks and inline code, in order (a command printed in
    several places: each place, since a code block's earlier lines matter)."""
    out: list[InstallLine] = []
    for path in doc_files(repo):
        name = str(path.relative_to(repo))
        block_start: int | None = None
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                block_start = None if block_start is not None else number
                continue
            if block_start is not None:
                commands = _pip_parts(line.strip())
            else:
                commands = [c for span in re.findall(r"`([^`]+)`", line) for c in _pip_parts(span.strip())]
            for command in commands:
                block = f"{name}:{block_start}" if block_start is not None else None
                out.append(InstallLine(command, f"{name}:{number}", block))
    return out


def resolve(line: InstallLine) -> dict:
    """pip's dry-run report of ``line`` (with `-e .` added where it does not install this project)."""
    args = line.args if line.installs_project else ["-e", ".", *line.args]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        done = subprocess.run(
            [*command, "--report", str(report), *args], cwd=REPO, capture_output=True, text=True
        )
        if done.returncode != 0:
            errors = [x for x in done.stderr.splitlines() if x.startswith("ERROR")]
            raise RuntimeError("; ".join(errors) or done.stderr.strip()[-500:])
        return json.loads(report.read_text())


def resolved_versions(report: dict) -> dict[str, tuple[str, list[str]]]:
    """{name: (version, requires_dist)} of what a pip report installs."""
    out = {}
    for item in report["install"]:
        meta = item["metadata"]
        out[canonicalize_name(meta["name"])] = (meta["version"], meta.get("requires_dist") or [])
    return out


def _public(version: str) -> str:
    return Version(version).public  # 2.13.0+cpu -> 2.13.0


def problems(
    line: InstallLine, versions: dict[str, tuple[str, list[str]]], torch_first: str | None
) -> list[str]:
    """What is wrong with a resolution: an engine outside the range TRL declares, the torch installed first swapped."""
    out = []
    if "trl" in versions:
        trl_version, trl_requires = versions["trl"]
        for engine in TRL_ENGINES:
            if engine not in versions:
                continue
            for text in trl_requires:
                req = Requirement(text)
                if canonicalize_name(req.name) != engine or req.marker is None:
                    continue
                if not req.marker.evaluate({"extra": engine}):
                    continue
                if not req.specifier.contains(versions[engine][0], prereleases=True):
                    out.append(
                        f"{line.command} ({line.where}) resolves to {engine} {versions[engine][0]} beside TRL "
                        f"{trl_version}, which supports {engine}{req.specifier} only; keep the line on the project's "
                        f"extras (.[{engine}]) and the extra on TRL's range"
                    )
    if torch_first and "torch" in versions and _public(versions["torch"][0]) != _public(torch_first):
        out.append(
            f"{line.command} ({line.where}) replaces torch {torch_first}, which the line before it in the same code "
            f"block installs, with torch {versions['torch'][0]}: print the torch this line ends with"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the lines found, resolve nothing")
    args = parser.parse_args(argv)
    lines = printed_install_lines()
    failed: list[str] = []
    torch_first: dict[str, str] = {}  # code block -> the torch its earlier line pins
    cache: dict[str, dict | RuntimeError] = {}  # command -> its resolution (one pip run per command)
    for line in lines:
        if args.list:
            print(f"{line.where}: {line.command}")
            continue
        if line.command in KNOWN:
            print(f"known, not checked: {line.command} ({line.where}): {KNOWN[line.command]}")
            continue
        if line.placeholder or line.offline:
            why = "a placeholder" if line.placeholder else "an offline install from a wheelhouse"
            print(f"skipped ({why}): {line.command} ({line.where})")
            continue
        if line.command not in cache:
            try:
                cache[line.command] = resolved_versions(resolve(line))
            except RuntimeError as e:
                cache[line.command] = e
        if line.command in UNRESOLVABLE:
            if isinstance(cache[line.command], RuntimeError):
                print(f"ok (does not resolve, as the docs say: {UNRESOLVABLE[line.command]}) {line.command}")
            else:
                failed.append(
                    f"{line.command} ({line.where}) resolves now: the docs say it does not; update them"
                )
                print(f"FAIL {failed[-1]}")
            continue
        if isinstance(cache[line.command], RuntimeError):
            failed.append(f"{line.command} ({line.where}) does not resolve: {cache[line.command]}")
            print(f"FAIL {failed[-1]}")
            continue
        versions = cache[line.command]
        found = problems(line, versions, torch_first.get(line.block or ""))
        failed += found
        shown = ", ".join(
            f"{n} {versions[n][0]}" for n in ("trl", "vllm", "deepspeed", "torch") if n in versions
        )
        print(f"{'FAIL' if found else 'ok'} {line.command} ({line.where}): {shown}")
        for problem in found:
            print(f"  {problem}")
        pinned = [a.split("==", 1)[1] for a in line.args if a.startswith("torch==")]
        if line.block and pinned:
            torch_first[line.block] = pinned[0]
    if failed:
        print(f"{len(failed)} install line(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
