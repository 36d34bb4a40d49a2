"""The evaluation runner: sample n completions per problem, verify them, report pass@k (paper §4.1).

One run = one model on one benchmark, in one folder::

    run.json       the settings the samples were drawn with (checked on resume)
    samples.jsonl  one row per sample, appended (and flushed) chunk by chunk as problems finish
    metrics.json   pass@k per k, counts, reasons, settings, timing
    results.md     the table (rows = models, columns = k), passk.png the curve

Resumable: rerunning the same command samples only the (problem, index) pairs missing from
``samples.jsonl``. A different sampling setting (model, benchmark, temperature, top-p, max new tokens,
seed, prompt, backend, dtype, verifier strictness) is refused; a larger ``n`` or ``limit`` extends the
run. A resumed run is statistically equivalent to an uninterrupted one; it is bit-identical only when
it restarts at a chunk boundary (each chunk's seed derives from the run seed and its first problem).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
SAMPLES_FILE = "samples.jsonl"
METRICS_FILE = "metrics.json"

# Settings that change what is sampled or how it is scored: a resume must match them exactly.
LOCKED_SETTINGS = (
    "model",
    "benchmark",
    "split",
    "problem_field",
    "answer_field",
    "temperature",
    "top_p",
    "max_new_tokens",
    "seed",
    "strict",
    "plain_prompt",
    "instruction",
    "backend",
    "dtype",
)


@dataclass
class EvalConfig:
    """Settings of one evaluation run (the ``pacs-rl eval`` options)."""

    model: str = field(metadata={"help": "Model: bundled alias (smollm2-135m), Hub id or local folder."})
    benchmark: str = field(
        metadata={"help": "Benchmark name, .jsonl/.json/.parquet file, Hub dataset id, or procedural task."}
    )
    output_dir: str = field(
        default="eval_runs", metadata={"help": "Folder for samples, metrics, table, plot."}
    )
    n: int = field(
        default=32, metadata={"help": "Samples per problem (paper: 32 for MATH-500, 512 for AIME/AMC)."}
    )
    ks: list[int] | None = field(
        default=None, metadata={"help": "k values for pass@k; default: powers of two up to n."}
    )
    temperature: float = field(default=0.6, metadata={"help": "Sampling temperature (paper: 0.6)."})
    top_p: float = field(default=0.95, metadata={"help": "Nucleus sampling top-p (paper, Table 4: 0.95)."})
    max_new_tokens: int = field(default=1024, metadata={"help": "Tokens generated at most per sample."})
    backend: str = field(default="transformers", metadata={"help": "Sampling engine: transformers or vllm."})
    dtype: str = field(default="float32", metadata={"help": "Model dtype (float32 on CPU; bfloat16 on GPU)."})
    device: str = field(
        default="auto", metadata={"help": "transformers device: auto (cuda if any), cpu, cuda:0."}
    )
    num_threads: int | None = field(
        default=None,
        metadata={
            "help": "torch CPU threads (torch.set_num_threads); 1 is far faster on an oversubscribed CPU."
        },
    )
    batch_size: int = field(default=64, metadata={"help": "Sequences per generate call of the engine."})
    problems_per_chunk: int | None = field(
        default=None,
        metadata={"help": "Problems sampled between two writes of samples.jsonl; default batch_size // n."},
    )
    limit: int | None = field(
        default=None, metadata={"help": "Use only the first `limit` problems (file order)."}
    )
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    split: str | None = field(default=None, metadata={"help": "Dataset split (Hub datasets / procedural)."})
    problem_field: str | None = field(default=None, metadata={"help": "Field holding the problem text."})
    answer_field: str | None = field(default=None, metadata={"help": "Field holding the reference answer."})
    on_error: str = field(
        default="skip", metadata={"help": "Bad data rows: 'skip' (count, report) or 'raise'."}
    )
    strict: bool = field(default=False, metadata={"help": "Only a final \\boxed{} answer counts."})
    verify_timeout: float = field(default=3.0, metadata={"help": "Seconds per answer check at most."})
    verify_workers: int = field(
        default=1, metadata={"help": "Verifier processes (0 = in this process, bounded by a signal timer)."}
    )
    plain_prompt: bool = field(
        default=False,
        metadata={"help": "Use 'Question: ... Answer:' when the tokenizer has no chat template."},
    )
    label: str | None = field(default=None, metadata={"help": "Row name in results.md (default: the model)."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})

    def resolved_ks(self) -> list[int]:
        if self.ks is None:
            return [2**i for i in range(self.n.bit_length()) if 2**i <= self.n]
        bad = [k for k in self.ks if k < 1 or k > self.n]
        if bad:
            raise ValueError(
                f"k values {bad} are outside 1..n (n = {self.n}); raise --n or drop them from --k"
            )
        return sorted(set(self.ks))

    def locked(self) -> dict[str, Any]:
        from pacs_rl.data.prompts import INSTRUCTION

        d = dataclasses.asdict(self)
        d["instruction"] = INSTRUCTION
        return {k: d[k] for k in LOCKED_SETTINGS}


class ResumeMismatch(RuntimeError):
    """The output folder holds samples drawn with other settings."""


# --------------------------------------------------------------------------------------------------
# The samples file


def read_samples(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Rows of a samples file, first occurrence of each (problem_id, sample_index) kept.

    Returns the rows and the number of lines dropped (a line cut by a crash, duplicates)."""
    rows, seen, dropped = [], set(), 0
    if not path.exists():
        return rows, 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key = (str(row["problem_id"]), int(row["sample_index"]))
            float(row["score"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            dropped += 1
            continue
        if key in seen:
            dropped += 1
            continue
        seen.add(key)
        rows.append(row)
    return rows, dropped


def _rewrite(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def prepare_run_dir(config: EvalConfig, out: Path) -> tuple[list[dict[str, Any]], int]:
    """Create or reopen a run folder; refuse one whose samples were drawn with other settings.

    Returns the rows already there and the number of broken/duplicate lines removed."""
    out.mkdir(parents=True, exist_ok=True)
    run_file, samples = out / RUN_FILE, out / SAMPLES_FILE
    locked = config.locked()
    rows, dropped = read_samples(samples)
    if rows and not run_file.exists():
        raise ResumeMismatch(
            f"{samples} holds samples but {run_file} is missing, so their settings are unknown. "
            "Use another --output folder."
        )
    if rows:
        old = json.loads(run_file.read_text()).get("settings", {})
        diff = {k: (old.get(k), v) for k, v in locked.items() if old.get(k) != v}
        if diff:
            lines = "\n".join(
                f"  {k}: samples have {a!r}, this command has {b!r}" for k, (a, b) in diff.items()
            )
            raise ResumeMismatch(
                f"{out} holds samples drawn with other settings:\n{lines}\n"
                "Use another --output folder, or rerun with the settings above to resume."
            )
    else:  # a new run, or one that stopped before its first sample was written
        run_file.write_text(json.dumps({"settings": locked, "created": time.time()}, indent=2))
    if dropped or (samples.exists() and samples.stat().st_size and not samples.read_bytes().endswith(b"\n")):
        _rewrite(samples, rows)  # drop a line cut by a crash so appends start on a clean line
    return rows, dropped


# --------------------------------------------------------------------------------------------------
# Metrics


def compute_metrics(
    rows: list[dict[str, Any]], problem_ids: list[str], n: int, ks: list[int]
) -> tuple[dict[str, float], list[int]]:
    """pass@k (eq. 10) over ``problem_ids`` from their first ``n`` samples. Returns pass@k by k (as
    str keys, for JSON) and the number of correct samples per problem."""
    from pacs_rl.evaluation.passk import mean_pass_at_k

    correct = Counter()
    count = Counter()
    wanted = set(problem_ids)
    for r in rows:
        pid = str(r["problem_id"])
        if pid in wanted and int(r["sample_index"]) < n:
            count[pid] += 1
            correct[pid] += float(r["score"]) >= 0.5
    missing = [pid for pid in problem_ids if count[pid] != n]
    if missing:
        raise RuntimeError(
            f"{len(missing)} problem(s) lack samples (first: {missing[0]!r}); rerun to complete"
        )
    cs = [int(correct[pid]) for pid in problem_ids]
    scores = mean_pass_at_k([n] * len(cs), cs, ks)
    return {str(k): float(v) for k, v in sorted(scores.items())}, cs


# --------------------------------------------------------------------------------------------------
# Running


def _chunk_seed(seed: int, first_id: str, first_index: int) -> int:
    h = hashlib.blake2b(f"{seed}/{first_id}/{first_index}".encode(), digest_size=4).digest()
    return int.from_bytes(h, "big") & 0x7FFFFFFF


def plan_chunks(
    todo: list[tuple[Any, list[int]]], per_chunk_sequences: int, max_problems: int | None = None
) -> list[list[tuple[Any, list[int]]]]:
    """Group (problem, missing indices) into chunks of consecutive problems that miss the same number
    of samples, about ``per_chunk_sequences`` sequences each (or ``max_problems`` problems)."""
    chunks: list[list[tuple[Any, list[int]]]] = []
    for item in todo:
        m = len(item[1])
        cap = max_problems or max(1, per_chunk_sequences // m)
        if chunks and len(chunks[-1][0][1]) == m and len(chunks[-1]) < cap:
            chunks[-1].append(item)
        else:
            chunks.append([item])
    return chunks


def slug(model: str) -> str:
    """A folder name for a model: ``org/name`` -> ``org__name``, a path -> its last part."""
    p = Path(model)
    base = p.name if p.exists() else model.replace("/", "__")
    return re.sub(r"[^A-Za-z0-9._+-]", "_", base) or "model"


def build_sampler(config: EvalConfig):
    """Load the model and its sampling engine. Returns (sampler, tokenizer).

    transformers: ``dtype`` bfloat16 keeps fp32 weights and samples under autocast (AMX on CPU);
    float16 loads half weights (GPU). vllm: the engine loads the weights itself."""
    from pacs_rl.models import load_model_and_tokenizer, load_tokenizer
    from pacs_rl.sampling import get_sampler

    if config.backend == "vllm":
        tokenizer = load_tokenizer(config.model)
        sampler = get_sampler(
            "vllm", config.model, tokenizer, dtype=config.dtype, batch_size=config.batch_size
        )
        return sampler, tokenizer
    if config.backend != "transformers":
        raise ValueError(f"unknown backend {config.backend!r}; use transformers or vllm")
    import torch

    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    bf16 = config.dtype in ("bfloat16", "bf16")
    device = config.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load_model_and_tokenizer(
        config.model, dtype="float32" if bf16 else config.dtype, device=device
    )
    model.eval()
    sampler = get_sampler(
        "transformers", model, tokenizer, dtype="bfloat16" if bf16 else None, batch_size=config.batch_size
    )
    return sampler, tokenizer


class _Progress:
    """A rich progress bar over samples with samples/s and the running accuracy."""

    def __init__(self, enabled: bool, total: int, done: int, correct: float, label: str):
        self.bar = None
        self.correct, self.done, self.new, self.t0 = correct, done, 0, time.perf_counter()
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} samples/s"),
            TextColumn("acc {task.fields[acc]}"),
            TimeRemainingColumn(),
        )
        self.bar.start()
        self.task = self.bar.add_task(label, total=total, completed=done, rate="-", acc=self._acc())

    def _acc(self) -> str:
        return f"{self.correct / self.done:.3f}" if self.done else "-"

    def advance(self, k: int, correct: float) -> None:
        self.done, self.new, self.correct = self.done + k, self.new + k, self.correct + correct
        if self.bar is not None:
            rate = self.new / max(time.perf_counter() - self.t0, 1e-9)
            self.bar.update(self.task, advance=k, rate=f"{rate:.2f}", acc=self._acc())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def run_eval(config: EvalConfig, sampler=None, tokenizer=None, problems=None) -> dict[str, Any]:
    """Run (or resume) one evaluation into ``config.output_dir``; return the metrics written.

    ``sampler``/``tokenizer`` may be passed in (already loaded); otherwise they are built from
    ``config.model`` and ``config.backend``. ``problems`` overrides loading ``config.benchmark``.
    """
    from pacs_rl.data import format_prompt, load_problems
    from pacs_rl.rewards import RewardPool, verify_batch
    from pacs_rl.sampling import SamplingParams

    t_start = time.perf_counter()
    ks = config.resolved_ks()
    if config.n < 1:
        raise ValueError(f"n must be >= 1, got {config.n}")
    out = Path(config.output_dir)
    skipped, skip_messages = 0, []
    if problems is None:
        problems = load_problems(
            config.benchmark,
            problem_field=config.problem_field,
            answer_field=config.answer_field,
            split=config.split,
            limit=config.limit,
            on_error=config.on_error,
        )
        skipped, skip_messages = getattr(problems, "skipped", 0), getattr(problems, "skip_messages", [])
    elif config.limit:
        problems = problems[: config.limit]
    if not problems:
        raise ValueError(f"no problems to evaluate in {config.benchmark!r}")
    rows, dropped_lines = prepare_run_dir(config, out)

    have: dict[str, set[int]] = {}
    for r in rows:
        have.setdefault(str(r["problem_id"]), set()).add(int(r["sample_index"]))
    todo = [(p, [i for i in range(config.n) if i not in have.get(p.id, set())]) for p in problems]
    todo = [(p, missing) for p, missing in todo if missing]
    ids = {p.id for p in problems}
    reused = [r for r in rows if str(r["problem_id"]) in ids and int(r["sample_index"]) < config.n]

    gen_seconds = verify_seconds = load_seconds = 0.0
    generated = gen_tokens = 0
    if todo:
        t_load = time.perf_counter()
        if sampler is None:
            sampler, tokenizer = build_sampler(config)
        elif tokenizer is None:
            raise ValueError("pass the tokenizer together with the sampler")
        load_seconds = time.perf_counter() - t_load
        per_chunk = config.batch_size if config.backend == "transformers" else max(config.batch_size, 1024)
        chunks = plan_chunks(todo, per_chunk, config.problems_per_chunk)
        pool = (
            RewardPool(num_workers=config.verify_workers, timeout=config.verify_timeout)
            if config.verify_workers > 0
            else None
        )
        bar = _Progress(
            config.progress,
            total=len(problems) * config.n,
            done=len(reused),
            correct=sum(float(r["score"]) for r in reused),
            label=f"{config.label or config.model} on {config.benchmark}",
        )
        try:
            with (out / SAMPLES_FILE).open("a", encoding="utf-8") as f:
                for chunk in chunks:
                    m = len(chunk[0][1])
                    prompts = [
                        format_prompt(tokenizer, p.problem, plain_fallback=config.plain_prompt)
                        for p, _ in chunk
                    ]
                    params = SamplingParams(
                        n=m,
                        temperature=config.temperature,
                        top_p=config.top_p,
                        max_new_tokens=config.max_new_tokens,
                        seed=_chunk_seed(config.seed, chunk[0][0].id, chunk[0][1][0]),
                    )
                    t0 = time.perf_counter()
                    outputs = sampler.generate(prompts, params)
                    gen_seconds += time.perf_counter() - t0
                    if len(outputs) != len(chunk):
                        raise RuntimeError(
                            f"sampler returned {len(outputs)} outputs for {len(chunk)} prompts"
                        )
                    completions = [s.text for samples in outputs for s in samples]
                    answers = [
                        p.answer for (p, _), samples in zip(chunk, outputs, strict=True) for _ in samples
                    ]
                    t0 = time.perf_counter()
                    if pool is not None:
                        result = pool.verify_batch(completions, answers, strict=config.strict)
                    else:
                        result = verify_batch(
                            completions,
                            answers,
                            strict=config.strict,
                            num_workers=0,
                            timeout=config.verify_timeout,
                        )
                    verify_seconds += time.perf_counter() - t0
                    verdicts = iter(result.verdicts)
                    new_rows = []
                    for (p, missing), samples in zip(chunk, outputs, strict=True):
                        if len(samples) != len(missing):
                            raise RuntimeError(
                                f"sampler returned {len(samples)} samples for {p.id}, expected {len(missing)}"
                            )
                        for idx, s in zip(missing, samples, strict=True):
                            v = next(verdicts)
                            new_rows.append(
                                {
                                    "problem_id": p.id,
                                    "sample_index": idx,
                                    "completion": s.text,
                                    "extracted": v.extracted,
                                    "score": float(v.score),
                                    "reason": v.reason,
                                    "finish_reason": s.finish_reason,
                                    "num_tokens": len(s.token_ids),
                                    "answer": p.answer,
                                }
                            )
                            gen_tokens += len(s.token_ids)
                    f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in new_rows))
                    f.flush()
                    os.fsync(f.fileno())
                    rows.extend(new_rows)
                    generated += len(new_rows)
                    bar.advance(len(new_rows), sum(r["score"] for r in new_rows))
        finally:
            bar.close()
            if pool is not None:
                pool.close()

    problem_ids = [p.id for p in problems]
    pass_at_k, correct = compute_metrics(rows, problem_ids, config.n, ks)
    used = [r for r in rows if str(r["problem_id"]) in ids and int(r["sample_index"]) < config.n]
    loop_seconds = time.perf_counter() - t_start - load_seconds
    harness = loop_seconds - gen_seconds
    metrics = {
        "label": config.label or config.model,
        "model": config.model,
        "benchmark": config.benchmark,
        "n": config.n,
        "ks": ks,
        "num_problems": len(problems),
        "pass_at_k": pass_at_k,
        "mean_score": sum(float(r["score"]) for r in used) / len(used),
        "problems_solved_at_n": sum(c > 0 for c in correct),
        "reasons": dict(Counter(r["reason"] for r in used).most_common()),
        "finish_reasons": dict(Counter(str(r.get("finish_reason")) for r in used).most_common()),
        "mean_completion_tokens": sum(int(r.get("num_tokens", 0)) for r in used) / len(used),
        "skipped_rows": skipped,
        "skipped_examples": skip_messages[:5],
        "sampling": {
            "temperature": config.temperature,
            "top_p": config.top_p,
            "max_new_tokens": config.max_new_tokens,
            "seed": config.seed,
            "backend": config.backend,
            "dtype": config.dtype,
            "batch_size": config.batch_size,
            "strict": config.strict,
        },
        "settings": dataclasses.asdict(config),
        "timing": {
            "samples_generated_this_run": generated,
            "samples_reused_from_earlier_runs": len(reused),
            "broken_lines_dropped": dropped_lines,
            "model_load_seconds": round(load_seconds, 3),
            "generation_seconds": round(gen_seconds, 3),
            "verification_seconds": round(verify_seconds, 3),
            "harness_seconds": round(harness, 3),
            "harness_overhead_fraction": round(harness / gen_seconds, 5) if gen_seconds > 0 else None,
            "generated_tokens": gen_tokens,
            "tokens_per_second": round(gen_tokens / gen_seconds, 2) if gen_seconds > 0 else None,
            "samples_per_second": round(generated / gen_seconds, 3) if gen_seconds > 0 else None,
        },
    }
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=2))
    from pacs_rl.evaluation.report import write_report

    write_report([metrics], out)
    return metrics


def run_evals(config: EvalConfig, models: list[str], labels: list[str] | None = None) -> list[dict[str, Any]]:
    """Evaluate several models on one benchmark: each into ``output_dir/<model>``, and a merged
    ``results.md`` / ``passk.png`` in ``output_dir``. With one model, the run folder is ``output_dir``."""
    from pacs_rl.evaluation.report import write_report

    if len(models) == 1:
        cfg = dataclasses.replace(config, model=models[0], label=(labels or [config.label])[0])
        return [run_eval(cfg)]
    names: list[str] = []
    for m in models:
        s = slug(m)
        while s in names:
            s += "_"
        names.append(s)
    results = []
    for i, (m, s) in enumerate(zip(models, names, strict=True)):
        label = labels[i] if labels and i < len(labels) else None
        cfg = dataclasses.replace(config, model=m, label=label, output_dir=str(Path(config.output_dir) / s))
        results.append(run_eval(cfg))
    write_report(results, config.output_dir)
    return results
