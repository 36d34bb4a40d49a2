"""The base model's first rollout on the CPU default: how much signal the reward finds in it.

    python benchmarks/first_rollout.py sample [--prompts 64]    # sample once (about 10 min on 2 cores)
    python benchmarks/first_rollout.py grade --label NAME       # grade the same samples with today's graders

``sample`` draws ``--prompts`` problems from the arithmetic *train* split (a development set: apart from the
held-out problems by construction, seed ``--seed``), renders the CPU default's prompt, and samples G = 8
completions each from the bundled SmolLM2-135M-Instruct exactly as the CPU default's first rollout does
(the fast sampler, fp32, temperature 0.7, top-p 1.0, 96 new tokens). Each completion is kept with its token
count and finish reason in ``docs/benchmarks/first_rollout_samples.jsonl``, so that every grader, today's
and later ones, is measured on the same samples.

``grade`` grades those samples with the training grader (``sound``) and the paper's grader, each told which
completions were cut off at the token limit as training tells it (``sound`` refuses those), the cut-off
completions counted apart, and records under ``--label`` (e.g. the commit) in
``docs/benchmarks/first_rollout.json``: completions paid, paid ones cut at the token limit, groups holding
both labels, and the verdicts by reason.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "docs" / "benchmarks" / "first_rollout_samples.jsonl"
RECORD = REPO / "docs" / "benchmarks" / "first_rollout.json"
G = 8


def sample(args) -> None:
    """The base model's first rollout, into ``args.samples`` (the record's samples unless named)."""
    path = Path(args.samples) if getattr(args, "samples", None) else SAMPLES
    _sample(path, args.prompts, args.seed, 0.7, 96)


def _sample(path: Path, prompts_n: int, seed: int, temperature: float, max_new_tokens: int) -> None:
    import torch

    from pacs_rl.data.procedural import arithmetic_problems
    from pacs_rl.data.prompts import INSTRUCTION, format_prompt, user_turn
    from pacs_rl.models import load_model_and_tokenizer, resolve_model
    from pacs_rl.sampling import SamplingParams, TransformersSampler

    torch.manual_seed(seed)
    problems = arithmetic_problems(prompts_n, seed=seed, split="train", ops="+-", digits=(2, 1))
    model, tokenizer = load_model_and_tokenizer(resolve_model("smollm2-135m"))
    prompts = [format_prompt(tokenizer, p.problem, instruction=INSTRUCTION) for p in problems]
    params = SamplingParams(n=G, temperature=temperature, top_p=1.0, max_new_tokens=max_new_tokens, seed=seed)
    started = time.perf_counter()
    groups = TransformersSampler(model, tokenizer, progress=True).generate(prompts, params)
    seconds = time.perf_counter() - started
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for p, group in zip(problems, groups, strict=True):
            for s in group:
                row = {
                    "question": user_turn(p.problem, INSTRUCTION),
                    "answer": p.answer,
                    "completion": s.text,
                    "tokens": len(s.token_ids),
                    "finish_reason": s.finish_reason,
                }
                f.write(json.dumps(row) + "\n")
    print(f"{len(problems)} prompts x {G} in {seconds:.0f} s -> {path}")


def _summary(rows: list[dict], scores: list[float], verdicts) -> dict:
    cut = [r["finish_reason"] == "length" for r in rows]
    groups = [scores[i : i + G] for i in range(0, len(scores), G)]
    return {
        "paid": int(sum(scores)),
        "paid_cut_off": sum(1 for s, c in zip(scores, cut, strict=True) if s and c),
        "groups_with_both_labels": sum(1 for g in groups if 0 < sum(g) < G),
        "reasons": dict(Counter(v.reason for v in verdicts).most_common()),
    }


def grade(args) -> None:
    from pacs_rl.rewards import verify_batch

    rows = [json.loads(line) for line in SAMPLES.open()]
    completions = [r["completion"] for r in rows]
    answers = [r["answer"] for r in rows]
    questions = [r["question"] for r in rows]
    cut = [r["finish_reason"] == "length" for r in rows]
    entry = {
        "date": date.today().isoformat(),
        "completions": len(rows),
        "groups": len(rows) // G,
        "cut_off": sum(r["finish_reason"] == "length" for r in rows),
    }
    for grader in ("sound", "paper"):
        started = time.perf_counter()
        result = verify_batch(  # told which were cut off, as training tells it: sound refuses those
            completions, answers, grader=grader, prompts=questions, num_workers=1, truncated=cut
        )
        entry[grader] = _summary(rows, result.scores, result.verdicts)
        entry[grader]["seconds"] = round(time.perf_counter() - started, 2)
    from pacs_rl.sampling.transformers_backend import cpu_capability

    record = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    record = {
        **record,
        "what": "the base model's first rollout on the CPU default, graded by the graders of each label's commit",
        "command": "python benchmarks/first_rollout.py grade --label LABEL",
        "samples": SAMPLES.name,
        "graded": {**record.get("graded", {}), args.label: entry},
    }
    record.update(date=entry["date"], cpu_capability=cpu_capability())
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({args.label: entry}, indent=1))


def limits(args) -> None:
    """The share of groups with both labels under the training grader at several token limits, from one sample
    at the largest limit: a completion longer than a limit is cut there (never paid), a shorter one is graded
    as it is."""
    from pacs_rl.rewards import verify_batch

    limits = sorted(int(x) for x in args.limits.split(","))
    path = Path(args.work) / f"first_rollout_T{args.temperature:g}_{limits[-1]}.jsonl"
    if not path.is_file():
        _sample(path, args.prompts, args.seed, args.temperature, limits[-1])
    rows = [json.loads(line) for line in path.open()]
    result = verify_batch(
        [r["completion"] for r in rows], [r["answer"] for r in rows], grader="sound",
        prompts=[r["question"] for r in rows], num_workers=1,
        truncated=[r["finish_reason"] == "length" for r in rows],
    )  # fmt: skip
    out = {}
    for limit in limits:
        finished = [r["finish_reason"] == "stop" and r["tokens"] <= limit for r in rows]
        scores = [s if f else 0.0 for s, f in zip(result.scores, finished, strict=True)]
        groups = [scores[i : i + G] for i in range(0, len(scores), G)]
        out[str(limit)] = {
            "paid": int(sum(scores)),
            "cut_off": finished.count(False),
            "groups_with_both_labels": sum(1 for g in groups if 0 < sum(g) < G),
            "groups": len(groups),
            "mean_tokens": round(sum(min(r["tokens"], limit) for r in rows) / len(rows), 1),
        }
    record = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    record.setdefault("limits", {})[f"T={args.temperature:g}"] = out
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(out, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample", help="sample the base model's first rollout once")
    s.add_argument("--prompts", type=int, default=64)
    s.add_argument("--seed", type=int, default=1)
    g = sub.add_parser("grade", help="grade the recorded samples with today's graders")
    g.add_argument("--label", required=True, help="the record's key, e.g. the commit graded")
    lim = sub.add_parser("limits", help="groups with both labels at several token limits (one sample)")
    lim.add_argument("--limits", default="96,128,160,192")
    lim.add_argument("--temperature", type=float, default=0.7)
    lim.add_argument("--prompts", type=int, default=64)
    lim.add_argument("--seed", type=int, default=1)
    lim.add_argument("--work", default="runs/first_rollout", help="where the longer samples are kept")
    args = parser.parse_args(argv)
    {"sample": sample, "grade": grade, "limits": limits}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
