"""The measurement record stays whole: docs/benchmarks/README.md indexes every data file of the folder, every
file it names exists, its date and cpu_capability columns say what the files record, no dated copy creeps back,
and the relative links of the user docs point at files and headings that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "docs" / "benchmarks"
INDEX = RECORD / "README.md"
DATA_SUFFIXES = (".json", ".jsonl")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
LINK_TEXT = re.compile(r"\[([^\]]*)\]\([^)\s]+\)")
COLUMNS = ("what (note)", "figure", "command", "date", "`cpu_capability`", "file")


def index_rows() -> list[dict[str, str]]:
    """The rows of the index table, each as {column: cell}."""
    section = INDEX.read_text().split("\n## Index\n", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = tuple(cell.strip() for cell in lines[0].strip("|").split("|"))
    assert header == COLUMNS, header
    rows = []
    for line in lines[2:]:  # after the header and its |---| line
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == len(COLUMNS), f"index row with {len(cells)} cells: {line}"
        rows.append(dict(zip(COLUMNS, cells, strict=True)))
    return rows


def row_file(row: dict[str, str]) -> Path:
    targets = LINK.findall(row["file"])
    assert len(targets) == 1, f"the file column must link one file: {row['file']}"
    return (RECORD / targets[0]).resolve()


def test_every_data_file_has_a_row_and_every_named_file_exists():
    rows = index_rows()
    named = {row_file(row) for row in rows}
    data = {p.resolve() for p in RECORD.iterdir() if p.suffix in DATA_SUFFIXES}
    assert data, "no data files found: is the record where this test looks?"
    assert not data - named, f"data files without an index row: {sorted(p.name for p in data - named)}"
    links = {(RECORD / t.split("#")[0]).resolve() for t in LINK.findall(INDEX.read_text()) if "://" not in t}
    missing = sorted(str(p) for p in links | named if not p.exists())
    assert not missing, f"the index names files that do not exist: {missing}"
    notes = {p.resolve() for p in RECORD.glob("*.md") if p != INDEX}
    assert not notes - links, f"notes the index does not link: {sorted(p.name for p in notes - links)}"


def test_capability_and_date_columns_say_what_the_files_record():
    row_dates: dict[Path, list[str]] = {}
    for row in index_rows():
        path = row_file(row)
        if path.suffix != ".json":
            continue
        record = json.loads(path.read_text())
        recorded, cell = record.get("cpu_capability"), row["`cpu_capability`"]
        if recorded is None:
            assert cell.startswith("not recorded"), f"{path.name} has no cpu_capability; the index: {cell!r}"
        else:  # the level and the bf16 note, without the remark in brackets
            assert cell == recorded.split(" (")[0], f"{path.name} records {recorded!r}; the index: {cell!r}"
        row_dates.setdefault(path, []).append(row["date"])
    for path, cells in row_dates.items():  # a file with several rows: one of them carries its date
        record = json.loads(path.read_text())
        date = record.get("date") or record.get("date_utc", "")[:10]
        assert not date or any(date in cell for cell in cells), (
            f"{path.name} is dated {date}; its rows: {cells}"
        )


def test_one_current_file_per_benchmark():
    dated = [p.name for p in RECORD.iterdir() if re.search(r"\d{4}-\d{2}-\d{2}", p.name)]
    assert not dated, f"dated copies belong in git history, not beside the current file: {dated}"
    loose = [p.name for p in (REPO / "docs").glob("*.json*")]
    assert not loose, f"measurements belong in docs/benchmarks/: {loose}"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        text = LINK_TEXT.sub(r"\1", line.lstrip("#").strip()).lower()  # a link in a heading: its text
        slug = "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *RECORD.glob("*.md")])


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_at_files_and_headings_that_exist(doc: Path):
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)  # links inside code blocks are not links
    broken = []
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(target)
            continue
        if anchor and path.suffix == ".md" and anchor not in _anchors(path.read_text()):
            broken.append(target)
    assert not broken, f"{doc.relative_to(REPO)}: broken links {broken}"


def test_every_run_key_has_a_row_in_the_training_guide():
    import dataclasses

    from pacs_rl.training.schema import RunSettings

    guide = (REPO / "docs" / "TRAINING.md").read_text()
    rows = {
        name
        for line in guide.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`(\w+)`", line.split("|")[1])
    }
    missing = [f.name for f in dataclasses.fields(RunSettings) if f.name not in rows]
    assert not missing, f"docs/TRAINING.md's run-key table lacks {missing}"


def _setting_rows(guide: str):
    """(the names in the first cell, the default cell) of every row of the guide's setting tables (those whose
    header starts `| key | default` or `| field | default`)."""
    in_table = False
    for line in guide.splitlines():
        if re.match(r"\| (key|field) \| default \|", line):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            yield re.findall(r"`(\w+)`", cells[0]), cells[0], cells[1]


def _as_text(value) -> str:
    return (
        {None: "None", True: "true", False: "false"}.get(value, str(value))
        if not isinstance(value, float)
        else f"{value:g}"
    )


def test_the_training_guide_agrees_with_the_declarations():
    """Every setting named in docs/TRAINING.md's tables exists, and where a row gives one of this project's own
    settings alone, its default is the declared one (training/schema.py): the guide cannot drift from the code."""
    from pacs_rl.training.schema import CONFIG_FIELDS, CRITIC_FIELDS, RUN_FIELDS, known_keys

    declared = {**RUN_FIELDS, **CONFIG_FIELDS, **CRITIC_FIELDS}
    guide = (REPO / "docs" / "TRAINING.md").read_text()
    unknown, wrong = [], []
    for names, first, default in _setting_rows(guide):
        unknown += [n for n in names if n not in known_keys()]
        if len(names) != 1 or "(TRL)" in first or names[0] not in declared:
            continue
        shown = default.split(" (")[0].strip("`").replace("−", "-")
        value = declared[names[0]].default
        try:
            same = float(shown) == float(value)
        except (TypeError, ValueError):
            same = shown == _as_text(value) or " " in shown  # prose ("the paper's") is not a value
        if not same:
            wrong.append(f"{names[0]}: the guide says {default!r}, the declaration {value!r}")
    assert not unknown, f"docs/TRAINING.md names settings that do not exist: {unknown}"
    assert not wrong, "docs/TRAINING.md's defaults differ from training/schema.py: " + "; ".join(wrong)


def _table_defaults(guide: str, header: str) -> dict[str, str]:
    """name -> default cell of the rows of ``guide``'s tables whose header starts with ``header``."""
    out, in_table = {}, False
    for line in guide.splitlines():
        if line.startswith(header):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[cells[0].strip("`")] = cells[1]
    return out


def _says(shown: str, value) -> bool:
    """Whether a guide's default ``shown`` (as written, without backquotes) is the declared ``value``."""
    if isinstance(value, bool) or value is None:
        return shown == {None: "None", True: "true", False: "false"}[value]
    try:
        return float(shown) == float(value)
    except (TypeError, ValueError):
        return shown == str(value)


def test_the_evaluation_guide_agrees_with_the_declarations():
    """docs/EVALUATION.md's settings table names every setting EvalConfig declares (but the shared data settings,
    in their own table), each with its declared default."""
    import dataclasses

    from pacs_rl.evaluation.runner import EvalConfig
    from pacs_rl.settings.data import DATA_KEYS

    rows = _table_defaults((REPO / "docs" / "EVALUATION.md").read_text(), "| key | default | option |")
    declared = {f.name: f for f in dataclasses.fields(EvalConfig) if f.name not in DATA_KEYS}
    assert set(rows) == set(declared)
    wrong = {
        name: (rows[name], f.default)
        for name, f in declared.items()
        if not (
            rows[name] == "(required)"
            if f.default is dataclasses.MISSING
            else _says(rows[name].strip("`"), f.default)
        )
    }
    assert not wrong, f"docs/EVALUATION.md's defaults differ from EvalConfig's: {wrong}"


def test_the_verl_guide_names_every_declared_pacs_field_with_its_default():
    from pacs_rl.integrations.verl.options import LOSS_FIELDS, POLICY_LOSS

    rows = _table_defaults((REPO / "docs" / "VERL.md").read_text(), "| key | value |")
    for f in LOSS_FIELDS:
        cell = rows[f"{POLICY_LOSS}.{f.name}"]
        assert _says(cell.rpartition("default ")[2].strip("`"), f.default), (f.name, cell)
