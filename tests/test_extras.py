"""The extras install what TRL supports, and the install lines the docs print use them.

TRL declares the vLLM and DeepSpeed releases it supports in its own extras (TRL 1.16: vllm>=0.22,<=0.31) and only
warns on import outside them; an extra of this project wider than that let pip pick vLLM 0.33 beside TRL 1.16.
These tests read the installed TRL's metadata (no network); .ci/install_lines.sh resolves the printed lines with
pip's dry run, and its checks of a resolution are tested here on reports written by hand."""

from __future__ import annotations

import importlib.util
import re
import sys
from importlib.metadata import requires, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _ci_module():
    spec = importlib.util.spec_from_file_location("install_lines", REPO / ".ci" / "install_lines.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["install_lines"] = module
    spec.loader.exec_module(module)
    return module


install_lines = _ci_module()


def trl_range(engine: str) -> SpecifierSet:
    """The range of ``engine`` (vllm, deepspeed) the installed TRL declares in its extra of that name."""
    for text in requires("trl") or []:
        req = Requirement(text)
        if canonicalize_name(req.name) == engine and req.marker and req.marker.evaluate({"extra": engine}):
            return req.specifier
    pytest.fail(f"the installed TRL {version('trl')} has no {engine} extra: the extras must be rethought")


def candidates(*specs: SpecifierSet) -> list[Version]:
    """Versions that probe the specifiers: every release 0.0 to 2.9 (patch 0 to 9) and each bound's neighbours."""
    out = {Version(f"{a}.{b}.{c}") for a in range(3) for b in range(70) for c in range(10)}
    for spec in specs:
        for s in spec:
            v = Version(s.version)
            out |= {
                v,
                Version(f"{v.major}.{v.minor}.{v.micro + 1}"),
                Version(f"{v.major}.{max(v.minor - 1, 0)}"),
            }
    return sorted(out)


def leaks(extra: list[str], engine: str, trl: SpecifierSet) -> list[str]:
    """Versions of ``engine`` the extra's requirements admit and TRL's range does not ([] when none does); an extra
    that installs no ``engine`` at all is a leak too."""
    reqs = [Requirement(r) for r in extra]
    direct = [r.specifier for r in reqs if canonicalize_name(r.name) == engine]
    via_trl = any(canonicalize_name(r.name) == "trl" and engine in r.extras for r in reqs)
    if not direct and not via_trl:
        return ["no requirement installs it"]
    ours = SpecifierSet(",".join(str(s) for s in direct if str(s))) & (trl if via_trl else SpecifierSet())
    return [str(v) for v in candidates(ours, trl) if ours.contains(v, prereleases=True) and v not in trl]


@pytest.mark.parametrize("engine", ["vllm", "deepspeed"])
def test_the_extra_stays_inside_the_range_trl_declares(engine):
    trl = trl_range(engine)
    extra = PYPROJECT["optional-dependencies"][engine]
    found = leaks(extra, engine, trl)
    assert not found, (
        f"the {engine} extra {extra} admits {engine} {', '.join(found[:5])}, outside TRL {version('trl')}'s "
        f"{engine}{trl}: depend on trl[{engine}] (or narrow the bound)"
    )


def test_the_check_catches_a_bound_wider_than_trls():
    trl = SpecifierSet(">=0.22,<=0.31")
    assert "0.33.0" in leaks(["vllm>=0.10"], "vllm", trl)  # the extra before this fix
    assert "0.10.0" in leaks(["vllm>=0.10"], "vllm", trl)
    assert leaks(["trl[vllm]>=1.16,<1.17"], "vllm", trl) == []
    assert leaks(["trl[vllm]>=1.16", "vllm>=0.10"], "vllm", trl) == []  # pip takes both: TRL's range wins
    assert leaks(["trl>=1.16"], "vllm", trl) == ["no requirement installs it"]


def test_the_extras_name_the_trl_the_project_depends_on():
    """trl[vllm] in an extra must be the TRL the project pins (whose metadata these tests read)."""
    core = next(Requirement(r) for r in PYPROJECT["dependencies"] if Requirement(r).name == "trl")
    assert version("trl") in core.specifier
    for name, extra in PYPROJECT["optional-dependencies"].items():
        for req in map(Requirement, extra):
            if req.name == "trl":
                assert req.specifier == core.specifier, f"{name}: {req} and the core {core} differ"


# ---------------------------------------------------------------------------------------------------- printed lines
def test_the_printed_install_lines_are_found():
    commands = {line.command for line in install_lines.printed_install_lines()}
    # the README's one-GPU, 8-GPU and verl lines; the docs' torch-first lines
    assert {'pip install -e ".[vllm]"', 'pip install -e ".[vllm,deepspeed]" wandb'} <= commands
    assert 'pip install -e ".[verl]" "verl[vllm]==0.9.1"' in commands
    assert {"pip install torch==2.13.0", "pip install torch==2.11.0"} <= commands


def _bounded_packages() -> dict[str, str]:
    """package -> the project's extra that bounds it (vllm -> vllm, deepspeed -> deepspeed, verl -> verl, ...)."""
    out = {}
    for name, extra in PYPROJECT["optional-dependencies"].items():
        if name == "dev":
            continue
        for req in map(Requirement, extra):
            if req.name == "trl":  # a core dependency; trl[vllm] bounds vllm
                out.update({canonicalize_name(e): name for e in req.extras if e == name})
            else:
                out.setdefault(canonicalize_name(req.name), name)
    return out


def test_every_printed_line_installs_engines_through_the_projects_extras():
    extras = set(PYPROJECT["optional-dependencies"])
    bounded = _bounded_packages()
    assert bounded["vllm"] == "vllm" and bounded["deepspeed"] == "deepspeed"
    lines = install_lines.printed_install_lines()
    wrong = []
    for line in lines:
        if line.command in install_lines.KNOWN or line.placeholder or line.offline:
            continue  # an offline line installs the wheelhouse scripts/wheelhouse.py built from the extras
        named = {
            e for a in line.args for m in re.finditer(r"^\.\[([^\]]*)\]$", a) for e in m.group(1).split(",")
        }
        wrong += [f"{line.where}: extra {e!r} is not in pyproject.toml" for e in named - extras]
        for arg in line.args:
            if arg.startswith("-") or arg == "." or arg.startswith(".["):
                continue
            req = Requirement(arg)
            assert not req.name.startswith("pacs"), f"{line.where}: {arg}: pacs-rl is on no index; use -e ."
            extra = bounded.get(canonicalize_name(req.name))
            if extra and extra not in named:
                wrong.append(f'{line.where}: {arg} without the project\'s {extra} extra (-e ".[{extra}]")')
    assert not wrong, wrong
    printed = {line.command for line in lines}
    gone = [c for c in install_lines.KNOWN if c not in printed]
    assert not gone, f"no longer printed, drop them from KNOWN in .ci/install_lines.py: {gone}"


def test_the_ci_step_runs_the_check_and_keeps_the_readme_command():
    ci = (REPO / ".ci" / "run").read_text()
    assert "bash .ci/install_lines.sh" in ci
    assert "bash scripts/install.sh && python -m pytest" in ci  # README's test command, still


# ---------------------------------------------------------------------------------------------------- the CI's checks
TRL_116 = ("1.16.0", ['vllm<=0.31.0,>=0.22.0; extra == "vllm"', 'deepspeed>=0.18.6; extra == "deepspeed"'])


def _line(command: str, block: str | None = None):
    return install_lines.InstallLine(command, "README.md:1", block)


def test_a_resolution_outside_trls_range_is_a_failure():
    line = _line('pip install -e ".[vllm]"')
    assert install_lines.problems(line, {"trl": TRL_116, "vllm": ("0.31.0", [])}, None) == []
    found = install_lines.problems(line, {"trl": TRL_116, "vllm": ("0.33.0", [])}, None)
    assert (
        len(found) == 1 and "vllm 0.33.0 beside TRL 1.16.0, which supports vllm<=0.31.0,>=0.22.0" in found[0]
    )
    assert install_lines.problems(line, {"trl": TRL_116, "deepspeed": ("0.17.0", [])}, None)
    assert (
        install_lines.problems(line, {"vllm": ("0.33.0", [])}, None) == []
    )  # no TRL in it: nothing to hold to


def test_a_line_that_swaps_the_torch_installed_before_it_is_a_failure():
    line = _line('pip install -e ".[verl]" "verl[vllm]==0.9.1"', block="docs/VERL.md:9")
    resolved = {"trl": TRL_116, "vllm": ("0.24.0", []), "torch": ("2.11.0", [])}
    assert install_lines.problems(line, resolved, "2.11.0") == []
    assert install_lines.problems(line, {**resolved, "torch": ("2.11.0+cpu", [])}, "2.11.0") == []
    found = install_lines.problems(line, resolved, "2.13.0")
    assert len(found) == 1 and "replaces torch 2.13.0" in found[0] and "with torch 2.11.0" in found[0]


def test_lines_are_read_from_code_blocks_and_inline_code(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        'Install: `pip install -e ".[vllm]"` first.\n\n```bash\npip install torch==2.11.0   # first\n'
        'pip install -e ".[verl]" x && bash run.sh\n```\nnot `pip list`\n'
    )
    found = install_lines.printed_install_lines(tmp_path)
    assert [(x.command, x.where, x.block) for x in found] == [
        ('pip install -e ".[vllm]"', "README.md:1", None),
        ("pip install torch==2.11.0", "README.md:4", "README.md:3"),
        ('pip install -e ".[verl]" x', "README.md:5", "README.md:3"),
    ]
