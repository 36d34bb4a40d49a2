"""The ``sound`` grader's final-form rule measured on MATH-style data, beside the paper's grader.

    HF_HUB_OFFLINE=1 nice -n 5 python benchmarks/grader_forms.py --out docs/benchmarks/grader_forms.json

Three sets, all from the shared data folder (``--data``; nothing sampled):

- ``solutions``: each worked ``solution`` of MATH-500, Minerva-Math, AIME 2024 and AIME 1983-2023 against its own
  gold: a right answer in the form its author wrote it;
- ``right_forms``: every MATH-500 gold that is no plain number, written back in the other ways an examiner
  accepts (spacing, ``\\dfrac`` for ``\\frac``, ``\\left( \\right)`` brackets, the terms of a sum or the factors of
  a product in another order, a radical's fraction in front of it, a coefficient after its constant, a check after
  the box) in a one-line completion;
- ``padded_forms``: the same golds padded or left unevaluated (``+ 1 - 1``, ``\\cdot \\frac{2}{2}``, ``+ 0 x``,
  ``+ 0\\pi``, ``+ \\pi - \\pi``, multiplied and divided by ``\\sqrt{2}``, a second value "or" the gold) or
  approximated (a real constant gold to 8 decimals), which are equal to the gold by math-verify and not a final
  answer.

Every completion is graded by ``paper`` and ``sound`` (the question as the prompt). The record lists every right
answer (``solutions``, ``right_forms``) that ``paper`` pays and ``sound`` refuses, with ``sound``'s reason, and
counts what each grader pays among the padded forms.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

from pacs_rl.rewards import verify
from pacs_rl.rewards.answers import number_value, top_level_split

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = {
    "math500": "math500.jsonl",
    "minerva": "minerva_math.jsonl",
    "aime24": "aime24.jsonl",
    "aime83-23": "train_aime_1983_2023.jsonl",
}


def _rows(data: Path, file: str) -> list[dict]:
    return [json.loads(line) for line in (data / file).open(encoding="utf-8")]


def right_forms(gold: str) -> dict[str, str]:
    """The gold written in other ways an examiner accepts."""
    out = {
        "as_written": gold,
        "spaced": re.sub(r"\s*([-+=,])\s*", r" \1 ", gold).strip(),
        "tight": re.sub(r"\s+", "", gold) if "\\" not in gold else re.sub(r"(?<=[^A-Za-z])\s+", "", gold),
        "dfrac": gold.replace("\\frac", "\\dfrac"),
        "left_right": gold.replace("(", "\\left(").replace(")", "\\right)") if "\\left" not in gold else gold,
    }
    terms = top_level_split(gold, "+")
    if len(terms) == 2 and all(terms) and "=" not in gold and "," not in gold:
        out["sum_reordered"] = f"{terms[1]} + {terms[0]}"
    factors = re.fullmatch(r"(\([^()]*\))(\([^()]*\))", gold.replace(" ", ""))
    if factors:
        out["factors_reordered"] = factors.group(2) + factors.group(1)
    radical = re.fullmatch(r"\\frac\{(\d*)\\sqrt\{(\d+)\}\}\{(\d+)\}", gold.replace(" ", ""))
    if radical:  # \frac{3\sqrt{3}}{4} as \frac{3}{4}\sqrt{3}
        out["fraction_before_radical"] = (
            rf"\frac{{{radical.group(1) or 1}}}{{{radical.group(3)}}}\sqrt{{{radical.group(2)}}}"
        )
    coefficient = re.fullmatch(r"(\d+)\s*(\\sqrt\{\d+\}|\\sqrt\d+|\\pi)", gold.strip())
    if coefficient:  # 70 \sqrt{2} as \sqrt{2} \cdot 70
        out["coefficient_after"] = f"{coefficient.group(2)} \\cdot {coefficient.group(1)}"
    return out


def padded_forms(gold: str) -> dict[str, str]:
    """The gold padded, left unevaluated or approximated: equal to it by math-verify, not a final answer."""
    out = {
        "plus_one_minus_one": f"{gold} + 1 - 1",
        "times_two_over_two": f"\\left({gold}\\right) \\cdot \\frac{{2}}{{2}}",
        "plus_zero_x": f"{gold} + 0x",
        "twice_halved": f"\\frac{{2\\left({gold}\\right)}}{{2}}",
        "or_itself": f"{gold} \\text{{ or }} {gold}",
        "plus_zero_pi": f"{gold} + 0\\pi",
        "plus_pi_minus_pi": f"{gold} + \\pi - \\pi",
        "root_two_over_root_two": f"\\frac{{\\sqrt{{2}}\\left({gold}\\right)}}{{\\sqrt{{2}}}}",
    }
    approximation = decimal_approximation(gold)
    if approximation is not None:
        out["decimal_approximation"] = approximation
    return out


def decimal_approximation(gold: str) -> str | None:
    """A real constant gold with no finite decimal (``3\\sqrt{13}``, ``\\frac{\\pi}{6}``) to 8 decimals, else None."""
    import sympy
    from math_verify import LatexExtractionConfig, parse

    parsed = parse(f"\\boxed{{{gold}}}", (LatexExtractionConfig(),), parsing_timeout=None)
    value = parsed[0] if parsed else None
    if not isinstance(value, sympy.Expr) or value.free_symbols or not value.is_real or value.is_Rational:
        return None
    return f"{float(sympy.N(value, 20)):.8f}"


def grade(items: list[dict], timeout: float) -> list[dict]:
    for item in items:
        for grader in ("paper", "sound"):
            v = verify(
                item["completion"], item["answer"], grader=grader, prompt=item["question"], timeout=timeout
            )
            item[grader] = {"score": v.score, "reason": v.reason, "extracted": v.extracted}
    return items


def build_sets(data: Path) -> dict[str, list[dict]]:
    sets: dict[str, list[dict]] = {"solutions": [], "right_forms": [], "padded_forms": []}
    for name, file in SOLUTIONS.items():
        for r in _rows(data, file):
            if r.get("solution"):
                sets["solutions"].append(
                    {"id": f"{name}:{r['id']}", "question": r["problem"], "answer": r["answer"],
                     "completion": r["solution"]}
                )  # fmt: skip
    for r in _rows(data, "math500.jsonl"):
        if number_value(r["answer"]) is not None:
            continue
        for kind, forms in (
            ("right_forms", right_forms(r["answer"])),
            ("padded_forms", padded_forms(r["answer"])),
        ):
            for form, text in forms.items():
                sets[kind].append(
                    {"id": f"math500:{r['id']}:{form}", "question": r["problem"], "answer": r["answer"],
                     "completion": f"So the final answer is $\\boxed{{{text}}}$."
                     + (" Check: it satisfies the conditions above." if form == "as_written" else "")}
                )  # fmt: skip
    return sets


def summarize(items: list[dict]) -> dict:
    paper = sum(i["paper"]["score"] == 1.0 for i in items)
    sound = sum(i["sound"]["score"] == 1.0 for i in items)
    moved = [i for i in items if i["paper"]["score"] == 1.0 and i["sound"]["score"] == 0.0]
    gained = [i for i in items if i["paper"]["score"] == 0.0 and i["sound"]["score"] == 1.0]
    by_source: dict[str, dict[str, int]] = {}
    for i in items:
        row = by_source.setdefault(
            i["id"].split(":")[0], {"completions": 0, "paper_pays": 0, "sound_pays": 0}
        )
        row["completions"] += 1
        row["paper_pays"] += i["paper"]["score"] == 1.0
        row["sound_pays"] += i["sound"]["score"] == 1.0
    return {
        "completions": len(items),
        "paper_pays": paper,
        "sound_pays": sound,
        "by_source": by_source,
        "paper_pays_sound_refuses": len(moved),
        "sound_reasons_of_those": dict(Counter(i["sound"]["reason"] for i in moved).most_common()),
        "sound_pays_paper_refuses": len(gained),
        "paper_pays_sound_refuses_cases": [
            {
                "id": i["id"],
                "gold": i["answer"],
                "sound_read": i["sound"]["extracted"],
                "reason": i["sound"]["reason"],
                "completion_tail": i["completion"][-240:],
            }
            for i in moved
        ],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"), help="The shared data folder.")
    p.add_argument("--timeout", type=float, default=10.0, help="Time limit per check (seconds).")
    p.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "grader_forms.json"))
    args = p.parse_args(argv)
    started = time.perf_counter()
    report = {"command": "python benchmarks/grader_forms.py", "date": time.strftime("%Y-%m-%d"), "sets": {}}
    for name, items in build_sets(Path(args.data)).items():
        report["sets"][name] = summarize(grade(items, args.timeout))
        s = report["sets"][name]
        print(
            f"{name}: {s['completions']} completions, paper pays {s['paper_pays']}, sound pays {s['sound_pays']}; "
            f"paid by paper, refused by sound: {s['paper_pays_sound_refuses']} {s['sound_reasons_of_those']}",
            flush=True,
        )
    report["seconds"] = round(time.perf_counter() - started, 1)
    Path(args.out).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(f"{report['seconds']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
