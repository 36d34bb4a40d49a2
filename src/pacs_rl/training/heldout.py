"""Held-out accuracy: before and after training, and periodically during it.

One process without vLLM: `heldout_accuracy` evaluates the local model with the fast sampler. Greedy decoding
(temperature 0) by default: one completion per problem, scored by the same verifier as the training reward. Kept
small on purpose; `pacs-rl eval` is the full pass@k protocol.

A run on several processes, with sharded weights (DeepSpeed ZeRO-3, FSDP) or with vLLM generating the rollouts
evaluates through the trainer's own generation engine instead (`needs_engine`), once per run across processes,
through `PACSTrainer._generate_single_turn` (vLLM colocate or server, transformers `generate` with the ZeRO-3
gather, or the fast sampler: whatever generates the rollouts):

    problems  ->  process r takes the r-th contiguous share, padded to the same length on every process
              ->  n samples per problem at the evaluation's temperature / top-p / length
              ->  graded by the run's reward function, gathered on every process (accelerate gather_object)

Every process makes the same number of generation calls (collectives inside vLLM, ZeRO-3 and FSDP need that);
padding rows are generated and dropped. The sampling settings are swapped in for the evaluation only, and the
random state of every generator (python, numpy, torch, CUDA) is restored afterwards, so evaluating does not
change the training run's random stream. `PeriodicEvalCallback` runs an evaluation every ``eval_steps`` optimizer
steps, `CallOnTrainBegin` the "before" one once training is set up.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from transformers import TrainerCallback

from pacs_rl import stopping
from pacs_rl.algorithms.passk import pass_at_k
from pacs_rl.data import encode_prompts
from pacs_rl.progress import advancing
from pacs_rl.rewards import make_math_reward_func, math_reward_func
from pacs_rl.rewards.cutoff import is_cut_off
from pacs_rl.run_folder import HELDOUT_FILE, SAMPLES_DIR, heldout_samples_file
from pacs_rl.sampling import SamplingParams, TransformersSampler
from pacs_rl.training.config import PACSConfig
from pacs_rl.training.monitor import paid_form
from pacs_rl.training.schema import RunSettings


# ------------------------------------------------------------------------------------------ on the local model
def heldout_accuracy(
    model,
    tokenizer,
    problems,
    max_new_tokens: int = 96,
    batch_size: int = 32,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    reward_func=None,
    progress: bool = True,
    description: str = "held-out",
    prompt_kwargs: dict | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> dict:
    """Accuracy of ``model`` on ``problems`` (list of pacs_rl.data.Problem), one completion each.

    Sampled with pacs_rl.sampling.TransformersSampler (temperature 0 = greedy). Returns {"accuracy", "n",
    "correct", "mean_length", "paid_forms", "paid_cut_off", "samples"}: ``paid_forms`` counts the forms of the paid
    answers (:mod:`pacs_rl.training.monitor`; empty for a reward function that gives no verdicts),
    ``paid_cut_off`` the paid answers cut off at the token limit (0 under the training grader, which is told and
    refuses them), ``samples`` one row per problem (its completion and verdict). The global torch RNG is saved and
    restored, so calling this does not change a training run's random stream. ``prompt_kwargs``: the run's prompt settings, as
    ``pacs_rl.data.format_prompt`` takes them (default: the paper's prompt). ``on_batch(done)``: called after each
    batch with the number of problems answered so far.
    """
    reward_func = reward_func or math_reward_func
    rng_state = torch.get_rng_state()
    sampler = TransformersSampler(model, tokenizer, batch_size=batch_size)  # restores train/eval mode itself
    rows, paid_forms = [], Counter()
    try:
        batches = [problems[i : i + batch_size] for i in range(0, len(problems), batch_size)]
        with advancing(description, len(problems), enabled=progress) as advance:
            for k, batch in enumerate(batches):
                stopping.check()  # a stop asked for by a signal lands between batches too
                prompt_ids = encode_prompts(tokenizer, batch, prompt_kwargs)
                params = SamplingParams(
                    n=1,
                    temperature=temperature,
                    top_p=top_p if temperature > 0 else 1.0,
                    max_new_tokens=max_new_tokens,
                    seed=seed + k,
                )
                samples = [group[0] for group in sampler.generate_ids(prompt_ids, params)]
                rows += _graded_rows(batch, samples, reward_func, paid_forms)
                advance(len(batch))
                if on_batch is not None and len(rows) < len(problems):  # the last batch: the result says it
                    on_batch(len(rows))
    finally:
        torch.set_rng_state(rng_state)
    return _accuracy_result(len(problems), rows, paid_forms)


def _graded_rows(batch, samples, reward_func, paid_forms: Counter) -> list[dict]:
    """One row per problem of ``batch`` (its completion, score and verdict), ``samples`` graded by ``reward_func``
    as in training (told which were cut off at the token limit); the forms of the paid answers are counted into
    ``paid_forms``."""
    scores = reward_func(
        [[{"role": "assistant", "content": s.text}] for s in samples],
        answer=[p.answer for p in batch],
        problem=[p.problem for p in batch],  # the question, for graders that read it
        truncated=[is_cut_off(s.token_ids, None, finish_reason=s.finish_reason) for s in samples],
    )
    result = getattr(reward_func, "last_result", None)
    verdicts = result.verdicts if result is not None else [None] * len(samples)
    rows = []
    for p, s, score, v in zip(batch, samples, scores, verdicts, strict=True):
        rows.append(
            {
                "problem_id": p.id,
                "problem": p.problem,
                "answer": p.answer,
                "completion": s.text,
                "score": float(score),
                "reason": v and v.reason,
                "extracted": v and v.extracted,
                "form": v and v.form,
                "num_tokens": len(s.token_ids),
                "finish_reason": s.finish_reason,
            }
        )
        if score == 1.0 and v is not None:
            paid_forms[paid_form(v.form, s.finish_reason == "length")] += 1
    return rows


def _accuracy_result(n: int, rows: list[dict], paid_forms: Counter) -> dict:
    """`heldout_accuracy`'s result from its ``n`` graded rows: a sample is correct when it scored 1."""
    correct = int(sum(r["score"] == 1.0 for r in rows))
    lengths = [r["num_tokens"] for r in rows]
    return {
        "accuracy": correct / n if n else float("nan"),
        "n": n,
        "correct": correct,
        "mean_length": sum(lengths) / max(len(lengths), 1),
        "paid_forms": dict(paid_forms),
        "paid_cut_off": sum(r["score"] == 1.0 and r["finish_reason"] == "length" for r in rows),
        "samples": rows,
    }


# ------------------------------------------------------------------------------- through the trainer's engine
def needs_engine(trainer) -> bool:
    """Whether held-out accuracy must go through the trainer's engine (vLLM, several processes, sharded weights)
    rather than `heldout_accuracy` on the local model."""
    acc = trainer.accelerator
    sharded = acc.distributed_type.value in ("DEEPSPEED", "FSDP")
    return bool(trainer.use_vllm) or acc.num_processes > 1 or sharded


def engine_name(trainer) -> str:
    """What generates through `PACSTrainer._generate_single_turn`: 'vllm-colocate', 'vllm-server', 'fast-sampler'
    (pacs_rl.sampling) or 'transformers-generate'. Recorded with each held-out result."""
    if trainer.use_vllm:
        return f"vllm-{trainer.vllm_mode}"
    return "fast-sampler" if trainer.args.fast_sampler else "transformers-generate"


@contextlib.contextmanager
def _rng_preserved():
    state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
        torch.set_rng_state(state[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@contextlib.contextmanager
def _evaluation_sampling(trainer, temperature: float, top_p: float, max_new_tokens: int):
    """Point every generation engine of ``trainer`` at the evaluation's sampling settings, then restore them:
    the fast sampler reads trainer.temperature / top_p / max_completion_length, transformers' generate reads
    trainer.generation_config, vLLM reads the same names on trainer.vllm_generation."""
    greedy = temperature == 0
    saved = {k: getattr(trainer, k) for k in ("temperature", "top_p", "max_completion_length")}
    gen = getattr(trainer, "generation_config", None)  # TRL builds none when vLLM generates
    if gen is not None:
        saved["generation_config"] = gen
        gen = copy.deepcopy(gen)
        gen.max_new_tokens = max_new_tokens
        gen.do_sample = not greedy
        gen.temperature, gen.top_p = (None, None) if greedy else (temperature, top_p)
    vllm = getattr(trainer, "vllm_generation", None)
    vllm_saved = (
        {k: getattr(vllm, k) for k in ("temperature", "top_p", "max_completion_length")} if vllm else {}
    )
    values = {
        "temperature": temperature,
        "top_p": 1.0 if greedy else top_p,
        "max_completion_length": max_new_tokens,
    }
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    was_training = unwrapped.training
    try:
        for k, v in values.items():
            setattr(trainer, k, v)
            if vllm is not None:
                setattr(vllm, k, v)  # vLLM: temperature 0 is greedy
        if gen is not None:
            trainer.generation_config = gen
        unwrapped.eval()
        yield
    finally:
        for k, v in saved.items():
            setattr(trainer, k, v)
        for k, v in vllm_saved.items():
            setattr(vllm, k, v)
        unwrapped.train(was_training)


def sample_and_grade(
    trainer,
    problems,
    n: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    reward_func,
    batch_size: int,
    seed: int,
    prompt_kwargs: dict | None = None,
    tally: Counter | None = None,
) -> tuple[list[int], list[float]]:
    """(correct samples out of n, mean completion length) per problem, in the order of ``problems``, on every
    process. A sample is correct when the reward function scores it 1; the reward function is told which samples
    were cut off at the token limit (keyword ``truncated``), and ``tally`` (when given) counts them over every
    process: ``cut_off``, and ``paid_cut_off`` among the correct ones. ``prompt_kwargs``: the run's prompt
    settings, as ``pacs_rl.data.format_prompt`` takes them (default: the paper's prompt)."""
    acc = trainer.accelerator
    world, rank = acc.num_processes, acc.process_index
    per = math.ceil(len(problems) / world)  # every process: the same number of rows, padded
    mine = list(range(rank * per, min((rank + 1) * per, len(problems))))
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    local: list[tuple[int, int, float, int, int]] = []
    with _rng_preserved(), _evaluation_sampling(trainer, temperature, top_p, max_new_tokens), torch.no_grad():
        torch.manual_seed(seed + rank)
        for start in range(0, per, batch_size):
            stopping.check()  # a stop asked for by a signal lands between batches too
            rows = mine[start : start + batch_size]
            size = min(batch_size, per - start)
            batch = [problems[i] for i in rows] + [problems[0]] * (size - len(rows))  # padding rows
            prompt_ids = encode_prompts(tokenizer, batch, prompt_kwargs)
            completions, _ = trainer._generate_single_turn(
                [ids for ids in prompt_ids for _ in range(n)], None, {}, n
            )  # n samples of each prompt, contiguous
            kept = completions[: len(rows) * n]
            if not rows:  # this process's share ended: it only kept the others' collectives in step
                continue
            # the whole call's completions: the fast sampler's finish reasons are kept for exactly those
            cut = trainer.completion_cut_offs(completions)[: len(kept)]
            texts = tokenizer.batch_decode(kept, skip_special_tokens=True)
            scores = reward_func(
                [[{"role": "assistant", "content": t}] for t in texts],
                answer=[problems[i].answer for i in rows for _ in range(n)],
                problem=[problems[i].problem for i in rows for _ in range(n)],  # for graders that read it
                truncated=cut,
            )
            for j, i in enumerate(rows):
                group = range(j * n, (j + 1) * n)
                paid = [scores[k] == 1.0 for k in group]
                paid_cut = sum(p and cut[k] for p, k in zip(paid, group, strict=True))
                mean_length = sum(len(kept[k]) for k in group) / n
                local.append((i, int(sum(paid)), mean_length, sum(cut[k] for k in group), paid_cut))
    if world > 1:
        local = gather_object(local)
    ordered = sorted(local)
    if tally is not None:
        tally["cut_off"] += sum(row[3] for row in ordered)
        tally["paid_cut_off"] += sum(row[4] for row in ordered)
    return [row[1] for row in ordered], [row[2] for row in ordered]


def engine_accuracy(
    trainer, problems, temperature, top_p, max_new_tokens, reward_func, batch_size, seed, prompt_kwargs=None
) -> dict:
    """Held-out accuracy (one completion per problem) through the engine: the keys of `heldout_accuracy` but its
    samples and paid forms, the share cut off at the token limit (``truncated_frac``), and `engine`
    (`engine_name`)."""
    tally: Counter = Counter()
    args = (temperature, top_p, max_new_tokens, reward_func, batch_size, seed, prompt_kwargs, tally)
    correct, lengths = sample_and_grade(trainer, problems, 1, *args)
    n = len(problems)
    return {
        "accuracy": sum(correct) / n if n else float("nan"),
        "n": n,
        "correct": sum(correct),
        "mean_length": sum(lengths) / max(n, 1),
        "paid_cut_off": tally["paid_cut_off"],
        "truncated_frac": tally["cut_off"] / n if n else float("nan"),
        "engine": engine_name(trainer),
    }


def passk_ks(n: int) -> list[int]:
    """The k of pass@k reported for n samples: powers of two up to n, and n itself."""
    ks = [2**i for i in range(int(math.log2(n)) + 1)] if n >= 1 else []
    return ks + ([n] if n not in ks else [])


def engine_pass_at_k(
    trainer,
    problems,
    n,
    temperature,
    top_p,
    max_new_tokens,
    reward_func,
    batch_size,
    seed,
    prompt_kwargs=None,
) -> dict[str, float]:
    """pass@k (the unbiased estimator, mean over problems) for k in passk_ks(n), and the mean completion length."""
    correct, lengths = sample_and_grade(
        trainer, problems, n, temperature, top_p, max_new_tokens, reward_func, batch_size, seed, prompt_kwargs
    )
    out = {f"pass@{k}": float(np.mean(pass_at_k(n, np.asarray(correct), k))) for k in passk_ks(n)}
    out["mean_length"] = float(np.mean(lengths)) if lengths else float("nan")
    return out


class PeriodicEvalCallback(TrainerCallback):
    """Every ``every`` optimizer steps, run ``evaluate()`` (a dict of floats) and queue its values as
    ``eval/<key>`` in the trainer's metrics, so they reach metrics.jsonl and the trackers in the step's log row
    (verl's test_freq, OpenRLHF's eval_steps)."""

    def __init__(self, trainer, every: int, evaluate):
        self.trainer, self.every, self.evaluate = trainer, every, evaluate

    def on_step_end(self, args, state, control, **kwargs):
        if self.every > 0 and state.global_step % self.every == 0:
            for key, value in self.evaluate().items():
                self.trainer._metrics["train"][f"eval/{key}"].append(value)
        return control


class CallOnTrainBegin(TrainerCallback):
    """Call ``fn()`` once training is set up (model prepared and placed, checkpoint loaded), before the first
    step: where the held-out "before" evaluation runs on every engine."""

    def __init__(self, fn):
        self.fn = fn

    def on_train_begin(self, args, state, control, **kwargs):
        self.fn(state)
        return control


# ---------------------------------------------------------------------------------------------------- a run's
def heldout_reward(settings: RunSettings):
    """What held-out accuracy counts: the math verifier with the run's resolved grader."""
    return make_math_reward_func(settings.resolved_grader())


class HeldOut:
    """Held-out accuracy before and after training, kept in OUT/heldout.json (a resumed run keeps "before").

    One process without vLLM: `heldout_accuracy` on the local model (the fast sampler). Several processes, sharded
    weights or vLLM: the trainer's own engine, each process a share of the problems, gathered
    (`heldout.engine_accuracy`). Only the main process writes the file."""

    def __init__(self, settings: RunSettings, config: PACSConfig, problems, reward, out: Path, progress=True,
                 say: Callable[[str], None] | None = None):  # fmt: skip
        self.settings, self.config, self.problems, self.reward = settings, config, problems, reward
        self.path = out / HELDOUT_FILE
        self.results = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.progress = progress
        self.say = say  # when given: a line as the evaluation starts, per batch, and its accuracy

    def measure(self, trainer, when: str) -> None:
        if not self.problems or (when == "before" and "before" in self.results):
            return
        s, c, n = self.settings, self.config, len(self.problems)
        tokens = s.eval_max_new_tokens or c.max_completion_length
        how = "greedy" if s.eval_temperature == 0 else f"T={s.eval_temperature:g}"
        if self.say is not None:
            self.say(f"held-out evaluation {when} training: {n} problems, {how}, at most {tokens} tokens")
        started = time.time()
        if needs_engine(trainer):
            result = engine_accuracy(
                trainer,
                self.problems,
                s.eval_temperature,
                s.eval_top_p,
                tokens,
                self.reward,
                s.eval_batch_size,
                c.seed,
                prompt_kwargs=s.prompt_kwargs(c),
            )
        else:
            result = heldout_accuracy(
                trainer.accelerator.unwrap_model(trainer.model),
                trainer.processing_class,
                self.problems,
                tokens,
                s.eval_batch_size,
                s.eval_temperature,
                top_p=s.eval_top_p,
                seed=c.seed,
                reward_func=self.reward,
                description=f"held-out, {when}",
                prompt_kwargs=s.prompt_kwargs(c),
                progress=self.progress,
                on_batch=None
                if self.say is None
                else lambda done: self.say(f"held-out {when}: {done} of {n} answered"),
            )
            result["engine"] = "fast-sampler"  # on this process's model
        rows = result.pop("samples", None)
        if rows:  # answers cut off at the token limit: many of them, and the accuracy measures the limit
            result["truncated_frac"] = sum(r.get("finish_reason") == "length" for r in rows) / len(rows)
        if rows is not None and PartialState().is_main_process:  # for `pacs-rl audit`
            (self.path.parent / SAMPLES_DIR).mkdir(exist_ok=True)
            path = self.path.parent / SAMPLES_DIR / heldout_samples_file(when)
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        self.results[when] = result
        self.record()
        if self.say is not None:
            self.say(
                f"held-out accuracy {when} training: {result['accuracy']:.1%} ({result['correct']} of {n}), "
                f"{time.time() - started:.0f} s"
            )

    def record(self, **extra: Any) -> None:
        if self.results:
            self.results.update(extra)
            if PartialState().is_main_process:
                self.path.write_text(json.dumps(self.results, indent=2))


def periodic_eval(trainer, settings: RunSettings, config: PACSConfig, problems, reward):
    """pass@k on the held-out set with num_generations_eval samples per problem (heldout.engine_pass_at_k)."""
    n = config.num_generations_eval or 1
    top_p = settings.eval_top_p if settings.eval_temperature > 0 else 1.0
    tokens = settings.eval_max_new_tokens or config.max_completion_length

    def evaluate() -> dict[str, float]:
        return engine_pass_at_k(
            trainer, problems, n, settings.eval_temperature, top_p, tokens, reward, settings.eval_batch_size,
            config.seed, settings.prompt_kwargs(config),
        )  # fmt: skip

    return PeriodicEvalCallback(trainer, int(config.eval_steps), evaluate)
