"""How long the ``sound`` grader takes per completion on adversarial inputs, worst case and median.

    HF_HUB_OFFLINE=1 nice -n 5 python benchmarks/grader_time.py --out docs/benchmarks/grader_time.json

Each family below writes a completion built to make a reader slow (runs of whitespace, long lists of numbers,
long lines without a sentence end, many unclosed boxes, deep brackets, repeated answer phrases, a long equation
chain, a long LaTeX answer to a symbolic gold, long lists in prose, many conflicting values, checks and
revisions), cut to at most ``--tokens`` tokens of the bundled model's tokenizer (the CPU default's 96 and the paper's
4,096). The final form's attacks on a MATH-style gold are families too (a short power tower or a long decimal in the
box after a long text, a huge exponent, nested roots, nested factorials, a long padded sum). Every completion is
graded once untimed (the LaTeX parser's first reading of a shape of input is a cost paid once per process), then
``--repeats`` times with the grader's caches of the completion emptied before each (:func:`clear_caches`; the
question's keys are read once per group), by ``pacs_rl.rewards.math_verifier.check`` (the call under the reward's
timeout) stopped after ``--limit`` seconds (an older grader evaluates a power tower for minutes: recorded as overrun,
at the limit), against a numeric gold and, for the symbolic families, a MATH-style gold. Two times are kept, each the
best of the repeats: the CPU time of this process (what a grading costs, whatever else the shared machine runs) and
the wall-clock time (what it took here; the load average at the start is recorded). The goal, on CPU time: the worst
completion under 50 ms at 96 tokens and under 500 ms at 4,096.

The record keeps one entry per ``--label``, so that another grader (an older checkout on ``PYTHONPATH``, e.g.
``git archive REV src | tar -x -C OLD`` then ``PYTHONPATH=OLD/src ... --label before``) sits beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import time
from pathlib import Path

from pacs_rl.rewards.math_verifier import check

REPO = Path(__file__).resolve().parents[1]
QUESTION = "What is 47 + 8?"
SYMBOLIC = ("Simplify $\\sqrt{242}$.", "11\\sqrt{2}")


def families(n: int) -> dict[str, tuple[str, str, str]]:
    """name -> (completion text, longer than any budget; gold; question)."""
    nums = ", ".join(str(i) for i in range(n))
    return {
        "spaces": ("The answer is" + " " * (8 * n) + "x", "55", QUESTION),
        "spaces_and_tabs": ("Answer" + " \t" * (4 * n) + ":" + " " * n + "55", "55", QUESTION),
        "newlines": ("\n" * (4 * n) + "55", "55", QUESTION),
        "number_list_phrase": (f"The answer is {nums}.", "55", QUESTION),
        "number_list_box": (f"\\boxed{{{nums}}}", "55", QUESTION),
        "number_list_plain": (nums, "55", QUESTION),
        "number_column": ("\n".join(str(i) for i in range(n)), "55", QUESTION),
        "long_line": ("the answer to " + "a" * (8 * n), "55", QUESTION),
        "long_word_line": ("So " + "word " * (2 * n), "55", QUESTION),
        "unclosed_boxes": ("\\boxed{" * n + "55", "55", QUESTION),
        "deep_brackets": ("\\boxed{" + "(" * n + "55" + ")" * n + "}", "55", QUESTION),
        "repeated_phrase": ("The final answer is 97. " * n, "97", QUESTION),
        "repeated_label": ("Answer:\n" * n + "55", "55", QUESTION),
        "equation_chain": ("47 + 8 = " + " = ".join(["50 + 5"] * n) + " = 55", "55", QUESTION),
        "dollar_runs": ("$" * (4 * n) + " 55", "55", QUESTION),
        "corrections": ("Wait, no. " * n + "55", "55", QUESTION),
        "closed_boxes": ("\\boxed{55} " * n, "55", QUESTION),
        "reverse_phrases": ("you get 55, which is the answer, " * n, "55", QUESTION),
        "open_asides": ("(note that " * n + "55", "55", QUESTION),
        "table_rows": ("| Question | Answer |\n|---|---|\n" + "| 47 + 8 | 55 |\n" * n, "55", QUESTION),
        "sentences": ("So 47 + 8 = 55. " * n, "55", QUESTION),
        "hedges": ("The answer is 55 or maybe " * n, "55", QUESTION),
        "symbolic_list": (
            f"\\boxed{{{' + '.join(f'x^{{{i}}}' for i in range(n))}}}",
            SYMBOLIC[1],
            SYMBOLIC[0],
        ),
        "symbolic_padding": (f"\\boxed{{11\\sqrt{{2}}{' + 0' * n}}}", SYMBOLIC[1], SYMBOLIC[0]),
        # the final form's attacks, each box closed within the budget (n is twice the budget's tokens)
        "symbolic_short_tower": ("\\boxed{9^{9^{9}}}\n\n" + "So we compute. " * n, SYMBOLIC[1], SYMBOLIC[0]),
        "symbolic_long_decimal": (f"\\boxed{{15.{'5' * (n // 4)}}}", SYMBOLIC[1], SYMBOLIC[0]),
        "symbolic_huge_exponent": (f"\\boxed{{(x+1)^{{{'9' * (n // 4)}}}}}", SYMBOLIC[1], SYMBOLIC[0]),
        "symbolic_nested_roots": (
            "\\boxed{" + "\\sqrt{2+" * (n // 16) + "2" + "}" * (n // 16) + "}",
            SYMBOLIC[1],
            SYMBOLIC[0],
        ),
        "symbolic_factorials": (
            "\\boxed{" + "(" * (n // 8) + "9" + ")!" * (n // 8) + "}",
            SYMBOLIC[1],
            SYMBOLIC[0],
        ),
        "symbolic_right": (
            "$\\sqrt{242} = \\sqrt{121 \\cdot 2}$, so $\\boxed{11\\sqrt{2}}$.",
            *SYMBOLIC[::-1],
        ),
        "plain_right": ("47 + 8 = 55\n\nSo the answer is 55.", "55", QUESTION),
        # against the reading of commitments by structure (a copula with any subject, lists, the final lines, checks)
        "copula_sentences": ("The value of x is 5, " * n, "5", QUESTION),
        "prose_list": ("The roots are " + " and ".join(str(i % 97) for i in range(n)), "55", QUESTION),
        "or_list": ("x = " + " or x = ".join(str(i % 97) for i in range(n)), "55", QUESTION),
        "label_dashes": ("Answer" + " - " * n + "55", "55", QUESTION),
        "remark_words": ("55 (" + "checked " * n + ")", "55", QUESTION),
        "conflicting_boxes": (" ".join(f"\\boxed{{{i % 97}}}" for i in range(n)), "55", QUESTION),
        "conflicting_phrases": (" ".join(f"the answer is {i % 97}" for i in range(n)), "55", QUESTION),
        "hesitations": ("The answer is 55. " + "Hmm, 55 - 8 = 47. " * n, "55", QUESTION),
        "check_mismatch": ("47 + 8 = 54. Check: " + "54 - 8 = 46, not 47, " * n, "55", QUESTION),
        "revisions_inline": ("The answer is 5 " + "wait, no, the answer is 6 " * n, "6", QUESTION),
    }


def cut(tokenizer, text: str, tokens: int) -> str:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:tokens]
    return tokenizer.decode(ids)


def clear_caches() -> None:
    """Empty the grader's caches of what a completion brings (and math-verify's parse caches), so that a repeat of
    a completion is timed in full rather than read back. The keys of the question are kept: a question is read once
    for the group of completions sampled for it (its first completion pays a few milliseconds more)."""
    from math_verify import parser

    from pacs_rl.rewards import answers, final_form

    for module, name in (
        (final_form, "written"),
        (final_form, "reading"),
        (final_form, "size"),  # an older grader's (``--label before``)
        (answers, "structure_key"),
        (parser, "parse_latex_cached"),
        (parser, "parse_expr_cached"),
    ):
        cached = getattr(module, name, None)
        if cached is not None:
            cached.cache_clear()


class _Overran(BaseException):  # not an Exception: math-verify's own ``except Exception`` cannot swallow it
    pass


def _graded(completion: str, gold: str, question: str, limit: float | None):
    """``check``, stopped after ``limit`` seconds (a timer in this, the main thread); None when it overran."""
    if not limit:
        return check(completion, gold, grader="sound", prompt=question)

    def overrun(_signum, _frame):
        raise _Overran

    previous = signal.signal(signal.SIGALRM, overrun)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return check(completion, gold, grader="sound", prompt=question)
    except _Overran:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def time_one(
    completion: str, gold: str, question: str, repeats: int, limit: float | None = None
) -> tuple[float, float]:
    """(wall-clock seconds, CPU seconds of this process) of one completion's grading, each the best of ``repeats``
    with the caches emptied before each ((inf, inf) when one overran ``limit`` seconds); an untimed grading first,
    the parser's first reading of this shape. The CPU time is what the grading costs whatever else the machine
    runs; the wall-clock time is what it took here."""
    overran = (float("inf"), float("inf"))
    if _graded(completion, gold, question, limit) is None:
        return overran
    wall = cpu = float("inf")
    for _ in range(repeats):
        clear_caches()
        started, started_cpu = time.perf_counter(), time.process_time()
        if _graded(completion, gold, question, limit) is None:
            return overran
        wall = min(wall, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - started_cpu)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", default="96,4096", help="Token budgets, comma-separated.")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--label", default="current", help="The record's key for this grader (e.g. a commit).")
    p.add_argument(
        "--limit",
        type=float,
        default=10.0,
        help="Seconds after which one grading is stopped and recorded as overrun.",
    )
    p.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "grader_time.json"))
    args = p.parse_args(argv)
    from pacs_rl.models import load_tokenizer, resolve_model
    from pacs_rl.sampling.transformers_backend import cpu_capability

    tokenizer = load_tokenizer(resolve_model("smollm2-135m"))
    check("\\boxed{1}", "1", grader="sound")  # math-verify and the LaTeX parser load once, before timing
    check("\\boxed{x}", "x", grader="sound")
    run = {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": platform.processor() or platform.machine(),
        "cpu_capability": cpu_capability(),
        "repeats": args.repeats,
        "load_average": round(os.getloadavg()[0], 1),  # the machine is shared: how busy it was at the start
        "budgets": {},
    }
    for tokens in (int(t) for t in args.tokens.split(",")):
        rows = {}
        for name, (text, gold, question) in families(tokens * 2).items():
            completion = cut(tokenizer, text, tokens)
            wall, cpu = time_one(completion, gold, question, args.repeats, args.limit)
            if wall == float("inf"):  # overran the limit: recorded at the limit
                limit_ms = 1000 * args.limit
                rows[name] = {
                    "ms": limit_ms,
                    "cpu_ms": limit_ms,
                    "chars": len(completion),
                    "reason": "overran",
                }
                continue
            verdict = check(completion, gold, grader="sound", prompt=question)
            rows[name] = {
                "ms": round(1000 * wall, 2),
                "cpu_ms": round(1000 * cpu, 2),
                "chars": len(completion),
                "reason": verdict.reason,
            }
        budget = {"families": rows}
        for key, label in (("cpu_ms", "cpu"), ("ms", "wall")):
            times = [r[key] for r in rows.values()]
            worst = max(rows, key=lambda k, key=key: rows[k][key])
            budget |= {
                f"worst_{label}_ms": rows[worst][key],
                f"worst_{label}_family": worst,
                f"median_{label}_ms": round(statistics.median(times), 2),
            }
            print(
                f"{tokens} tokens, {label}: worst {rows[worst][key]} ms ({worst}), median {statistics.median(times):.2f} ms"
            )
        run["budgets"][str(tokens)] = budget
    out = Path(args.out)
    record = json.loads(out.read_text()) if out.exists() else {}
    record = {
        "command": "python benchmarks/grader_time.py",
        "goal_ms": {"96": 50, "4096": 500},  # the worst completion's CPU time
        "runs": {},
    } | {k: v for k, v in record.items() if k == "runs"}
    record["runs"][args.label] = run
    record.update(
        date=run["date"], cpu_capability=run["cpu_capability"]
    )  # the latest run's host, for the index
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
