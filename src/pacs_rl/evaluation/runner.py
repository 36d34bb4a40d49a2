"""The evaluation runner: sample n completions per problem, verify them, report pass@k (paper §4.1).

One run = one model on one benchmark, in one folder::

    run.json       the settings the samples were drawn with (checked on resume)
    samples.jsonl  one row per sample, appended (and flushed) chunk by chunk as problems finish
    metrics.json   pass@k per k, counts, reasons, forms of the answers (of the paid ones), settings, timing
    results.md     the table (rows = models, columns = k), passk.png the curve

Resumable: rerunning the same command samples only the (problem, index) pairs missing from
``samples.jsonl``. A different sampling setting (model, benchmark, temperature, top-p, max new tokens,
seed, prompt, backend, dtype, grader) is refused; a larger ``n`` or ``limit`` extends the run. A resumed
run is statistically equivalent to an uninterrupted one; it is bit-identical only when it restarts at a
chunk boundary (each chunk's seed derives from the run seed and its first problem).

:func:`run_evals` runs several models on several benchmarks (each model loaded once) into one folder and
writes one table laid out like the paper's Tables 2 and 3.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pacs_rl.data import Problem, ProblemSet, benchmark_name, format_prompt, load_problems
from pacs_rl.device import CudaInfo, cuda_info, eval_dtype, no_cuda_here
from pacs_rl.evaluation.report import write_report
from pacs_rl.evaluation.samples import (
    append_samples,
    count_correct,
    form_counts,
    read_samples,
    rewrite_samples,
    sample_form,
)
from pacs_rl.models import load_model_and_tokenizer, load_tokenizer
from pacs_rl.progress import started_bar
from pacs_rl.rewards.cutoff import is_cut_off  # light: no math-verify
from pacs_rl.rewards.graders import (  # names only: no math-verify
    DEFAULT_GRADER,
    TRAINING_GRADER,
    grader_name,
    parse_grader,
)
from pacs_rl.run_folder import EVAL_METRICS_FILE, EVAL_RUN_FILE, EVAL_SAMPLES_FILE
from pacs_rl.settings.data import DataSettings
from pacs_rl.settings.declarations import at_least, declared_problems, interval, rule, setting, whole

# pacs_rl.sampling (torch), pacs_rl.rewards (math-verify, sympy) and the pass@k estimator (numpy) are imported where
# they are used: `pacs-rl --help` imports this module through the eval command, which reads EvalConfig's declarations.

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
    "grader",
    "plain_prompt",
    "instruction",
    "system_prompt",
    "prompt_field",
    "chat_template_kwargs",
    "backend",
    "dtype",
)
DTYPES = ("auto", "float32", "bfloat16", "float16")
BACKENDS = ("transformers", "vllm")
# vllm.LLM arguments set from their own options (not through vllm_engine_kwargs)
VLLM_ARGUMENT_OPTIONS = {
    "model": "--model",
    "dtype": "--dtype",
    "max_num_seqs": "--batch-size",
    "tensor_parallel_size": "--tensor-parallel-size",
    "data_parallel_size": "--data-parallel-size",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "max_model_len": "--max-model-len",
}


def _grader(name: str, value: Any) -> str | None:
    if value == "auto":
        return None
    try:
        parse_grader(value)
    except ValueError as e:
        # "grader 'x': ...", the setting named as it is where it sits (a comparison's eval.grader)
        return name + str(e).removeprefix("grader")
    return None


_KS = rule(
    lambda v: v is None or (isinstance(v, list) and all(whole(k) and k >= 1 for k in v)),
    ": give whole numbers >= 1 (and <= n), or null for powers of two up to n",
)


@dataclass
class EvalConfig(DataSettings):
    """Settings of one evaluation run (the ``pacs-rl eval`` options), each declared once: ``name: type =
    setting(default, help, check=...)`` (`pacs_rl.settings.declarations.setting`). The command's options and their
    help, ``--set``, ``--list-keys`` and the checks before torch loads are read from these declarations. The data and
    prompt settings (split, problem_field, answer_field, prompt_field, instruction, system_prompt, skip_bad_rows) are
    :class:`pacs_rl.settings.data.DataSettings`', shared with `pacs-rl train`."""

    model: str = setting(
        dataclasses.MISSING,
        "Model: bundled alias (smollm2-135m), tiny (a tiny random model), Hub id or local folder.",
    )
    benchmark: str = setting(
        dataclasses.MISSING,
        "Benchmark name, .jsonl/.json/.parquet file, Hub dataset id, or procedural task.",
    )
    output_dir: str = setting("eval_runs", "Folder for samples, metrics, table, plot.")
    n: int = setting(32, "Samples per problem (paper: 32 for MATH-500, 512 for AIME/AMC).", check=at_least(1))
    ks: list[int] | None = setting(None, "k values for pass@k; default: powers of two up to n.", check=_KS)
    temperature: float = setting(
        0.6, "Sampling temperature (paper: 0.6; 0 = greedy).", check=interval(0, note=" (0 = greedy)")
    )
    top_p: float = setting(
        0.95,
        "Nucleus sampling top-p (paper, Table 4: 0.95).",
        check=interval(0, 1, open_low=True, note=" (1 = no nucleus cut)"),
    )
    max_new_tokens: int = setting(1024, "Tokens generated at most per sample.", check=at_least(1))
    backend: str = setting(
        "transformers",
        "Sampling engine: transformers or vllm.",
        check=rule(lambda v: v in BACKENDS, ": choose transformers or vllm"),
        choices=BACKENDS,
    )
    dtype: str = setting(
        "auto",
        "Model dtype: auto (bfloat16 on a GPU with bf16, Ampere or newer; float32 otherwise), float32, bfloat16, "
        "float16. With transformers on CPU, bfloat16 keeps fp32 weights and samples under bf16 autocast.",
        check=rule(lambda v: v in DTYPES, f": choose one of {list(DTYPES)}"),
        choices=DTYPES,
    )
    device: str = setting("auto", "transformers device: auto (cuda if any), cpu, cuda:0.")
    num_threads: int | None = setting(
        None,
        "torch CPU threads (torch.set_num_threads); 1 is far faster on an oversubscribed CPU.",
        check=at_least(1, ", or null (torch's own)", null=True),
    )
    batch_size: int = setting(64, "Sequences per generate call of the engine.", check=at_least(1))
    problems_per_chunk: int | None = setting(
        None,
        "Problems sampled between two writes of samples.jsonl; default batch_size // n.",
        check=at_least(1, ", or null", null=True),
    )
    limit: int | None = setting(
        None,
        "Use only the first `limit` problems (file order).",
        check=at_least(1, ", or null (every problem)", null=True),
    )
    seed: int = setting(0, "Sampling seed.", check=interval(0, 2**32 - 1, whole_number=True))
    grader: str = setting(
        "auto",
        "Answer grader: auto (paper on the paper's benchmarks, so tables compare with the paper's; sound on "
        "any other data), sound (the final answer read as a reader reads it, a number where the gold is one, "
        "never the question given back, never a cut-off answer), paper (math-verify as the PACS authors call it), strict (a \\boxed{} answer), paper or "
        "strict with +rules (restatement, multiple_boxed, echo).",
        check=_grader,
    )
    verify_timeout: float = setting(
        3.0, "Seconds per answer check at most.", check=interval(0, open_low=True)
    )
    verify_workers: int = setting(
        1, "Verifier processes (0 = in this process, bounded by a signal timer).", check=at_least(0)
    )
    plain_prompt: bool = setting(
        False, "Use 'Question: ... Answer:' when the tokenizer has no chat template."
    )
    chat_template_kwargs: dict | None = setting(
        None, "Extra chat-template variables, e.g. {'enable_thinking': False} (TRL's field)."
    )
    tensor_parallel_size: int = setting(1, "vLLM: GPUs per model replica.", check=at_least(1))
    data_parallel_size: int = setting(
        1, "vLLM: model replicas (passed to vllm.LLM; needs a vLLM that supports it).", check=at_least(1)
    )
    gpu_memory_utilization: float | None = setting(
        None,
        "vLLM: fraction of GPU memory it may use (default vLLM's, 0.9).",
        check=interval(0, 1, open_low=True),
    )
    max_model_len: int | None = setting(
        None,
        "vLLM: context length (prompt + completion) to reserve per sequence.",
        check=at_least(1, ", or null", null=True),
    )
    vllm_engine_kwargs: dict | None = setting(
        None,
        "vLLM: further vllm.LLM arguments, e.g. {'enforce_eager': True} (no compile: starts in seconds rather "
        "than minutes on a CPU).",
    )
    label: str | None = setting(None, "Row name in results.md (default: the model).")
    progress: bool = setting(True, "Show a progress bar.")

    def resolved_ks(self) -> list[int]:
        if self.ks is None:
            return [2**i for i in range(self.n.bit_length()) if 2**i <= self.n]
        bad = [k for k in self.ks if k < 1 or k > self.n]
        if bad:
            raise ValueError(
                f"k values {bad} are outside 1..n (n = {self.n}); raise --n or drop them from --k"
            )
        return sorted(set(self.ks))

    def resolved_dtype(self) -> str:
        """``dtype`` with ``auto`` made concrete: bfloat16 when sampling on a GPU that computes in bf16, float32
        otherwise (the rule `pacs-rl train` applies to bf16: pacs_rl.device)."""
        if self.dtype != "auto":
            return self.dtype
        if self.backend == "transformers" and self.device != "auto" and not self.device.startswith("cuda"):
            return "float32"
        return eval_dtype(CudaInfo(False) if no_cuda_here() else cuda_info())  # torch only where it must tell

    def locked(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["dtype"] = self.resolved_dtype()
        d["grader"] = self.resolved_grader()  # canonical: paper+echo+restatement = paper+restatement+echo
        return {k: d[k] for k in LOCKED_SETTINGS}

    def prompt_kwargs(self) -> dict[str, Any]:
        """The prompt settings, as :func:`pacs_rl.data.format_prompt` takes them."""
        return {
            "system_prompt": self.system_prompt,
            "instruction": self.instruction,
            "plain_fallback": self.plain_prompt,
            "chat_template_kwargs": self.chat_template_kwargs,
        }

    def problems(self) -> list[str]:
        """Every setting that cannot be used, each naming the setting and what to do (empty when all is well): the
        declared checks, then the rules across settings."""
        out = declared_problems(self, dataclasses.fields(self))
        engine = self.vllm_engine_kwargs or {}
        if engine and self.backend != "vllm":
            out.append(
                f"vllm_engine_kwargs={engine!r} with backend={self.backend!r}: use --backend vllm or drop them"
            )
        taken = sorted(set(engine) & set(VLLM_ARGUMENT_OPTIONS))
        if taken:
            options = ", ".join(VLLM_ARGUMENT_OPTIONS[k] for k in taken)
            out.append(
                f"vllm_engine_kwargs sets {taken}, which have their own options ({options}): use those"
            )
        return out

    def resolved_grader(self) -> str:
        """The grader's canonical name; ``auto`` is ``paper`` on a benchmark of the paper (MATH-500, AIME, AMC,
        Minerva, OlympiadBench, by name) and the training grader, ``sound``, on any other data."""
        if self.grader == "auto":
            return DEFAULT_GRADER if benchmark_name(self.benchmark) else TRAINING_GRADER
        return grader_name(self.grader)


class ResumeMismatch(RuntimeError):
    """The output folder holds samples drawn with other settings."""


# --------------------------------------------------------------------------------------------------
# The run folder


def prepare_run_dir(config: EvalConfig, out: Path) -> tuple[list[dict[str, Any]], int]:
    """Create or reopen a run folder; refuse one whose samples were drawn with other settings.

    Returns the rows already there and the number of broken/duplicate lines removed."""
    problem = resume_problem(config, out)
    if problem:
        raise ResumeMismatch(problem)
    out.mkdir(parents=True, exist_ok=True)
    run_file, samples = out / EVAL_RUN_FILE, out / EVAL_SAMPLES_FILE
    rows, dropped = read_samples(samples)
    if not rows:  # a new run, or one that stopped before its first sample was written
        run_file.write_text(json.dumps({"settings": config.locked(), "created": time.time()}, indent=2))
    if dropped or (samples.exists() and samples.stat().st_size and not samples.read_bytes().endswith(b"\n")):
        rewrite_samples(samples, rows)  # drop a line cut by a crash so appends start on a clean line
    return rows, dropped


def _same_setting(key: str, old: Any, new: Any) -> bool:
    """Whether a locked setting is unchanged. A model given as a folder is the same model under another
    spelling of that folder (relative against absolute, a link): a run started from its parent folder resumes
    from anywhere that names the same folder."""
    if old == new:
        return True
    if key != "model" or not (isinstance(old, str) and isinstance(new, str)):
        return False
    try:
        return os.path.samefile(old, new)
    except OSError:  # either is not a folder here (a hub id, or a folder moved away): the spellings decide
        return False


def resume_problem(config: EvalConfig, out: Path) -> str | None:
    """Why the samples already in ``out`` cannot be resumed by ``config`` (None when there are none, or they can):
    their settings are unknown (no run.json), or a locked setting differs (each one listed). Reads only."""
    run_file, samples = out / EVAL_RUN_FILE, out / EVAL_SAMPLES_FILE
    rows, _ = read_samples(samples)
    if not rows:
        return None
    if not run_file.exists():
        return (
            f"{samples} holds samples but {run_file} is missing, so their settings are unknown. "
            "Use another --output-dir."
        )
    old = json.loads(run_file.read_text()).get("settings", {})
    diff = {k: (old.get(k), v) for k, v in config.locked().items() if not _same_setting(k, old.get(k), v)}
    if not diff:
        return None
    lines = "\n".join(f"  {k}: samples have {a!r}, this command has {b!r}" for k, (a, b) in diff.items())
    return (
        f"{out} holds samples drawn with other settings:\n{lines}\n"
        "Use another --output-dir, or rerun with the settings above to resume."
    )


# --------------------------------------------------------------------------------------------------
# Metrics


def compute_metrics(
    rows: list[dict[str, Any]], problem_ids: list[str], n: int, ks: list[int]
) -> tuple[dict[str, float], list[int]]:
    """pass@k (eq. 10) over ``problem_ids`` from their first ``n`` samples. Returns pass@k by k (as
    str keys, for JSON) and the number of correct samples per problem."""
    from pacs_rl.algorithms.passk import mean_pass_at_k  # numpy: kept out of the command's start

    counts = count_correct(rows, n)
    missing = [pid for pid in problem_ids if pid not in counts or counts[pid].samples != n]
    if missing:
        raise RuntimeError(
            f"{len(missing)} problem(s) lack samples (first: {missing[0]!r}); rerun to complete"
        )
    cs = [counts[pid].correct for pid in problem_ids]
    scores = mean_pass_at_k([n] * len(cs), cs, ks)
    return {str(k): float(v) for k, v in sorted(scores.items())}, cs


@dataclass
class RunTiming:
    """What this invocation of :func:`run_eval` did and how long it took: metrics.json's ``timing``."""

    started: float = field(default_factory=time.perf_counter)
    reused: int = 0  # samples of this evaluation found in samples.jsonl
    dropped_lines: int = 0
    generated: int = 0
    tokens: int = 0
    load_seconds: float = 0.0
    generation_seconds: float = 0.0
    verification_seconds: float = 0.0

    def as_metrics(self) -> dict[str, Any]:
        gen = self.generation_seconds
        harness = time.perf_counter() - self.started - self.load_seconds - gen
        return {
            "samples_generated_this_run": self.generated,
            "samples_reused_from_earlier_runs": self.reused,
            "broken_lines_dropped": self.dropped_lines,
            "model_load_seconds": round(self.load_seconds, 3),
            "generation_seconds": round(gen, 3),
            "verification_seconds": round(self.verification_seconds, 3),
            "harness_seconds": round(harness, 3),
            "harness_overhead_fraction": round(harness / gen, 5) if gen > 0 else None,
            "generated_tokens": self.tokens,
            "tokens_per_second": round(self.tokens / gen, 2) if gen > 0 else None,
            "samples_per_second": round(self.generated / gen, 3) if gen > 0 else None,
        }


def assemble_metrics(
    config: EvalConfig, problems: ProblemSet, rows: list[dict[str, Any]], ks: list[int], timing: RunTiming
) -> dict[str, Any]:
    """The content of metrics.json, from every row of the samples file (complete for ``problems``)."""
    pass_at_k, correct = compute_metrics(rows, [p.id for p in problems], config.n, ks)
    used = rows_of(rows, problems, config.n)
    return {
        "label": config.label or config.model,
        "model": config.model,
        "benchmark": config.benchmark,
        "grader": config.resolved_grader(),
        "n": config.n,
        "ks": ks,
        "num_problems": len(problems),
        "pass_at_k": pass_at_k,
        "mean_score": sum(float(r["score"]) for r in used) / len(used),
        "problems_solved_at_n": sum(c > 0 for c in correct),
        "reasons": dict(Counter(r["reason"] for r in used).most_common()),
        # the forms of the answers read (pacs_rl.rewards.answers.FORMS): a paid answer that is not plain may be
        # the grader paid for something other than the task; "unknown" counts rows written before forms existed
        "paid_forms": form_counts(used, paid_only=True),
        "forms": form_counts(used),
        "finish_reasons": dict(Counter(str(r.get("finish_reason")) for r in used).most_common()),
        # paid answers cut off at the token limit: the paper's grader pays some (its verdicts stay the paper's), the
        # training grader none
        "paid_cut_off": sum(float(r["score"]) >= 0.5 and r.get("finish_reason") == "length" for r in used),
        "mean_completion_tokens": sum(int(r.get("num_tokens", 0)) for r in used) / len(used),
        "skipped_rows": problems.skipped,
        "skipped_examples": problems.skip_messages[:5],
        "sampling": {
            "temperature": config.temperature,
            "top_p": config.top_p,
            "max_new_tokens": config.max_new_tokens,
            "seed": config.seed,
            "backend": config.backend,
            "dtype": config.resolved_dtype(),
            "batch_size": config.batch_size,
        },
        "settings": dataclasses.asdict(config),
        "timing": timing.as_metrics(),
    }


# --------------------------------------------------------------------------------------------------
# What to sample


def eval_problems(config: EvalConfig, problems: list[Problem] | None = None) -> ProblemSet:
    """The problems to evaluate: ``problems`` cut to ``config.limit``, else ``config.benchmark`` loaded.

    Raises DataError for a bad source, ValueError when there is no problem."""
    if problems is None:
        problems = load_problems(config.benchmark, limit=config.limit, **config.loader_kwargs())
    elif not isinstance(problems, ProblemSet):  # given by the caller: no rows were skipped here
        problems = ProblemSet(problems[: config.limit] if config.limit else problems, source=config.benchmark)
    if not problems:
        raise ValueError(f"no problems to evaluate in {config.benchmark!r}")
    return problems


def rows_of(rows: list[dict[str, Any]], problems: list[Problem], n: int) -> list[dict[str, Any]]:
    """The rows that belong to this evaluation: a problem of ``problems``, a sample index below ``n``."""
    ids = {p.id for p in problems}
    return [r for r in rows if str(r["problem_id"]) in ids and int(r["sample_index"]) < n]


def missing_samples(
    problems: list[Problem], rows: list[dict[str, Any]], n: int
) -> list[tuple[Problem, list[int]]]:
    """Per problem, the sample indices of 0..n-1 that ``rows`` lacks; problems lacking none are left out."""
    have: dict[str, set[int]] = {}
    for r in rows:
        have.setdefault(str(r["problem_id"]), set()).add(int(r["sample_index"]))
    todo = [(p, [i for i in range(n) if i not in have.get(p.id, set())]) for p in problems]
    return [(p, missing) for p, missing in todo if missing]


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


# --------------------------------------------------------------------------------------------------
# Sampling and verification


def build_sampler(config: EvalConfig):
    """Load the model and its sampling engine. Returns (sampler, tokenizer).

    transformers: ``bfloat16`` on a GPU loads bf16 weights; on CPU it keeps fp32 weights and samples under
    bf16 autocast (AMX); float16 loads half weights. vllm: the engine loads the weights itself, with the
    parallelism and memory settings of ``config``."""
    from pacs_rl.sampling import get_sampler  # torch

    dtype = config.resolved_dtype()
    if config.backend == "vllm":
        tokenizer = load_tokenizer(config.model)
        llm_kwargs = {
            "tensor_parallel_size": config.tensor_parallel_size,
            "data_parallel_size": config.data_parallel_size,
            "gpu_memory_utilization": config.gpu_memory_utilization,
            "max_model_len": config.max_model_len,
        }
        # vLLM's own defaults for what is unset (a data_parallel_size of 1 is not passed: older vLLMs lack it)
        defaults = {"tensor_parallel_size": 1, "data_parallel_size": 1}
        llm_kwargs = {k: v for k, v in llm_kwargs.items() if v is not None and v != defaults.get(k)}
        llm_kwargs.update(config.vllm_engine_kwargs or {})
        sampler = get_sampler(
            "vllm", config.model, tokenizer, dtype=dtype, batch_size=config.batch_size, **llm_kwargs
        )
        return sampler, tokenizer
    if config.backend != "transformers":
        raise ValueError(f"unknown backend {config.backend!r}; use transformers or vllm")
    import torch

    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    device = config.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    autocast = dtype == "bfloat16" and not device.startswith("cuda")
    model, tokenizer = load_model_and_tokenizer(
        config.model, dtype="float32" if autocast else dtype, device=device
    )
    model.eval()
    sampler = get_sampler(
        "transformers", model, tokenizer, dtype="bfloat16" if autocast else None, batch_size=config.batch_size
    )
    return sampler, tokenizer


@contextlib.contextmanager
def open_verifier(config: EvalConfig) -> Iterator[Callable[..., Any]]:
    """Yield verify(completions, answers, questions, truncated) -> BatchResult with ``config``'s grader and time
    limit (``truncated``: which completions were cut off at the token limit, refused by the training grader): in
    a RewardPool of ``config.verify_workers`` processes (closed on exit), or in this process when 0."""
    from pacs_rl.rewards import RewardPool, verify_batch  # math-verify, sympy

    grader, timeout = config.resolved_grader(), config.verify_timeout
    if config.verify_workers <= 0:
        yield lambda completions, answers, questions, truncated=None: verify_batch(
            completions, answers, grader, 0, timeout, prompts=questions, truncated=truncated
        )
        return
    with RewardPool(num_workers=config.verify_workers, timeout=timeout) as pool:
        yield lambda completions, answers, questions, truncated=None: pool.verify_batch(
            completions, answers, grader, prompts=questions, truncated=truncated
        )


class _Progress:
    """A rich progress bar over samples with samples/s and the running accuracy (a context manager)."""

    def __init__(self, enabled: bool, total: int, done: int, correct: float, label: str):
        self.correct, self.done, self.new, self.t0 = correct, done, 0, time.perf_counter()
        fields = ("{task.fields[rate]} samples/s", "acc {task.fields[acc]}")
        self.bar = started_bar(
            label, total, *fields, enabled=enabled, completed=done, rate="-", acc=self._acc()
        )

    def _acc(self) -> str:
        return f"{self.correct / self.done:.3f}" if self.done else "-"

    def advance(self, k: int, correct: float) -> None:
        self.done, self.new, self.correct = self.done + k, self.new + k, self.correct + correct
        if self.bar is not None:
            rate = self.new / max(time.perf_counter() - self.t0, 1e-9)
            self.bar.update(0, advance=k, rate=f"{rate:.2f}", acc=self._acc())

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def sample_chunk(config: EvalConfig, sampler, tokenizer, chunk: list[tuple[Problem, list[int]]]) -> list:
    """Draw the missing samples of one chunk (its problems all miss the same number m of them).

    Returns, per problem of the chunk, its m samples. Raises RuntimeError when the sampler returns
    another number of prompts or samples."""
    from pacs_rl.sampling import SamplingParams  # torch

    first, first_missing = chunk[0]
    kwargs = config.prompt_kwargs()
    prompts = [format_prompt(tokenizer, p.problem, messages=p.messages, **kwargs) for p, _ in chunk]
    params = SamplingParams(
        n=len(first_missing),
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        seed=_chunk_seed(config.seed, first.id, first_missing[0]),
    )
    outputs = sampler.generate(prompts, params)
    if len(outputs) != len(chunk):
        raise RuntimeError(f"sampler returned {len(outputs)} outputs for {len(chunk)} prompts")
    for (p, missing), samples in zip(chunk, outputs, strict=True):
        if len(samples) != len(missing):
            raise RuntimeError(f"sampler returned {len(samples)} samples for {p.id}, expected {len(missing)}")
    return outputs


def sample_rows(
    chunk: list[tuple[Problem, list[int]]], outputs: list, verdicts: list
) -> list[dict[str, Any]]:
    """The samples.jsonl rows of a chunk: one per sample, with its verdict (``verdicts`` in sample order), the
    form of its answer (:func:`sample_form`) and the question it answers."""
    verdict = iter(verdicts)
    rows = []
    for (p, missing), samples in zip(chunk, outputs, strict=True):
        for idx, s in zip(missing, samples, strict=True):
            v = next(verdict)
            rows.append(
                {
                    "problem_id": p.id,
                    "sample_index": idx,
                    "completion": s.text,
                    "extracted": v.extracted,
                    "score": float(v.score),
                    "reason": v.reason,
                    "form": sample_form(v.form, v.score >= 0.5, s.finish_reason == "length"),
                    "finish_reason": s.finish_reason,
                    "num_tokens": len(s.token_ids),
                    "answer": p.answer,
                    "problem": p.problem,  # the question, for `pacs-rl audit` to grade again without the data
                }
            )
    return rows


def sample_missing(
    config: EvalConfig,
    todo: list[tuple[Problem, list[int]]],
    sampler,
    tokenizer,
    samples_file: IO[str],
    timing: RunTiming,
    bar: _Progress,
) -> list[dict[str, Any]]:
    """Sample, verify and append to ``samples_file`` every missing sample of ``todo``, chunk by chunk, so
    that an interrupted run keeps every finished chunk. Returns the new rows."""
    # vLLM schedules its own batches: larger chunks keep it busy.
    per_chunk = config.batch_size if config.backend == "transformers" else max(config.batch_size, 1024)
    new_rows: list[dict[str, Any]] = []
    with open_verifier(config) as verify:
        for chunk in plan_chunks(todo, per_chunk, config.problems_per_chunk):
            t0 = time.perf_counter()
            outputs = sample_chunk(config, sampler, tokenizer, chunk)
            timing.generation_seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            pairs = [(p, s) for (p, _), samples in zip(chunk, outputs, strict=True) for s in samples]
            result = verify(
                [s.text for _, s in pairs],
                [p.answer for p, _ in pairs],
                [p.problem for p, _ in pairs],
                [is_cut_off(s.token_ids, None, finish_reason=s.finish_reason) for _, s in pairs],
            )
            timing.verification_seconds += time.perf_counter() - t0
            rows = sample_rows(chunk, outputs, result.verdicts)
            append_samples(samples_file, rows)
            new_rows += rows
            timing.generated += len(rows)
            timing.tokens += sum(r["num_tokens"] for r in rows)
            bar.advance(len(rows), sum(r["score"] for r in rows))
    return new_rows


# --------------------------------------------------------------------------------------------------
# Running


def run_eval(
    config: EvalConfig,
    sampler=None,
    tokenizer=None,
    problems=None,
    load: Callable[[], tuple[Any, Any]] | None = None,
) -> dict[str, Any]:
    """Run (or resume) one evaluation into ``config.output_dir``; return the metrics written.

    ``sampler``/``tokenizer`` may be passed in (already loaded), or ``load()`` returns them when sampling
    is needed; otherwise they are built from ``config.model`` and ``config.backend``. ``problems``
    overrides loading ``config.benchmark`` (a ProblemSet from :func:`eval_problems` keeps its skipped rows).
    """
    timing = RunTiming()
    problems_found = config.problems()
    if problems_found:
        raise ValueError("; ".join(problems_found))
    ks = config.resolved_ks()
    out = Path(config.output_dir)
    problems = eval_problems(config, problems)
    rows, timing.dropped_lines = prepare_run_dir(config, out)
    reused = rows_of(rows, problems, config.n)
    timing.reused = len(reused)
    todo = missing_samples(problems, rows, config.n)
    if todo:
        t0 = time.perf_counter()
        if sampler is None:
            sampler, tokenizer = (load or functools.partial(build_sampler, config))()
        elif tokenizer is None:
            raise ValueError("pass the tokenizer together with the sampler")
        timing.load_seconds = time.perf_counter() - t0
        label = f"{config.label or config.model} on {config.benchmark}"
        total, correct = len(problems) * config.n, sum(float(r["score"]) for r in reused)
        with (
            (out / EVAL_SAMPLES_FILE).open("a", encoding="utf-8") as f,
            _Progress(config.progress, total, len(reused), correct, label) as bar,
        ):
            rows += sample_missing(config, todo, sampler, tokenizer, f, timing, bar)
    metrics = assemble_metrics(config, problems, rows, ks, timing)
    (out / EVAL_METRICS_FILE).write_text(json.dumps(metrics, indent=2))
    write_report([metrics], out)
    return metrics


def bench_slug(source: str) -> str:
    """A folder name for a benchmark: its name (``MATH-500`` -> ``math500``), a file's stem, else the source."""
    name = benchmark_name(source)
    if name:
        return name
    p = Path(source)
    base = p.stem if p.suffix.lower() in (".jsonl", ".json", ".parquet") else source
    return re.sub(r"[^A-Za-z0-9._+-]", "_", base) or "benchmark"


def _unique(names: list[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        while name in out:
            name += "_"
        out.append(name)
    return out


# The paper's samples per problem (§4.1): 32 for MATH-500, 512 for the small AIME and AMC sets.
PAPER_N = {"math500": 32, "aime24": 512, "aime25": 512, "amc23": 512}


def parse_samples(text: str, benchmarks: list[str]) -> tuple[int, dict[str, int]]:
    """``--n`` (and a comparison's eval.n): ``32``; ``math500=32,aime24=512``; ``paper`` (32 for MATH-500, 512 for
    AIME and AMC); or a mix (``16,aime24=512``). Returns (n for benchmarks not named, n by benchmark).
    Raises ValueError naming the text."""
    default, by_bench = 32, {}
    for item in (x.strip() for x in str(text).split(",") if x.strip()):
        key, sep, value = item.rpartition("=")
        try:
            if item == "paper":
                names = {benchmark_name(b) for b in benchmarks}
                by_bench.update({k: v for k, v in PAPER_N.items() if k in names})
            elif sep:
                by_bench[key.strip()] = int(value)
            else:
                default = int(item)
        except ValueError:
            raise ValueError(
                f"--n takes a number (32), benchmark=number pairs (math500=32,aime24=512) or 'paper'; got {text!r}"
            ) from None
    bad = {k: v for k, v in {"": default, **by_bench}.items() if v < 1}
    if bad:
        raise ValueError(f"--n {text!r}: samples per problem must be >= 1")
    return default, by_bench


def samples_per_benchmark(benchmarks: list[str], n: dict[str, int] | None, default: int) -> list[int]:
    """``n`` for each benchmark: ``n[key]`` where key is the benchmark as given, its name or its folder
    name (``math500``), else ``default``. A key that matches no benchmark is refused (a typo)."""
    n = dict(n or {})
    keys = [{b, bench_slug(b), benchmark_name(b) or b} for b in benchmarks]
    stray = [k for k in n if not any(k in ks or benchmark_name(k) in ks for ks in keys)]
    if stray:
        raise ValueError(
            f"--n names {stray}, which match none of the benchmarks {[bench_slug(b) for b in benchmarks]}"
        )
    out = []
    for ks in keys:
        hits = [v for k, v in n.items() if k in ks or benchmark_name(k) in ks]
        out.append(hits[-1] if hits else default)
    return out


def plan_evals(
    config: EvalConfig,
    models: list[str],
    labels: list[str] | None = None,
    benchmarks: list[str] | None = None,
    n: dict[str, int] | None = None,
) -> list[list[EvalConfig]]:
    """The evaluation runs of :func:`run_evals`, one list of configs per model (one per benchmark), each
    checked; nothing is read or loaded. Raises ValueError naming a setting that cannot be used."""
    benchmarks = list(benchmarks or [config.benchmark])
    ns = samples_per_benchmark(benchmarks, n, config.n)
    model_dirs, bench_dirs = _unique([slug(m) for m in models]), _unique([bench_slug(b) for b in benchmarks])
    per_model: list[list[EvalConfig]] = []
    for i, m in enumerate(models):
        label = labels[i] if labels and i < len(labels) else config.label
        root = Path(config.output_dir) / model_dirs[i] if len(models) > 1 else Path(config.output_dir)
        runs = []
        for b, bn, bdir in zip(benchmarks, ns, bench_dirs, strict=True):
            ks = config.ks
            if ks and len(benchmarks) > 1:
                ks = [k for k in ks if k <= bn] or ks  # none fits: resolved_ks names the problem
            out = root / bdir if len(benchmarks) > 1 else root
            runs.append(
                dataclasses.replace(
                    config, model=m, benchmark=b, n=bn, ks=ks, label=label, output_dir=str(out)
                )
            )
        per_model.append(runs)
    for cfg in (c for runs in per_model for c in runs):  # every setting checked before any model loads
        problems = cfg.problems()
        if problems:
            raise ValueError("; ".join(problems))
        cfg.resolved_ks()
    return per_model


def run_evals(
    config: EvalConfig,
    models: list[str],
    labels: list[str] | None = None,
    benchmarks: list[str] | None = None,
    n: dict[str, int] | None = None,
    problems: dict[str, ProblemSet] | None = None,
) -> list[dict[str, Any]]:
    """Evaluate several models on several benchmarks, each model loaded once; return every run's metrics.
    ``problems``: benchmarks already read (`load_problems` with the config's data settings), by source.

    Folders: one model and one benchmark -> ``output_dir``; several benchmarks -> ``output_dir/<benchmark>``;
    several models -> ``output_dir/<model>`` (``output_dir/<model>/<benchmark>`` with several benchmarks).
    With more than one run, ``output_dir`` also gets the combined ``results.md`` (laid out like the paper's
    Tables 2 and 3) and ``passk.png``. ``n`` maps benchmarks to their sample counts (paper: 32 for
    MATH-500, 512 for AIME and AMC; others ``config.n``); ``config.ks`` above a benchmark's n are left out
    for that benchmark.
    """
    per_model = plan_evals(config, models, labels, benchmarks, n)
    # every benchmark read once, before any folder is written or any model loads: a bad source fails first
    given = problems or {}
    loaded = {cfg.benchmark: eval_problems(cfg, given.get(cfg.benchmark)) for cfg in per_model[0]}
    results = []
    for runs in per_model:
        load = functools.cache(functools.partial(build_sampler, runs[0]))  # the model loads once, if needed
        results += [run_eval(cfg, load=load, problems=loaded[cfg.benchmark]) for cfg in runs]
    if len(results) > 1:
        write_report(results, config.output_dir)
    return results
