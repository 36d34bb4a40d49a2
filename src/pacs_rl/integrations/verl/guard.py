"""Refuse verl configurations that would split or reorder PACS groups. Pure Python: no verl import.

PACS scores each completion against the other completions of its prompt (eq. 7), so the loss of a
micro-batch needs every row of each of its groups, with gradient. verl splits a rollout batch
(``data.train_batch_size`` prompts × ``rollout.n`` rows) in three steps, and each must cut at group
boundaries:

    rollout batch ──chunk by dp rank──▶ rank batch ──mini-batches──▶ ──micro-batches──▶ loss

- dp chunks are contiguous: whole groups iff ``train_batch_size`` is a multiple of the dp size;
- mini-batches (``ppo_mini_batch_size`` prompts, all ranks together) are contiguous unless
  ``actor.shuffle``: whole groups iff ``ppo_mini_batch_size`` is a multiple of the dp size;
- micro-batches are contiguous chunks of ``ppo_micro_batch_size_per_gpu`` rows unless
  ``actor.use_dynamic_bsz`` packs rows by token count: whole groups iff that size is a multiple of n.

Before the dp split, verl may reorder rows to balance sequence lengths across ranks
(``trainer.balance_batch`` in the legacy trainer; always in the v1 trainer, which also takes rows in
the order its TransferQueue lists them), which scatters the rows of a group. :func:`verl_config_problems` lists every such setting;
:func:`check_verl_config` raises with all of them at once. The registered loss re-checks at run time
that each micro-batch holds whole groups (see ``core.py``), so a setting missed here still cannot
silently skew training.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pacs_rl.algorithms import SCORE_METHODS

__all__ = ["PACS_NAME", "SCORE_METHODS", "VerlConfigError", "check_verl_config", "verl_config_problems"]

PACS_NAME = "pacs"  # the name registered in verl's advantage-estimator and policy-loss registries

_MISSING = object()


class VerlConfigError(ValueError):
    """A verl configuration that PACS cannot run as given; the message names each setting to change."""


def _select(config: Any, dotted: str, default: Any = None) -> Any:
    """``config.a.b.c`` for an OmegaConf DictConfig, a nested dict or an attribute object; ``default``
    when a key is absent or None. Interpolations are resolved by OmegaConf on access."""
    node = config
    for key in dotted.split("."):
        if node is None:
            return default
        if isinstance(node, Mapping) or hasattr(node, "keys"):
            try:
                node = node.get(key, _MISSING)
            except Exception:  # an unresolved interpolation: treat as absent
                return default
        else:
            node = getattr(node, key, _MISSING)
        if node is _MISSING:
            return default
    return default if node is None else node


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def data_parallel_size(config: Any) -> int:
    """The actor's data-parallel size: GPUs / (Ulysses sequence × tensor × pipeline × context parallel)."""
    world = int(_select(config, "trainer.n_gpus_per_node", 1)) * int(_select(config, "trainer.nnodes", 1))
    actor = "actor_rollout_ref.actor"
    # Ulysses may be spelled on the actor or on its fsdp_config (one interpolates the other): count it once.
    sequence_parallel = max(
        int(_select(config, f"{actor}.ulysses_sequence_parallel_size", 1)),
        int(_select(config, f"{actor}.fsdp_config.ulysses_sequence_parallel_size", 1)),
    )
    model_parallel = max(sequence_parallel, 1)
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
        model_parallel *= max(int(_select(config, f"{actor}.megatron.{key}", 1)), 1)
    return max(world // model_parallel, 1)


def verl_config_problems(config: Any) -> list[str]:
    """Every reason why ``config`` (verl's full PPO config: a hydra DictConfig or the same as nested dicts)
    cannot run PACS with whole groups. Empty when PACS is not selected, or when the config is safe."""
    actor = "actor_rollout_ref.actor"
    estimator = str(_select(config, "algorithm.adv_estimator", ""))
    loss_mode = str(_select(config, f"{actor}.policy_loss.loss_mode", "vanilla"))
    if PACS_NAME not in (estimator, loss_mode):
        return []

    problems: list[str] = []
    if estimator != PACS_NAME:
        problems.append(
            f"algorithm.adv_estimator={estimator!r}: the 'pacs' policy loss reads the 0/1 labels and group ids "
            "that the 'pacs' advantage estimator writes; set algorithm.adv_estimator=pacs."
        )
    if loss_mode != PACS_NAME:
        problems.append(
            f"{actor}.policy_loss.loss_mode={loss_mode!r}: the 'pacs' estimator writes labels, not advantages, "
            f"so any other loss would train on them; set {actor}.policy_loss.loss_mode=pacs."
        )

    n = int(_select(config, "actor_rollout_ref.rollout.n", 1))
    if n < 2:
        problems.append(
            f"actor_rollout_ref.rollout.n={n}: PACS compares the completions of one prompt with each other "
            "(eq. 7); set actor_rollout_ref.rollout.n to 2 or more (the paper uses 8)."
        )
        n = 1  # the divisibility checks below are moot

    score = str(_select(config, f"{actor}.policy_loss.pacs_score", "rloo"))
    if score not in SCORE_METHODS:
        problems.append(f"{actor}.policy_loss.pacs_score={score!r}: choose one of {list(SCORE_METHODS)}.")
    beta = _select(config, f"{actor}.policy_loss.pacs_beta", 1.0)
    try:
        beta_ok = float(beta) > 0
    except (TypeError, ValueError):
        beta_ok = False
    if not beta_ok:
        problems.append(f"{actor}.policy_loss.pacs_beta={beta!r}: β must be a positive number (paper: 1.0).")

    if _as_bool(_select(config, f"{actor}.use_dynamic_bsz", False)):
        problems.append(
            f"{actor}.use_dynamic_bsz=True packs rows into micro-batches by token count, splitting groups; "
            f"set {actor}.use_dynamic_bsz=False and {actor}.ppo_micro_batch_size_per_gpu to a multiple of "
            f"rollout.n={n}."
        )
    if _as_bool(_select(config, f"{actor}.shuffle", False)):
        problems.append(
            f"{actor}.shuffle=True shuffles rows inside each mini-batch, splitting groups; set {actor}.shuffle=False."
        )
    if _as_bool(_select(config, "trainer.balance_batch", False)):
        problems.append(
            "trainer.balance_batch=True reorders rows across data-parallel ranks by sequence length, "
            "scattering groups; set trainer.balance_batch=False."
        )

    dp = data_parallel_size(config)
    if _as_bool(_select(config, "trainer.use_v1", False)):
        problems.append(
            "trainer.use_v1=True: verl's v1 trainer takes rows in the order its TransferQueue lists them "
            "(not grouped by prompt) and always balances sequence lengths across data-parallel ranks, "
            "whatever trainer.balance_batch says; set trainer.use_v1=False (with trainer.balance_batch=False)."
        )

    micro = _select(config, f"{actor}.ppo_micro_batch_size_per_gpu", None)
    micro_global = _select(config, f"{actor}.ppo_micro_batch_size", None)
    if micro is None and micro_global is not None:
        micro = int(micro_global) // dp
        where = f"{actor}.ppo_micro_batch_size={micro_global} / {dp} ranks = {micro} rows per GPU"
    else:
        where = f"{actor}.ppo_micro_batch_size_per_gpu={micro}"
    if micro is not None and not _as_bool(_select(config, f"{actor}.use_dynamic_bsz", False)):
        micro = int(micro)
        if micro % n != 0:
            problems.append(
                f"{where} is not a multiple of actor_rollout_ref.rollout.n={n}: a micro-batch would hold part "
                f"of a group; set {actor}.ppo_micro_batch_size_per_gpu to a multiple of {n}."
            )

    mini = int(_select(config, f"{actor}.ppo_mini_batch_size", 0))
    if mini and mini % dp != 0:
        problems.append(
            f"{actor}.ppo_mini_batch_size={mini} prompts is not a multiple of the {dp} data-parallel ranks: "
            f"a rank's share of a mini-batch would end inside a group; use a multiple of {dp}."
        )
    train = int(_select(config, "data.train_batch_size", 0))
    if train and mini and train % mini != 0:
        problems.append(
            f"data.train_batch_size={train} is not a multiple of {actor}.ppo_mini_batch_size={mini}: the last "
            "mini-batch would be padded with rows of no group; make it a multiple."
        )
    if train and train % dp != 0:
        problems.append(
            f"data.train_batch_size={train} prompts is not a multiple of the {dp} data-parallel ranks: "
            f"a rank's chunk of the rollout batch would end inside a group; use a multiple of {dp}."
        )

    is_mode = _select(config, "algorithm.rollout_correction.rollout_is", None)
    if is_mode is not None:
        problems.append(
            f"algorithm.rollout_correction.rollout_is={is_mode!r}: PACS has no importance-sampling term and "
            "would ignore the weights; set algorithm.rollout_correction.rollout_is=null."
        )
    return problems


def check_verl_config(config: Any) -> None:
    """Raise :class:`VerlConfigError` listing every setting of ``config`` that would split PACS groups.

    Does nothing when PACS is not selected (neither ``algorithm.adv_estimator`` nor
    ``actor_rollout_ref.actor.policy_loss.loss_mode`` is ``pacs``).
    """
    problems = verl_config_problems(config)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise VerlConfigError(
            f"this verl configuration cannot run PACS with whole groups ({len(problems)} problem(s)):\n{lines}\n"
            "See docs/VERL.md, 'The group guard'."
        )
