"""Grader agreement on real completions: the ``paper`` grader against math-verify called exactly as the PACS
authors call it, side by side; every other grader's disagreements with the authors listed with the reason. With
``--examiner``, the graders against an examiner instead: the examiner's set of real completions, each marked right
or wrong by reading it (``tests/data/examiner_set.jsonl``), graded by ``sound`` and ``paper``, the completions each
pays that the examiner marks wrong and refuses that the examiner marks right counted per source and listed.

    HF_HUB_OFFLINE=1 nice -n 10 python benchmarks/grader_agreement.py --cache CACHE \
        --arith-model RUN/final --legacy-rev 3a94f3b --out docs/benchmarks/grader_agreement.json
    HF_HUB_OFFLINE=1 python benchmarks/grader_agreement.py --examiner --out docs/benchmarks/grader_examiner.json

Completion sets (sampled once into ``--cache`` with ``pacs-rl eval``'s runner, so a rerun only regrades):

- ``smollm2/<benchmark>``: the bundled (Q4_1-de-quantized) SmolLM2-135M-Instruct on MATH-500, Minerva-Math,
  AIME 2024 and AMC 2023 from the shared data folder (``--data``), the paper's prompt, T = 0.6, top-p 0.95,
  ``--max-new-tokens`` each, the first ``--limit`` problems and ``--n`` samples of each benchmark;
- ``<model>/arith-greedy``: the CPU default's held-out set (200 problems of the held-out arithmetic split,
  ``ops=+-``, ``digits=2,1``, seed 0), greedy, 96 tokens: what ``pacs-rl train`` reports as held-out accuracy,
  for the bundled model and for ``--arith-model`` (a model trained by the CPU default);
- ``<arith-model>/arith-T0.7``: the same problems at the training temperature 0.7 (rollout-like samples);
- ``solutions/<set>``: the worked ``solution`` of each problem (MATH-500, Minerva, AIME 2024, AIME 1983-2023)
  against its own gold answer and against the next problem's gold answer.

Each completion is graded by ``authors_score`` (their ``compute_score``: math-verify's ``math_metric`` with
its own 5 s ``signal.alarm`` limits, 0 on any error) and by every grader of ``--graders`` through
``pacs_rl.rewards.verify_batch`` (our time limit, ``--timeout`` seconds). With ``--legacy-rev`` the grader
of that commit (``math_reward`` before graders had names: lenient, prompt-echo guard, "unevaluated" and
"multiple boxes" rules) is graded too, as the held-out accuracy called it (no prompt) and as the training
reward called it (the user turn as prompt), to show where the CPU default's grader changes a verdict.

Prints one table and writes every disagreement to ``--out``; docs/benchmarks/verifier.md records the
table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from pacs_rl.data import INSTRUCTION, load_problems
from pacs_rl.data.prompts import user_turn
from pacs_rl.evaluation.runner import EvalConfig, run_evals
from pacs_rl.evaluation.samples import read_samples
from pacs_rl.rewards import verify_batch
from pacs_rl.rewards.math_verifier import authors_score, check
from pacs_rl.run_folder import EVAL_SAMPLES_FILE

REPO = Path(__file__).resolve().parents[1]
BENCH_FILES = {
    "math500": "math500.jsonl",
    "minerva": "minerva_math.jsonl",
    "aime24": "aime24.jsonl",
    "amc23": "amc23.jsonl",
}
SOLUTION_FILES = {
    **{k: BENCH_FILES[k] for k in ("math500", "minerva", "aime24")},
    "aime83-23": "train_aime_1983_2023.jsonl",
}
HELD_OUT = "arithmetic?n=200&seed=10000&ops=+-&digits=2,1&split=test"  # the CPU default's, seed 0
GRADERS = ["paper", "sound", "strict", "paper+restatement", "paper+multiple_boxed", "paper+echo"]
AUTHORS_TIMEOUT = 5.0  # math-verify's own limit per parse / per comparison


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", default=None, help="Folder for the sampled completions (reused by a rerun).")
    p.add_argument(
        "--examiner",
        action="store_true",
        help="Grade the examiner's set (tests/data/examiner_set.jsonl) instead.",
    )
    p.add_argument(
        "--data", default=str(REPO.parent / "shared" / "data"), help="Folder of the benchmark JSONL files."
    )
    p.add_argument(
        "--limit", default="math500=100,minerva=50,aime24=30,amc23=40", help="Problems per benchmark."
    )
    p.add_argument("--n", default="math500=1,minerva=1,aime24=2,amc23=1", help="Samples per problem.")
    p.add_argument("--max-new-tokens", type=int, default=320)
    p.add_argument("--arith-model", default=None, help="A model trained on the arithmetic task (its folder).")
    p.add_argument("--threads", type=int, default=1, help="torch threads while sampling.")
    p.add_argument("--graders", default=",".join(GRADERS))
    p.add_argument("--timeout", type=float, default=3.0, help="Our time limit per check (seconds).")
    p.add_argument("--legacy-rev", default=None, help="Also grade with the grader of this git commit.")
    p.add_argument("--no-sampling", action="store_true", help="Grade only what the cache holds.")
    p.add_argument("--out", default=None, help="JSON file for the table and every disagreement.")
    return p.parse_args()


def _pairs(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (item.split("=") for item in text.split(","))}


# ------------------------------------------------------------------------------------------------ completions
def sample_sets(args) -> None:
    """Sample every missing completion into the cache (each run resumes; the model loads once per model)."""
    common = dict(
        temperature=0.6,
        top_p=0.95,
        max_new_tokens=args.max_new_tokens,
        num_threads=args.threads,
        verify_workers=0,
        progress=True,
        batch_size=32,
    )
    limits, ns = _pairs(args.limit), _pairs(args.n)
    for name, file in BENCH_FILES.items():  # one run per benchmark: each has its own limit
        cfg = EvalConfig(
            model="smollm2-135m",
            benchmark=str(Path(args.data) / file),
            n=ns[name],
            limit=limits[name],
            output_dir=str(Path(args.cache) / "smollm2" / name),
            **common,
        )
        run_evals(cfg, [cfg.model])
    arith = [("smollm2", "smollm2-135m", "arith-greedy", 0.0)]
    if args.arith_model:
        arith += [
            ("arith-model", args.arith_model, "arith-greedy", 0.0),
            ("arith-model", args.arith_model, "arith-T0.7", 0.7),
        ]
    for folder, model, name, temperature in arith:
        cfg = EvalConfig(
            model=model,
            benchmark=HELD_OUT,
            n=1,
            temperature=temperature,
            top_p=1.0,
            max_new_tokens=96,
            num_threads=args.threads,
            verify_workers=0,
            progress=True,
            batch_size=50,
            output_dir=str(Path(args.cache) / folder / name),
        )
        run_evals(cfg, [model])


def completion_sets(args) -> dict[str, list[dict]]:
    """{set name: [{"id", "completion", "answer", "question"}]} from the cache and the solutions."""
    sets: dict[str, list[dict]] = {}
    questions: dict[str, dict[str, str]] = {}
    for run in sorted(Path(args.cache).glob(f"*/*/{EVAL_SAMPLES_FILE}")):
        meta = json.loads((run.parent / "run.json").read_text())["settings"]
        if meta["benchmark"] not in questions:
            questions[meta["benchmark"]] = {p.id: p.problem for p in load_problems(meta["benchmark"])}
        q = questions[meta["benchmark"]]
        rows, _ = read_samples(run)
        sets[f"{run.parent.parent.name}/{run.parent.name}"] = [
            {
                "id": f"{r['problem_id']}#{r['sample_index']}",
                "completion": r["completion"],
                "answer": r["answer"],
                "question": q[str(r["problem_id"])],
            }
            for r in rows
        ]
    for name, file in SOLUTION_FILES.items():
        problems = [p for p in load_problems(Path(args.data) / file) if p.extras.get("solution")]
        golds = [p.answer for p in problems]
        sets[f"solutions/{name}"] = [
            {"id": f"{p.id}{tag}", "completion": p.extras["solution"], "answer": gold, "question": p.problem}
            for tag, shifted in (("", golds), ("@next-gold", golds[1:] + golds[:1]))
            for p, gold in zip(problems, shifted, strict=True)
        ]
    return sets


# ------------------------------------------------------------------------------------------------ graders
def legacy_grader(rev: str):
    """The ``check`` function of ``src/pacs_rl/rewards/math_verifier.py`` at git commit ``rev``."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:src/pacs_rl/rewards/math_verifier.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / f"legacy_grader_{rev}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.check


def grade(items: list[dict], graders: list[str], timeout: float, legacy) -> dict:
    """Per completion: the authors' score (and whether it ran into math-verify's own limit), each grader's verdict."""
    out = {"authors": [], "authors_slow": [], "verdicts": {}}
    for it in items:
        t0 = time.perf_counter()
        out["authors"].append(authors_score(it["completion"], it["answer"]))
        out["authors_slow"].append(time.perf_counter() - t0 >= AUTHORS_TIMEOUT)
    completions, answers, questions = ([it[k] for it in items] for k in ("completion", "answer", "question"))
    for g in graders:
        out["verdicts"][g] = verify_batch(
            completions, answers, g, num_workers=0, timeout=timeout, prompts=questions
        ).verdicts
    if legacy is not None:
        out["verdicts"]["legacy (held-out call)"] = [
            legacy(c, a, strict=False, prompt=None) for c, a in zip(completions, answers, strict=True)
        ]
        out["verdicts"]["legacy (reward call)"] = [
            legacy(c, a, strict=False, prompt=user_turn(q, INSTRUCTION))
            for c, a, q in zip(completions, answers, questions, strict=True)
        ]
    return out


def summarize(sets: dict[str, list[dict]], graded: dict[str, dict]) -> dict:
    summary = {}
    for name, items in sets.items():
        g = graded[name]
        row = {
            "completions": len(items),
            "authors_correct": int(sum(g["authors"])),
            "authors_timeouts": int(sum(g["authors_slow"])),
            "graders": {},
        }
        for grader, verdicts in g["verdicts"].items():
            timeouts = [i for i, v in enumerate(verdicts) if v.reason == "timeout"]
            differ = [
                i
                for i, v in enumerate(verdicts)
                if v.score != g["authors"][i] and v.reason != "timeout" and not g["authors_slow"][i]
            ]
            row["graders"][grader] = {
                "correct": int(sum(v.score for v in verdicts)),
                "disagreements": len(differ),
                "timeouts": len(timeouts),
                "timeout_ids": [items[i]["id"] for i in timeouts],
                "by_reason": dict(
                    Counter(f"{verdicts[i].reason} (authors {g['authors'][i]:.0f})" for i in differ)
                ),
                "cases": [
                    {
                        "id": items[i]["id"],
                        "answer": items[i]["answer"],
                        "extracted": verdicts[i].extracted,
                        "reason": verdicts[i].reason,
                        "authors": g["authors"][i],
                        "completion_tail": items[i]["completion"][-160:],
                    }
                    for i in differ
                ],
            }
        summary[name] = row
    return summary


def table(summary: dict) -> str:
    graders = list(next(iter(summary.values()))["graders"])
    head = (
        "| set | completions | authors: correct | paper: agrees / timeouts | "
        + " | ".join(f"{g}: differs" for g in graders[1:])
        + " |"
    )
    lines = [head, "|---|" + "---:|" * (3 + len(graders) - 1)]
    for name, row in summary.items():
        paper = row["graders"]["paper"]
        agree = row["completions"] - paper["disagreements"] - paper["timeouts"]
        cells = [str(row["completions"]), str(row["authors_correct"]), f"{agree} / {paper['timeouts']}"]
        cells += [str(row["graders"][g]["disagreements"]) for g in graders[1:]]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ against an examiner
EXAMINER_GRADERS = ("sound", "paper")


def examiner(args) -> dict:
    """Every grader of :data:`EXAMINER_GRADERS` on the examiner's set: per source, the completions it pays, those
    it pays that the examiner marks wrong and those it refuses that the examiner marks right, each listed."""
    spec = importlib.util.spec_from_file_location("examiner_set", REPO / "tests" / "examiner_set.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.environ.setdefault("PACS_RL_SHARED_DATA", args.data)
    rows = module.load()
    sets = {}
    for source in module.SOURCES:
        items = [r for r in rows if r["source"] == source]
        if not items:
            continue
        entry = {
            "completions": len(items),
            "examiner_right": sum(r["mark"] == "right" for r in items),
            "graders": {},
        }
        for grader in EXAMINER_GRADERS:
            verdicts = [check(r["completion"], r["gold"], grader=grader, prompt=r["question"]) for r in items]
            wrong_paid = [i for i, v in enumerate(verdicts) if v.score == 1.0 and items[i]["mark"] == "wrong"]
            right_refused = [
                i for i, v in enumerate(verdicts) if v.score == 0.0 and items[i]["mark"] == "right"
            ]
            entry["graders"][grader] = {
                "paid": sum(v.score == 1.0 for v in verdicts),
                "wrong_paid": len(wrong_paid),
                "right_refused": len(right_refused),
                "cases": module.disagreements(
                    [items[i] for i in wrong_paid + right_refused],
                    [verdicts[i] for i in wrong_paid + right_refused],
                ),
            }
        sets[source] = entry
    return sets


def examiner_table(sets: dict) -> str:
    lines = [
        "| source | completions | examiner: right | "
        + " | ".join(f"`{g}`: paid / wrong paid / right refused" for g in EXAMINER_GRADERS)
        + " |",
        "|---|---:|---:|" + "---:|" * len(EXAMINER_GRADERS),
    ]
    for source, e in sets.items():
        cells = [
            f"{e['graders'][g]['paid']} / {e['graders'][g]['wrong_paid']} / {e['graders'][g]['right_refused']}"
            for g in EXAMINER_GRADERS
        ]
        lines.append(f"| {source} | {e['completions']} | {e['examiner_right']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    t0 = time.time()
    if args.examiner:
        from pacs_rl.sampling.transformers_backend import cpu_capability

        sets = examiner(args)
        print(examiner_table(sets))
        for e in sets.values():
            for grader, r in e["graders"].items():
                for case in r["cases"]:
                    print(f"{grader}: {case}")
        if args.out:
            record = {
                "what": "the graders against an examiner's marks on real completions (tests/data/examiner_set.jsonl)",
                "command": "python benchmarks/grader_agreement.py --examiner --out docs/benchmarks/grader_examiner.json",
                "date": time.strftime("%Y-%m-%d"),
                "cpu_capability": cpu_capability(),
                "seconds": round(time.time() - t0, 1),
                "sets": sets,
                "table": examiner_table(sets),
            }
            Path(args.out).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        return
    if not args.cache:
        raise SystemExit("--cache is required (a folder for the sampled completions), unless --examiner")
    if not args.no_sampling:
        sample_sets(args)
    sets = completion_sets(args)
    graders = [g.strip() for g in args.graders.split(",") if g.strip()]
    legacy = legacy_grader(args.legacy_rev) if args.legacy_rev else None
    graded = {}
    for name, items in sets.items():
        print(f"grading {name}: {len(items)} completions", file=sys.stderr)
        graded[name] = grade(items, graders, args.timeout, legacy)
    summary = summarize(sets, graded)
    print(table(summary))
    for name, row in summary.items():
        for grader, r in row["graders"].items():
            if r["disagreements"]:
                print(f"{name}, {grader}: {r['disagreements']} differ: {r['by_reason']}")
    if args.out:
        record = {
            "command": " ".join(sys.argv),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "seconds": round(time.time() - t0, 1),
            "sets": summary,
            "table": table(summary),
        }
        Path(args.out).write_text(json.dumps(record, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
