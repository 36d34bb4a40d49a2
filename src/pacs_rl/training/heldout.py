"""Held-out accuracy before/after training and the training-curve plot.

Greedy decoding (temperature 0) by default: one completion per problem, scored by the same verifier as
the training reward. Kept small on purpose; `pacs-rl eval` is the full pass@k protocol.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch

from pacs_rl.data import encode_prompts
from pacs_rl.rewards import math_reward_func
from pacs_rl.sampling import SamplingParams, TransformersSampler
from pacs_rl.training.callbacks import progress_bar, read_metrics
from pacs_rl.training.monitor import METRIC_PREFIX, PAID_FORMS, paid_form


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
) -> dict:
    """Accuracy of ``model`` on ``problems`` (list of pacs_rl.data.Problem), one completion each.

    Sampled with pacs_rl.sampling.TransformersSampler (temperature 0 = greedy). Returns {"accuracy", "n",
    "correct", "mean_length", "paid_forms", "samples"}: ``paid_forms`` counts the forms of the paid answers
    (:mod:`pacs_rl.training.monitor`; empty for a reward function that gives no verdicts), ``samples`` one row per
    problem (its completion and verdict). The global torch RNG is saved and restored, so calling this does not
    change a training run's random stream. ``prompt_kwargs``: the run's prompt settings, as
    ``pacs_rl.data.format_prompt`` takes them (default: the paper's prompt).
    """
    reward_func = reward_func or math_reward_func
    rng_state = torch.get_rng_state()
    sampler = TransformersSampler(model, tokenizer, batch_size=batch_size)  # restores train/eval mode itself
    correct, lengths, rows, paid_forms = 0, [], [], Counter()
    try:
        batches = [problems[i : i + batch_size] for i in range(0, len(problems), batch_size)]
        bar = _progress(progress, description, len(problems))
        for k, batch in enumerate(batches):
            prompt_ids = encode_prompts(tokenizer, batch, prompt_kwargs)
            params = SamplingParams(
                n=1,
                temperature=temperature,
                top_p=top_p if temperature > 0 else 1.0,
                max_new_tokens=max_new_tokens,
                seed=seed + k,
            )
            samples = [group[0] for group in sampler.generate_ids(prompt_ids, params)]
            scores = reward_func(
                [[{"role": "assistant", "content": s.text}] for s in samples],
                answer=[p.answer for p in batch],
                problem=[p.problem for p in batch],  # the question, for graders that read it
            )
            correct += int(sum(s == 1.0 for s in scores))
            lengths += [len(s.token_ids) for s in samples]
            result = getattr(reward_func, "last_result", None)
            verdicts = result.verdicts if result is not None else [None] * len(samples)
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
            if bar is not None:
                bar[0].update(bar[1], advance=len(batch))
        if bar is not None:
            bar[0].stop()
    finally:
        torch.set_rng_state(rng_state)
    n = len(problems)
    return {
        "accuracy": correct / n if n else float("nan"),
        "n": n,
        "correct": correct,
        "mean_length": sum(lengths) / max(len(lengths), 1),
        "paid_forms": dict(paid_forms),
        "samples": rows,
    }


def _progress(enabled: bool, description: str, total: int):
    if not enabled:
        return None
    p = progress_bar()
    p.start()
    return p, p.add_task(description, total=total)


# (metric keys, panel title): one line per key. The implicit critic is shown by its within-group AUC; its accuracy and
# Brier score at threshold ½ are not, since with π_ref = the rollout policy ψ is 0 on a rollout's first update,
# where both sit at chance by construction.
CURVES = [
    (("reward",), "rollout reward (mean)"),
    (("accuracy",), "mini-batch accuracy"),
    (("groups/mixed_frac",), "groups with mixed outcomes"),
    (("entropy",), "entropy / token"),
    (("completions/mean_length",), "completion length"),
    (("grad_norm",), "gradient norm"),
    (("pacs/critic_auc",), "critic AUC of ψ within mixed groups"),
    (tuple(f"{METRIC_PREFIX}{f}" for f in PAID_FORMS[1:]), "paid answers not plain (share, by form)"),
    (("loss",), "loss"),
]


def plot_curves(metrics_path: str | Path, png_path: str | Path, title: str = "") -> Path | None:
    """Plot the main training curves of a metrics.jsonl into a PNG; None when there is nothing to plot."""
    import matplotlib  # only when plotting: selecting the Agg backend is a process-wide side effect

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    curves = [
        (keys, label) for keys, label in CURVES if any(r.get(k) is not None for r in rows for k in keys)
    ]
    if not curves:
        return None
    cols = 3
    nrows = (len(curves) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 2.8 * nrows), squeeze=False)
    for ax, (keys, label) in zip(axes.flat, curves, strict=False):
        for key in keys:
            pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None and "step" in r]
            if len(keys) > 1 and not any(p[1] for p in pts):
                continue  # a form never paid: no line
            name = key.removeprefix(METRIC_PREFIX) if len(keys) > 1 else None
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", linewidth=1, label=name)
        if len(keys) > 1:
            ax.set_ylim(-0.02, 1.02)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
            else:
                ax.text(0.5, 0.5, "every paid answer plain", ha="center", va="center", fontsize=8,
                        transform=ax.transAxes)  # fmt: skip
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("optimizer step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(curves) :]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    png_path = Path(png_path)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path
