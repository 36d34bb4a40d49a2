"""Every field of TRL's `GRPOConfig`, classified for `PACSTrainer`: honoured, refused or irrelevant.

`PACSConfig` inherits all of `GRPOConfig` and `pacs-rl train --set` accepts every field, but `PACSTrainer`
replaces TRL's loss (`_compute_loss`) and reads the raw rewards instead of TRL's advantages, so a field that
only TRL's loss or advantage code reads would be accepted and then ignored without a word. The table below
says, for each field, what happens to it:

- ``honoured``: setting it does what its help says (TRL, transformers or accelerate act on it unchanged, or
  pacs-rl does; the note says which);
- ``refused``: the PACS path does not do what it says, so a value other than `GRPOConfig`'s default is an
  error naming the field and what to do instead (`PACSConfig.__post_init__` calls :func:`refused_fields`).
  ``losses`` narrows a refusal to some loss types (``epsilon`` clips the baselines' ratio; PACS has none);
- ``irrelevant``: nothing the run does reads it, or it only matters when a refused or fixed field is on
  (``use_bias_correction_kl`` without a KL term), so any value is harmless.

`tests/test_trl_contract.py` checks that this table names every field of the installed `GRPOConfig` and no
other, so a field added by a new TRL release fails the test until someone classifies it here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

HONOURED, REFUSED, IRRELEVANT = "honoured", "refused", "irrelevant"


@dataclass(frozen=True)
class FieldRule:
    status: str  # HONOURED | REFUSED | IRRELEVANT
    note: str  # what acts on it, or (refused) what to do instead
    losses: tuple[str, ...] | None = None  # REFUSED only for these loss types (None: every loss type)


def _h(note: str) -> FieldRule:
    return FieldRule(HONOURED, note)


def _r(note: str, losses: tuple[str, ...] | None = None) -> FieldRule:
    return FieldRule(REFUSED, note, losses)


def _i(note: str) -> FieldRule:
    return FieldRule(IRRELEVANT, note)


_TRAINER = _h("transformers' Trainer")
_OPTIM = _h("transformers' optimizer and scheduler")
_TRACKERS = _h("transformers' logging and trackers")
_HUB = _h("transformers' push to the Hub")
_DATA = _h("transformers' dataloader")
_DIST = _h("accelerate / transformers' distributed setup")
_EVALUATE = _h(
    "TRL's evaluate() on an eval_dataset, for a PACSTrainer built with one; `pacs-rl train` does not run it "
    "(it refuses eval_strategy and evaluates with eval_steps)"
)
_GEN = _h("TRL's generation (transformers generate, or vLLM; fast_sampler refuses what it lacks)")
_VLLM = _h("TRL's vLLM generation")
_LOSS_PATH = _h(
    "the loss path (vLLM importance-sampling correction, owned by the loss code): refused for PACS when switched on "
    "with use_vllm, applied as TRL applies it for the baselines"
)
_NO_TRL_LOSS = "it configures TRL's own GRPO loss, which PACSTrainer replaces with pacs_rl.algorithms; leave it at its default"
_NO_TRL_ADVANTAGE = (
    "it shapes TRL's advantages, which PACSTrainer does not use (every loss forms its own score from the raw "
    "0/1 rewards); pick the loss instead (loss_type grpo standardises within the group, dr_grpo does not)"
)
_CLIPPED = ("pacs",)  # the loss types without a ratio to clip

# fmt: off
GRPO_FIELDS: dict[str, FieldRule] = {
    # ---- transformers TrainingArguments ------------------------------------------------------------------
    "output_dir": _h("checkpoints, metrics.jsonl and final/ go here (`pacs-rl train --output-dir`)"),
    "per_device_train_batch_size": _h("sequences per micro-batch per process; a multiple of num_generations"),
    "num_train_epochs": _TRAINER,
    "max_steps": _h("optimizer steps (TRL counts mini-batches, verl counts rollout batches)"),
    "learning_rate": _OPTIM,
    "lr_scheduler_type": _OPTIM,
    "lr_scheduler_kwargs": _OPTIM,
    "warmup_steps": _OPTIM,
    "optim": _OPTIM,
    "optim_args": _OPTIM,
    "weight_decay": _OPTIM,
    "adam_beta1": _OPTIM,
    "adam_beta2": _OPTIM,
    "adam_epsilon": _OPTIM,
    "optim_target_modules": _OPTIM,
    "gradient_accumulation_steps": _h("micro-batches per optimizer step"),
    "average_tokens_across_devices": _r(
        "transformers applies it in the Trainer's own compute_loss, which TRL replaces: each loss is a mean over "
        "its process's sequences and DDP averages the processes. Leave it at its default (True)"
    ),
    "max_grad_norm": _h("transformers' gradient clipping (the loss code decides whether PACS clips)"),
    "label_smoothing_factor": _r("label smoothing belongs to supervised token losses; PACS's labels are the 0/1 rewards"),
    "bf16": _h("bf16 autocast (PACSConfig: default True on CUDA only)"),
    "fp16": _h("fp16 autocast with a gradient scaler"),
    "bf16_full_eval": _EVALUATE,
    "fp16_full_eval": _EVALUATE,
    "tf32": _h("torch's TF32 matmul switch"),
    "activation_checkpointing": _h("transformers' activation checkpointing"),
    "activation_checkpointing_kwargs": _h("transformers' activation checkpointing"),
    "gradient_checkpointing": _h("alias of activation_checkpointing (PACSConfig accepts either name quietly)"),
    "gradient_checkpointing_kwargs": _h("alias of activation_checkpointing_kwargs"),
    "torch_compile": _TRAINER,
    "torch_compile_backend": _TRAINER,
    "torch_compile_mode": _TRAINER,
    "use_liger_kernel": _h("TRL applies Liger's layer kernels (not its fused loss)"),
    "liger_kernel_config": _h("TRL applies Liger's layer kernels (not its fused loss)"),
    "use_cache": _TRAINER,
    "neftune_noise_alpha": _r(
        "NEFTune adds noise to the embeddings in training mode, so log π_θ on the update would not be the policy "
        "that sampled the rollout; it is a supervised fine-tuning technique"
    ),
    "torch_empty_cache_steps": _TRAINER,
    "auto_find_batch_size": _r("TRL refuses it too: shrinking the batch on out-of-memory splits groups; lower "
                               "per_device_train_batch_size (a multiple of num_generations) instead"),
    "logging_strategy": _TRACKERS,
    "logging_steps": _h("a metrics.jsonl row and a tracker log every N optimizer steps (PACSConfig: default 1)"),
    "logging_first_step": _TRACKERS,
    "log_on_each_node": _TRACKERS,
    "logging_nan_inf_filter": _TRACKERS,
    "include_num_input_tokens_seen": _r(
        "the Trainer counts `input_ids` in the batch, and TRL's rollout batches have none, so it only warns; "
        "completion lengths are logged as completions/mean_length"
    ),
    "log_level": _TRACKERS,
    "log_level_replica": _TRACKERS,
    "disable_tqdm": _h("the Trainer's tqdm bar (`pacs-rl train` shows its own bar and always disables it)"),
    "report_to": _TRACKERS,
    "run_name": _TRACKERS,
    "project": _TRACKERS,
    "trackio_space_id": _TRACKERS,
    "trackio_bucket_id": _TRACKERS,
    "trackio_static_space_id": _TRACKERS,
    "eval_strategy": _EVALUATE,
    "eval_steps": _h(
        "`pacs-rl train`: pass@k on the held-out set every eval_steps optimizer steps, num_generations_eval "
        "samples per problem, into metrics.jsonl and the trackers (with eval_strategy 'no', as transformers reads it)"
    ),
    "eval_delay": _EVALUATE,
    "per_device_eval_batch_size": _EVALUATE,
    "prediction_loss_only": _EVALUATE,
    "eval_on_start": _EVALUATE,
    "eval_do_concat_batches": _EVALUATE,
    "eval_use_gather_object": _EVALUATE,
    "eval_accumulation_steps": _EVALUATE,
    "include_for_metrics": _EVALUATE,
    "batch_eval_metrics": _EVALUATE,
    "save_only_model": _r(
        "a checkpoint without optimizer, scheduler and RNG state cannot resume exactly, and pacs-rl checkpoints "
        "exist to resume; final/ holds the model alone. Leave it False"
    ),
    "save_strategy": _TRAINER,
    "save_steps": _TRAINER,
    "save_on_each_node": _TRAINER,
    "save_total_limit": _TRAINER,
    "enable_jit_checkpoint": _h("transformers saves a checkpoint on SIGTERM (PACSTrainer's state included)"),
    "push_to_hub": _HUB,
    "hub_token": _HUB,
    "hub_private_repo": _HUB,
    "hub_model_id": _HUB,
    "hub_strategy": _HUB,
    "hub_always_push": _HUB,
    "hub_revision": _HUB,
    "load_best_model_at_end": _EVALUATE,
    "metric_for_best_model": _EVALUATE,
    "greater_is_better": _EVALUATE,
    "ignore_data_skip": _h("transformers' resume (True: not exact)"),
    "restore_callback_states_from_checkpoint": _TRAINER,
    "full_determinism": _TRAINER,
    "seed": _h("data order, sampling, initialisation"),
    "data_seed": _DATA,
    "use_cpu": _DIST,
    "accelerator_config": _DIST,
    "parallelism_config": _r(
        "tensor, context or sequence parallelism splits a sequence's tokens across processes, and PACSTrainer "
        "computes each sequence's log-probs and each group's score on one process; use DDP, DeepSpeed ZeRO or FSDP"
    ),
    "dataloader_drop_last": _DATA,
    "dataloader_num_workers": _DATA,
    "dataloader_pin_memory": _DATA,
    "dataloader_persistent_workers": _DATA,
    "dataloader_prefetch_factor": _DATA,
    "dataloader_multiprocessing_context": _DATA,
    "dataloader_in_order": _DATA,
    "remove_unused_columns": _h("TRL keeps the dataset columns for the reward functions"),
    "label_names": _i("read by the Trainer's prediction loop for supervised labels; GRPO has none"),
    "train_sampling_strategy": _r(
        "TRL's RepeatSampler replaces the Trainer's sampler (it keeps each prompt's num_generations copies "
        "together), so group_by_length or sequential sampling would not happen; use shuffle_dataset"
    ),
    "length_column_name": _i("only read by train_sampling_strategy='group_by_length', which is refused"),
    "ddp_find_unused_parameters": _DIST,
    "ddp_bucket_cap_mb": _DIST,
    "ddp_broadcast_buffers": _DIST,
    "ddp_static_graph": _DIST,
    "ddp_backend": _DIST,
    "ddp_timeout": _DIST,
    "fsdp": _h("accelerate's FSDP (the weights load in the training dtype; fp32 master weights)"),
    "fsdp_config": _h("accelerate's FSDP"),
    "deepspeed": _h("DeepSpeed through accelerate (ZeRO-3 loads the weights partitioned)"),
    "debug": _TRAINER,
    "skip_memory_metrics": _TRAINER,
    "do_train": _i("transformers: for scripts, not read by the Trainer"),
    "do_eval": _i("transformers: for scripts (TRL's evaluate checks read eval_strategy)"),
    "do_predict": _i("transformers: for scripts, not read by the Trainer"),
    "resume_from_checkpoint": _i("transformers: for scripts, not read by the Trainer (`pacs-rl train --resume` "
                                  "refuses it and says to pass --resume)"),
    "local_rank": _i("set by the launcher"),
    # ---- TRL GRPOConfig ----------------------------------------------------------------------------------
    "model_init_kwargs": _h(
        "TRL loads the policy from its name with these (dtype, attn_implementation, revision, trust_remote_code, "
        "...); `pacs-rl train` fills dtype and device_map when you do not"
    ),
    "trust_remote_code": _h("TRL's model and tokenizer loading"),
    "router_aux_loss_coef": _r(
        "TRL adds a mixture-of-experts router loss inside its own loss, which PACSTrainer replaces; leave it unset"
    ),
    "disable_dropout": _h("TRL switches dropout off in the policy"),
    "cast_lm_head_to_fp32": _h("TRL casts the LM head; the log-probs of both logprob_impl paths use it"),
    "num_generations": _h("G, the group size"),
    "num_generations_eval": _h(
        "`pacs-rl train`: samples per held-out problem of the eval_steps evaluation (default 1); TRL's evaluate()"
    ),
    "max_completion_length": _GEN,
    "ds3_gather_for_generation": _GEN,
    "shuffle_dataset": _DATA,
    "pad_to_multiple_of": _GEN,
    "generation_batch_size": _h("the rollout batch (PACSConfig: mini_batches_per_rollout sets it)"),
    "steps_per_generation": _h("micro-batches per rollout batch (PACSConfig: mini_batches_per_rollout sets it)"),
    "temperature": _GEN,
    "top_p": _GEN,
    "top_k": _GEN,
    "min_p": _GEN,
    "generation_kwargs": _GEN,
    "chat_template_kwargs": _h("TRL's prompt tokenisation"),
    "repetition_penalty": _GEN,
    "cache_implementation": _GEN,
    "use_vllm": _VLLM,
    "vllm_mode": _VLLM,
    "vllm_model_impl": _VLLM,
    "vllm_enable_sleep_mode": _VLLM,
    "vllm_structured_outputs_regex": _VLLM,
    "vllm_server_base_url": _VLLM,
    "vllm_server_host": _VLLM,
    "vllm_server_port": _VLLM,
    "vllm_server_timeout": _VLLM,
    "vllm_group_port": _VLLM,
    "vllm_gpu_memory_utilization": _VLLM,
    "vllm_max_model_length": _VLLM,
    "vllm_tensor_parallel_size": _VLLM,
    "beta": _h("the KL coefficient of the group baselines, with TRL's reference model; refused for pacs and ppo, "
               "which have no KL term (PACSConfig._check_reference says so; PACS's β is pacs_beta)"),
    "num_iterations": _h("optimizer passes over each rollout batch"),
    "epsilon": FieldRule(REFUSED, "PACS has no probability ratio to clip; the clipped baselines (grpo, dr_grpo, "
                                  "rloo, cw_grpo, ppo) use it as their clip range", _CLIPPED),
    "delta": _r("TRL's two-sided clipping bound: " + _NO_TRL_LOSS),
    "epsilon_high": FieldRule(REFUSED, "PACS has no probability ratio to clip; the clipped baselines use it as "
                                       "their upper clip range", _CLIPPED),
    "sapo_temperature_neg": _r(_NO_TRL_LOSS),
    "sapo_temperature_pos": _r(_NO_TRL_LOSS),
    "vespo_k_pos": _r(_NO_TRL_LOSS),
    "vespo_lambda_pos": _r(_NO_TRL_LOSS),
    "vespo_k_neg": _r(_NO_TRL_LOSS),
    "vespo_lambda_neg": _r(_NO_TRL_LOSS),
    "importance_sampling_level": _r("sequence-level ratios (GSPO): " + _NO_TRL_LOSS),
    "reward_weights": _h("the rewards of several reward functions are summed with these weights"),
    "multi_objective_aggregation": _r(_NO_TRL_ADVANTAGE),
    "scale_rewards": _r(_NO_TRL_ADVANTAGE),
    "loss_type": _h("PACSConfig's own field: the registered policy loss (pacs, grpo, dr_grpo, rloo, cw_grpo, ppo)"),
    "mask_truncated_completions": FieldRule(
        REFUSED,
        "TRL zeroes a truncated completion's token mask, but PACS still scores it through its 0/1 label and its "
        "group's ψ, so it would not be left out; the baselines' token losses do leave it out",
        _CLIPPED,
    ),
    "sync_ref_model": _r("TRL's reference model exists only with a KL term; PACS's reference is `reference` "
                         "(old, or frozen with ref_reset_steps)"),
    "ref_model_mixup_alpha": _i("only read with sync_ref_model, which is refused"),
    "ref_model_sync_steps": _i("only read with sync_ref_model, which is refused"),
    "top_entropy_quantile": _r("token selection by entropy: " + _NO_TRL_LOSS),
    "entropy_coef": _r("an entropy bonus: " + _NO_TRL_LOSS),
    "use_adaptive_entropy": _r("an entropy bonus: " + _NO_TRL_LOSS),
    "entropy_coef_min": _i("only read with use_adaptive_entropy, which is refused"),
    "entropy_coef_max": _i("only read with use_adaptive_entropy, which is refused"),
    "entropy_coef_delta": _i("only read with use_adaptive_entropy, which is refused"),
    "entropy_target": _i("only read with use_adaptive_entropy, which is refused"),
    "max_tool_calling_iterations": _h("TRL's tool-calling loop (a PACSTrainer given tools)"),
    "vllm_importance_sampling_correction": _LOSS_PATH,
    "vllm_importance_sampling_mode": _LOSS_PATH,
    "vllm_importance_sampling_clip_max": _LOSS_PATH,
    "vllm_importance_sampling_clip_min": _LOSS_PATH,
    "vllm_importance_sampling_cap": _LOSS_PATH,
    "off_policy_mask_threshold": _r("the off-policy sequence mask (DeepSeek-V3.2): " + _NO_TRL_LOSS),
    "use_bias_correction_kl": _h("the baselines' KL term (beta > 0) is weighted by the importance ratio, as TRL's"),
    "log_completions": _TRACKERS,
    "log_multimodal": _TRACKERS,
    "num_completions_to_print": _TRACKERS,
    "log_unique_prompts": _TRACKERS,
    "log_completions_hub_repo": _TRACKERS,
    "use_transformers_continuous_batching": _GEN,
    "transformers_continuous_batching_config": _GEN,
    "use_transformers_paged": _GEN,
}
# fmt: on


# Loss options the trainers fill from a config field (option -> field), the one place these names are paired:
# PACS's options come from the pacs_* fields; the clipped losses' clip range and length from TRL's epsilon,
# epsilon_high and max_completion_length (a loss_options entry wins); the baselines' KL term from TRL's beta
# (a loss_options entry is refused: the field is the one setting).
PACS_OPTION_FIELDS = {"beta": "pacs_beta", "score": "pacs_score", "weighted": "pacs_weighted"}
CLIP_OPTION_FIELDS = {
    "clip_eps": "epsilon",
    "clip_eps_high": "epsilon_high",
    "max_completion_length": "max_completion_length",
}
KL_OPTION_FIELDS = {"kl_coef": "beta", "kl_ratio_weighted": "use_bias_correction_kl"}


def rule_status(name: str, loss_type: str) -> str:
    """The status of GRPOConfig field ``name`` for ``loss_type`` (a per-loss refusal reads as honoured elsewhere)."""
    rule = GRPO_FIELDS[name]
    if rule.status == REFUSED and rule.losses is not None and loss_type not in rule.losses:
        return HONOURED
    return rule.status


def grpo_default(name: str) -> Any:
    """The default of GRPOConfig field ``name`` (what a run that never names the field gets from TRL)."""
    from trl import GRPOConfig  # the config module imports TRL anyway; kept here so the table imports nothing

    f = GRPOConfig.__dataclass_fields__[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def refused_fields(values: Any, loss_type: str) -> list[str]:
    """One message per refused field set to a value other than TRL's default, naming it and what to do.

    values: a config object (attributes) or a mapping of field name -> value; fields it lacks are skipped.
    """
    get = values.get if isinstance(values, dict) else (lambda n, d=None: getattr(values, n, d))
    out = []
    for name, rule in GRPO_FIELDS.items():
        if rule_status(name, loss_type) != REFUSED:
            continue
        missing = object()
        value = get(name, missing)
        if value is missing or value == grpo_default(name):
            continue
        scope = f"with loss_type={loss_type!r}" if rule.losses else "by PACSTrainer"
        out.append(f"{name}={value!r} is not honoured {scope}: {rule.note}.")
    return out


__all__ = [
    "CLIP_OPTION_FIELDS",
    "GRPO_FIELDS",
    "HONOURED",
    "IRRELEVANT",
    "KL_OPTION_FIELDS",
    "PACS_OPTION_FIELDS",
    "REFUSED",
    "FieldRule",
    "refused_fields",
    "rule_status",
]
