"""The batch's shape against its groups and its plan: checks that need no torch, shared by the settings' checks,
the trainer's config, the plan and the run (below all of them, so none imports another for them)."""

from __future__ import annotations

from typing import Any

PAPER_BATCH = (8, 256, 1024)  # Appendix B.2: G, prompts per optimizer step, prompts per rollout batch


def group_split_problem(per_device: Any, num_generations: Any, generation_batch_size: Any) -> str | None:
    """Why a batch would split a group of ``num_generations`` completions (None when none would): the
    micro-batch and the rollout batch must hold whole groups (PACSConfig refuses the same)."""
    G = num_generations
    if not isinstance(G, int) or G < 2 or not isinstance(per_device, int):
        return None  # TRL's own message: at least 2 generations per prompt
    if per_device % G != 0:
        divisors = [d for d in range(2, per_device + 1) if per_device % d == 0]
        return (
            f"per_device_train_batch_size={per_device} is not a multiple of num_generations={G}: a group of "
            f"{G} completions would be split across micro-batches (or processes), and PACS/RLOO/GRPO need a "
            f"whole group to form its score. Set per_device_train_batch_size to a multiple of {G} (e.g. "
            f"{G * max(1, per_device // G)}), or num_generations to one of {divisors or 'its divisors'}."
        )
    gen = generation_batch_size
    if isinstance(gen, int) and gen % G != 0:
        return (
            f"generation_batch_size={gen} is not a multiple of num_generations={G}: a rollout batch must hold "
            f"whole groups of {G} completions. Set generation_batch_size to a multiple of {G} (e.g. "
            f"{G * max(1, gen // G)}), or leave it unset and choose mini_batches_per_rollout."
        )
    return None


def batch_note(settings, config, n_proc: int) -> str | None:
    """How the batch on ``n_proc`` processes differs from the one the settings are written for
    (``mini_batch_prompts``), and which gradient_accumulation_steps gives it back; None when it does not differ."""
    want = settings.mini_batch_prompts
    G, per_device, mini_batches = (
        config.num_generations,
        config.per_device_train_batch_size,
        config.mini_batches_per_rollout,
    )
    here = per_device * config.gradient_accumulation_steps * n_proc / G
    if not want or here == want:
        return None
    ga = want * G / (per_device * n_proc)
    fix = (
        f"--set gradient_accumulation_steps={int(ga)} gives it on {n_proc}"
        if ga == int(ga)
        else f"no whole gradient_accumulation_steps gives it with {per_device} sequences per device on {n_proc} "
        f"processes (it would take {ga:g})"
    )
    whose = (
        "the paper's (Appendix B.2)" if (G, want, want * mini_batches) == PAPER_BATCH else "the planned one"
    )
    return (
        f"batch differs from {whose}: {here:g} prompts per optimizer step and {here * mini_batches:g} per rollout "
        f"batch on {n_proc} processes, {here / want:g}x the {want} and {want * mini_batches} these settings are "
        f"written for (mini_batch_prompts); {fix}"
    )
