"""Refuse, before Ray starts, verl configurations that would split PACS groups, that verl 0.9 itself would
assert on once its workers run, or that change what PACS reads. Pure Python: no verl import.

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
the order its TransferQueue lists them), which scatters the rows of a group.

verl 0.9.1 checks its own batch arithmetic only inside the Ray workers, at the first step (after the model
is loaded and the first rollout generated): the dispatch chunks the batch evenly over the dp ranks
(``chunk_tensordict``), each worker cuts its rows into mini-batches (``TrainingWorker.train_mini_batch``,
``make_iterator``) and then into micro-batches (``workers/engine/utils.py``, ``prepare_micro_batches``), and
its worker start-up asserts that the per-GPU micro-batch sizes are set and that the rollout engine's
parallel sizes divide the GPUs. :func:`verl_batch_problems` states those rules for any verl run (legacy
trainer, fixed-size micro-batches); :func:`verl_config_problems` lists them together with PACS's own;
:func:`check_verl_config` raises with all of them at once. The registered loss re-checks at run time that
each micro-batch holds whole groups (see ``core.py``), so a setting missed here still cannot silently skew
training.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import gcd
from typing import Any

from pacs_rl.rewards.cutoff import refuses_cut_off
from pacs_rl.rewards.graders import TRAINING_GRADER

from .options import PACS_NAME, POLICY_LOSS, loss_setting_problems

__all__ = [
    "VerlConfigError",
    "check_verl_config",
    "data_parallel_size",
    "verl_batch_problems",
    "verl_config_problems",
]

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
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


def _int(config: Any, dotted: str, default: int | None) -> int | None:
    value = _select(config, dotted, default)
    return None if value is None else int(value)


def _world_size(config: Any) -> int:
    """GPUs of the run: ``trainer.n_gpus_per_node × trainer.nnodes`` (the legacy trainer's one pool)."""
    return _int(config, "trainer.n_gpus_per_node", 1) * _int(config, "trainer.nnodes", 1)


def data_parallel_size(config: Any, role: str = ACTOR) -> int:
    """Data-parallel ranks of the actor's (or, with ``role=REF``, the reference model's) engine, as verl 0.9's
    engines count them: GPUs // model-parallel size. FSDP: the Ulysses size is
    ``<role>.ulysses_sequence_parallel_size`` when above 1 (verl copies it into the engine), else
    ``<role>.fsdp_config.ulysses_sequence_parallel_size``. Megatron: tensor × pipeline × context parallel
    sizes of ``<role>.megatron``."""
    ulysses = _int(config, f"{role}.ulysses_sequence_parallel_size", 1)
    if ulysses <= 1:
        ulysses = _int(config, f"{role}.fsdp_config.ulysses_sequence_parallel_size", 1)
    model_parallel = max(ulysses, 1)
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
        model_parallel *= max(_int(config, f"{role}.megatron.{key}", 1), 1)
    return max(_world_size(config) // model_parallel, 1)


def _fit(rows: int, wanted: int, step: int = 1) -> int:
    """A micro-batch size that works: the divisor of ``rows`` that is a multiple of ``step``, the largest not
    above ``wanted`` (else the smallest above it); ``step`` when ``rows`` has no such divisor."""
    divisors = [d for d in range(step, rows + 1, step) if rows % d == 0]
    below = [d for d in divisors if d <= wanted]
    return max(below) if below else (min(divisors) if divisors else step)


def _needs_reference(config: Any) -> tuple[bool, bool]:
    """(verl builds a reference model, it runs inside the actor). A KL term needs one
    (``algorithm.use_kl_in_reward`` or ``actor.use_kl_loss``: verl's ``need_reference_policy``); with LoRA the
    actor without its adapter is the reference, and its pass uses the rollout's log-prob micro-batch."""
    needed = _as_bool(_select(config, "algorithm.use_kl_in_reward", False)) or _as_bool(
        _select(config, f"{ACTOR}.use_kl_loss", False)
    )
    lora_rank = _int(config, "actor_rollout_ref.model.lora.rank", 0)
    if lora_rank <= 0:
        lora_rank = _int(config, "actor_rollout_ref.model.lora_rank", 0)
    in_actor = lora_rank > 0 or _select(config, "actor_rollout_ref.model.lora_adapter_path") is not None
    return needed, in_actor


def _verl_setting_problems(config: Any) -> list[str]:
    """What verl 0.9.1's workers assert at start-up (``ActorRolloutRefWorker.init_model``)."""
    problems = []
    dynamic = _as_bool(_select(config, f"{ACTOR}.use_dynamic_bsz", False))
    log_prob_dynamic = _as_bool(_select(config, f"{ROLLOUT}.log_prob_use_dynamic_bsz", dynamic))
    if log_prob_dynamic != dynamic:
        problems.append(
            f"{ROLLOUT}.log_prob_use_dynamic_bsz={log_prob_dynamic} differs from "
            f"{ACTOR}.use_dynamic_bsz={dynamic}: verl's actor worker asserts they are equal at start-up; set "
            f"{ROLLOUT}.log_prob_use_dynamic_bsz={dynamic}."
        )
    n = _int(config, f"{ROLLOUT}.n", 1)
    rows = _int(config, "data.train_batch_size", 0) * n
    micro = _int(config, f"{ACTOR}.ppo_micro_batch_size_per_gpu", None) or n

    def require(section: str, name: str, role: str, total: int, step: int, wanted: int) -> None:
        """``<section>.<name>_per_gpu`` must be set; suggest a divisor (a multiple of ``step`` where it can
        be) of the rows each GPU holds, ``total`` rows over the role's dp ranks."""
        if _select(config, f"{section}.{name}_per_gpu") is not None:
            return
        old, dp = _select(config, f"{section}.{name}"), data_parallel_size(config, role)
        read = f" ({section}.{name}={old} is deprecated and not read by verl 0.9's workers)" if old else ""
        wanted = max(int(old) // dp, 1) if old else wanted
        if total and total % dp == 0:
            wanted = _fit(total // dp, wanted, step if (total // dp) % step == 0 else 1)
        problems.append(
            f"{section}.{name}_per_gpu is not set{read}: verl's workers assert it at start-up; "
            f"set it, e.g. to {wanted}."
        )

    if not dynamic:
        require(
            ACTOR, "ppo_micro_batch_size", ACTOR, _int(config, f"{ACTOR}.ppo_mini_batch_size", 0) * n, n, n
        )
        require(ROLLOUT, "log_prob_micro_batch_size", ACTOR, rows, 1, micro)
    needed, in_actor = _needs_reference(config)
    if needed and not in_actor and not _as_bool(_select(config, f"{REF}.log_prob_use_dynamic_bsz", dynamic)):
        require(REF, "log_prob_micro_batch_size", REF, rows, 1, micro)
    return problems + _rollout_replica_problems(config)


def _rollout_replica_problems(config: Any) -> list[str]:
    """verl 0.9.1's rollout start-up assertion: the GPUs of one rollout replica (tensor × data × pipeline
    parallel sizes) must divide the run's GPUs."""
    world = _world_size(config)
    sizes = {
        key: _int(config, f"{ROLLOUT}.{key}", default)
        for key, default in (
            ("tensor_model_parallel_size", 2),  # verl 0.9.1's rollout.yaml defaults
            ("data_parallel_size", 1),
            ("pipeline_model_parallel_size", 1),
        )
    }
    replica = (
        sizes["tensor_model_parallel_size"]
        * sizes["data_parallel_size"]
        * sizes["pipeline_model_parallel_size"]
    )
    if world % replica == 0:
        return []
    return [
        f"{ROLLOUT}.tensor_model_parallel_size={sizes['tensor_model_parallel_size']} × "
        f"data_parallel_size={sizes['data_parallel_size']} × "
        f"pipeline_model_parallel_size={sizes['pipeline_model_parallel_size']} = {replica} GPUs per "
        f"rollout replica does not divide the {world} GPUs (trainer.nnodes × trainer.n_gpus_per_node); "
        f"verl's rollout asserts it at start-up; use a product that divides {world}."
    ]


def _verl_split_problems(config: Any) -> list[str]:
    """verl 0.9.1's even splits of the rollout batch: over the dp ranks (its dispatch, ``chunk_tensordict``)
    and into mini-batches (``TrainingWorker.train_mini_batch`` and ``make_iterator``), in rows."""
    dp, n = data_parallel_size(config), _int(config, f"{ROLLOUT}.n", 1)
    train, mini = _int(config, "data.train_batch_size", 0), _int(config, f"{ACTOR}.ppo_mini_batch_size", 0)
    step = dp // gcd(dp, n)  # prompts whose n rows each split evenly over the dp ranks
    if train and (train * n) % dp != 0:
        return [
            f"data.train_batch_size={train} × rollout.n={n} = {train * n} rows do not split evenly over the "
            f"{dp} data-parallel ranks, which verl asserts at the first step; use a multiple of {step} "
            "prompts."
        ]
    problems = []
    if mini and (mini * n) % dp != 0:
        problems.append(
            f"{ACTOR}.ppo_mini_batch_size={mini} × rollout.n={n} = {mini * n} rows do not split evenly over "
            f"the {dp} data-parallel ranks, which verl asserts at the first update; use a multiple of {step} "
            "prompts."
        )
    elif train and mini and train % mini != 0:
        problems.append(
            f"data.train_batch_size={train} is not a multiple of {ACTOR}.ppo_mini_batch_size={mini}: each "
            f"rank's {train * n // dp} rows do not split into mini-batches of {mini * n // dp}, which verl "
            "asserts at the first update; make it a multiple."
        )
    return problems


def _verl_micro_problems(config: Any, update: bool = True) -> list[str]:
    """verl 0.9.1's micro-batches (``prepare_micro_batches``: the rows a GPU holds must be a multiple of the
    per-GPU micro-batch size), for the old-log-prob pass, the reference pass and (``update``) the actor
    update; each where the rows per GPU are whole (else :func:`_verl_split_problems` says why)."""
    if _as_bool(_select(config, f"{ACTOR}.use_dynamic_bsz", False)):
        return []  # micro-batches packed by token count: no size to divide
    dp, n = data_parallel_size(config), _int(config, f"{ROLLOUT}.n", 1)
    train, mini = _int(config, "data.train_batch_size", 0), _int(config, f"{ACTOR}.ppo_mini_batch_size", 0)
    rows = train * n // dp if (train * n) % dp == 0 else 0
    batch = f"data.train_batch_size={train} × rollout.n={n} / {dp} data-parallel ranks"
    problems = []
    log_prob = _int(config, f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", None)
    if rows and log_prob and rows % log_prob != 0:
        problems.append(
            f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu={log_prob} does not divide the {rows} rows per GPU "
            f"of the old-log-prob pass ({batch}), which verl asserts at the first step; use "
            f"{_fit(rows, log_prob)}."
        )
    needed, in_actor = _needs_reference(config)
    ref = _int(config, f"{REF}.log_prob_micro_batch_size_per_gpu", None)
    if (
        needed
        and not in_actor
        and ref
        and not _as_bool(_select(config, f"{REF}.log_prob_use_dynamic_bsz", False))  # actor's is False here
    ):
        ref_dp = data_parallel_size(config, REF)
        ref_rows = train * n // ref_dp if (train * n) % ref_dp == 0 else 0
        if (train * n) % ref_dp != 0:
            problems.append(
                f"data.train_batch_size={train} × rollout.n={n} = {train * n} rows do not split evenly over "
                f"the reference model's {ref_dp} data-parallel ranks, which verl asserts at the first step; "
                f"use a multiple of {ref_dp // gcd(ref_dp, n)} prompts."
            )
        elif ref_rows % ref != 0:
            problems.append(
                f"{REF}.log_prob_micro_batch_size_per_gpu={ref} does not divide the {ref_rows} rows per GPU "
                f"of the reference pass (data.train_batch_size={train} × rollout.n={n} / {ref_dp} "
                f"data-parallel ranks), which verl asserts at the first step; use {_fit(ref_rows, ref)}."
            )
    micro = _int(config, f"{ACTOR}.ppo_micro_batch_size_per_gpu", None)
    mini_rows = mini * n // dp if (mini * n) % dp == 0 else 0
    if update and mini_rows and micro and mini_rows % micro != 0:
        step = n if mini_rows % n == 0 else 1
        problems.append(
            f"{ACTOR}.ppo_micro_batch_size_per_gpu={micro} does not divide the {mini_rows} rows per GPU of "
            f"an update mini-batch ({ACTOR}.ppo_mini_batch_size={mini} × rollout.n={n} / {dp} data-parallel "
            f"ranks), which verl asserts at the first update; use {_fit(mini_rows, micro, step)}."
        )
    return problems


def verl_batch_problems(config: Any) -> list[str]:
    """Every setting of ``config`` that verl 0.9.1 itself would assert on after Ray starts, for any loss: the
    per-GPU micro-batch sizes, the rollout engine's GPUs, and the even splits of the rollout batch over the
    data-parallel ranks, into mini-batches (update) and into micro-batches (old-log-prob, reference and update
    passes). The legacy trainer (``trainer.use_v1=False``), whose rows per GPU are train_batch_size × n / dp;
    ``actor.use_dynamic_bsz=True`` has no micro-batch size to check. The critic's batches are not checked."""
    return _verl_setting_problems(config) + _verl_split_problems(config) + _verl_micro_problems(config)


def _pacs_selection_problems(estimator: str, loss_mode: str) -> list[str]:
    """The ``pacs`` estimator and loss only work together: one writes the labels the other reads."""
    problems = []
    if estimator != PACS_NAME:
        problems.append(
            f"algorithm.adv_estimator={estimator!r}: the 'pacs' policy loss reads the 0/1 labels and group "
            "ids that the 'pacs' advantage estimator writes; set algorithm.adv_estimator=pacs."
        )
    if loss_mode != PACS_NAME:
        problems.append(
            f"{ACTOR}.policy_loss.loss_mode={loss_mode!r}: the 'pacs' estimator writes labels, not "
            f"advantages, so any other loss would train on them; set {ACTOR}.policy_loss.loss_mode=pacs."
        )
    return problems


def _pacs_option_problems(config: Any, n: int) -> list[str]:
    """PACS's own settings: groups of at least 2 completions (``rollout.n``), and the declared checks of the PACS
    fields of ``actor.policy_loss`` (options.py: a known score, a positive β)."""
    problems = []
    if n < 2:
        problems.append(
            f"{ROLLOUT}.n={n}: PACS compares the completions of one prompt with each other "
            f"(eq. 7); set {ROLLOUT}.n to 2 or more (the paper uses 8)."
        )
    return problems + loss_setting_problems(_select(config, POLICY_LOSS, {}))


def _row_order_problems(config: Any, n: int) -> list[str]:
    """Switches that repack, shuffle or reorder rows, scattering groups: a table of (setting, why), each a
    problem when the setting is on."""
    rules = (
        (
            f"{ACTOR}.use_dynamic_bsz",
            f"{ACTOR}.use_dynamic_bsz=True packs rows into micro-batches by token count, splitting groups; "
            f"set {ACTOR}.use_dynamic_bsz=False and {ACTOR}.ppo_micro_batch_size_per_gpu to a multiple of "
            f"rollout.n={n}.",
        ),
        (
            f"{ACTOR}.shuffle",
            f"{ACTOR}.shuffle=True shuffles rows inside each mini-batch, splitting groups; set "
            f"{ACTOR}.shuffle=False.",
        ),
        (
            "trainer.balance_batch",
            "trainer.balance_batch=True reorders rows across data-parallel ranks by sequence length, "
            "scattering groups; set trainer.balance_batch=False.",
        ),
        (
            "trainer.use_v1",
            "trainer.use_v1=True: verl's v1 trainer takes rows in the order its TransferQueue lists them "
            "(not grouped by prompt) and always balances sequence lengths across data-parallel ranks, "
            "whatever trainer.balance_batch says; set trainer.use_v1=False (with "
            "trainer.balance_batch=False).",
        ),
    )
    return [message for setting, message in rules if _as_bool(_select(config, setting, False))]


def _group_split_problems(config: Any) -> list[str]:
    """Group boundaries of the dp chunks and mini-batches: stricter than verl's own even splits (prompts, not
    rows), which they imply."""
    dp = data_parallel_size(config)
    split: list[str] = []
    mini = _int(config, f"{ACTOR}.ppo_mini_batch_size", 0)
    if mini and mini % dp != 0:
        split.append(
            f"{ACTOR}.ppo_mini_batch_size={mini} prompts is not a multiple of the {dp} data-parallel ranks: "
            f"a rank's share of a mini-batch would end inside a group; use a multiple of {dp}."
        )
    train = _int(config, "data.train_batch_size", 0)
    if train and mini and train % mini != 0:
        split.append(
            f"data.train_batch_size={train} is not a multiple of {ACTOR}.ppo_mini_batch_size={mini}: a "
            "rank's rows would not split into whole mini-batches, which verl asserts at the first update; "
            "make it a multiple."
        )
    if train and train % dp != 0:
        split.append(
            f"data.train_batch_size={train} prompts is not a multiple of the {dp} data-parallel ranks: "
            f"a rank's chunk of the rollout batch would end inside a group; use a multiple of {dp}."
        )
    return split


def _group_micro_problems(config: Any, n: int, dynamic: bool, split: bool) -> list[str]:
    """Fixed-size micro-batches must hold whole groups (a multiple of n rows); the suggested size also divides
    a GPU's rows of a mini-batch when the mini-batches themselves split at group boundaries (not ``split``)."""
    micro = _int(config, f"{ACTOR}.ppo_micro_batch_size_per_gpu", None)
    if micro is None or dynamic or micro % n == 0:
        return []
    mini_rows = _int(config, f"{ACTOR}.ppo_mini_batch_size", 0) * n // data_parallel_size(config)
    fix = (
        f"e.g. {_fit(mini_rows, micro, n)}, which divides the {mini_rows} rows per GPU of a mini-batch"
        if (not split and mini_rows)
        else f"a multiple of {n}"
    )
    return [
        f"{ACTOR}.ppo_micro_batch_size_per_gpu={micro} is not a multiple of {ROLLOUT}.n={n}: a "
        f"micro-batch would hold part of a group; use {fix}."
    ]


def _rollout_correction_problems(config: Any) -> list[str]:
    """verl's rollout correction (``algorithm.rollout_correction``): importance weights PACS would ignore, a
    bypass that changes what eq. 8 measures, rejection sampling that takes rows or tokens out of groups."""
    correction = "algorithm.rollout_correction"
    problems = []
    is_mode = _select(config, f"{correction}.rollout_is", None)
    if is_mode is not None:
        problems.append(
            f"{correction}.rollout_is={is_mode!r}: PACS has no importance-sampling term and "
            f"would ignore the weights; set {correction}.rollout_is=null."
        )
    if _as_bool(_select(config, f"{correction}.bypass_mode", False)):
        problems.append(
            f"{correction}.bypass_mode=True takes the rollout engine's log-probs as old_log_probs and "
            "rewrites policy_loss.loss_mode to 'bypass_mode' on the driver: PACS's reward proxy (eq. 8) "
            "would measure π_θ against the sampler's numerics, not the policy that generated the batch; set "
            f"{correction}.bypass_mode=false."
        )
    rejection = _select(config, f"{correction}.rollout_rs", None)
    if rejection is not None:
        options = [opt.strip() for opt in str(rejection).split(",") if opt.strip()]
        if any(opt.startswith("seq") for opt in options):
            effect = (
                "rejects whole sequences by zeroing their response mask, which takes rows out of their "
                "groups (the PACS loss then stops the run)"
            )
        else:
            effect = (
                "zeroes the response mask of rejected tokens, which drops them from eq. 8's masked sum, and "
                "a row with every token rejected leaves its group short (the PACS loss then stops the run)"
            )
        problems.append(f"{correction}.rollout_rs={rejection!r} {effect}; set {correction}.rollout_rs=null.")
    return problems


REWARD_MODULE = "pacs_rl.integrations.verl.reward"  # compute_score: the 0/1 reward
REWARD_MANAGER = ("pacs_rl.integrations.verl.reward_manager", "PACSRewardManager")  # tells it the cut-offs


def _reward_manager_problems(config: Any) -> list[str]:
    """Our reward function with a grader that refuses cut-off responses needs the reward manager that says which
    were cut (verl's own hand it the decoded text only). Legacy keys as verl 0.9 migrates them."""
    fn = _select(config, "reward.custom_reward_function", None) or _select(
        config, "custom_reward_function", None
    )
    path = str(_select(fn, "path", "") or "")
    if not path.endswith(REWARD_MODULE) and not path.endswith(REWARD_MODULE.replace(".", "/") + ".py"):
        return []
    grader = str(_select(fn, "reward_kwargs.grader", TRAINING_GRADER))
    manager = "reward.reward_manager"
    source = _select(config, f"{manager}.source", "register")
    name = _select(config, f"{manager}.name", "naive")
    module = str(_select(config, f"{manager}.module.path", "") or "")
    ours = (
        source == "importlib" and name == REWARD_MANAGER[1] and REWARD_MANAGER[0] in module.replace("/", ".")
    )
    if ours or not refuses_cut_off(grader):
        return []
    return [
        f"{manager}: the {grader} grader never pays a response cut at the length limit, and verl's {name!r} "
        "manager does not say which were; set reward.reward_manager.source=importlib, "
        f"reward.reward_manager.name={REWARD_MANAGER[1]}, reward.reward_manager.module.path=pkg://{REWARD_MANAGER[0]}."
    ]


def _filter_groups_problems(config: Any) -> list[str]:
    """DAPO's dynamic sampling (``algorithm.filter_groups``) lives in verl's DAPO recipe trainer; the legacy
    trainer this plug-in runs (``verl.trainer.main_ppo``) accepts the setting and never reads it."""
    if not _as_bool(_select(config, "algorithm.filter_groups.enable", False)):
        return []
    return [
        "algorithm.filter_groups.enable=True: verl's legacy trainer (verl.trainer.main_ppo, which this plug-in runs) "
        "never reads it, so no group would be filtered and no prompt sampled again; set "
        "algorithm.filter_groups.enable=false (pacs-rl train has it: --set dynamic_sampling=true)."
    ]


def verl_config_problems(config: Any) -> list[str]:
    """Every reason why ``config`` (verl's full PPO config: a hydra DictConfig or the same as nested dicts)
    cannot run PACS: settings that split groups or change what the PACS loss reads, and what verl 0.9 would
    assert on once its workers start (:func:`verl_batch_problems`). Empty when PACS is not selected, or when
    the config is safe."""
    estimator = str(_select(config, "algorithm.adv_estimator", ""))
    loss_mode = str(_select(config, f"{ACTOR}.policy_loss.loss_mode", "vanilla"))
    if PACS_NAME not in (estimator, loss_mode):
        return []
    n = _int(config, f"{ROLLOUT}.n", 1)
    problems = _pacs_selection_problems(estimator, loss_mode) + _pacs_option_problems(config, n)
    n = n if n >= 2 else 1  # below 2 the divisibility checks are moot
    dynamic = _as_bool(_select(config, f"{ACTOR}.use_dynamic_bsz", False))
    problems += _row_order_problems(config, n)
    split = _group_split_problems(config)
    group_micro = _group_micro_problems(config, n, dynamic, bool(split))
    problems += split + group_micro
    # What verl asserts in its workers. Its even splits hold when the group boundaries above do; the rows per
    # GPU are only known then.
    problems += _verl_setting_problems(config)
    if not split:
        problems += _verl_micro_problems(config, update=not group_micro)
    return (
        problems
        + _rollout_correction_problems(config)
        + _reward_manager_problems(config)
        + _filter_groups_problems(config)
    )


def check_verl_config(config: Any) -> None:
    """Raise :class:`VerlConfigError` listing every problem :func:`verl_config_problems` finds in ``config``.

    Does nothing when PACS is not selected (neither ``algorithm.adv_estimator`` nor
    ``actor_rollout_ref.actor.policy_loss.loss_mode`` is ``pacs``).
    """
    problems = verl_config_problems(config)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise VerlConfigError(
            f"this verl configuration cannot run PACS ({len(problems)} problem(s)):\n{lines}\n"
            "See docs/VERL.md, 'The group guard'."
        )
