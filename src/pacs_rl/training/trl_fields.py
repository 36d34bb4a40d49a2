"""Every field of TRL's `GRPOConfig`, once: its declared type and how `PACSTrainer` treats it (honoured, refused or
irrelevant). `pacs-rl train` types a value by this table before TRL loads; this project's own fields are declared
in `pacs_rl.training.schema`, which reads this table for the rest.

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

`tests/test_trl_contract.py` checks that this table names every field of the installed `GRPOConfig`, and no
other, with its type, so a field added by a new TRL release fails the test until someone classifies it here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from pacs_rl.settings.declarations import Check, at_least, interval, number, one_of, problems_found, whole
from pacs_rl.settings.declarations import rule as _rule

HONOURED, REFUSED, IRRELEVANT = "honoured", "refused", "irrelevant"


class FieldRule(NamedTuple):
    status: str  # HONOURED | REFUSED | IRRELEVANT
    note: str  # what acts on it, or (refused) what to do instead
    losses: tuple[str, ...] | None = None  # REFUSED only for these loss types (None: every loss type)
    check: Check | None = None  # its domain, checked before TRL loads (a check of pacs_rl.settings.declarations)

    def checked(self, check: Check) -> FieldRule:
        """This rule with the field's domain ``check``."""
        return self._replace(check=check)


def _h(note: str, check: Check | None = None) -> FieldRule:
    return FieldRule(HONOURED, note, check=check)


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
# The values transformers' and TRL's enumerated fields take (their enums and `choices`), spelled here so that a
# value is checked before they load (tests/test_trl_contract.py keeps them equal to the installed ones).
SCHEDULER_TYPES = (
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup", "inverse_sqrt",
    "reduce_lr_on_plateau", "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay", "greedy",
)
OPTIMIZERS = (
    "adamw_torch", "adamw_torch_fused", "adamw_torch_xla", "adamw_torch_npu_fused", "adafactor", "adamw_anyprecision",
    "adamw_torch_4bit", "adamw_torch_8bit", "ademamix", "sgd", "adagrad", "adamw_bnb_8bit", "adamw_8bit",
    "ademamix_8bit", "lion_8bit", "lion_32bit", "paged_adamw_32bit", "paged_adamw_8bit", "paged_ademamix_32bit",
    "paged_ademamix_8bit", "paged_lion_32bit", "paged_lion_8bit", "rmsprop", "rmsprop_bnb", "rmsprop_bnb_8bit",
    "rmsprop_bnb_32bit", "galore_adamw", "galore_adamw_8bit", "galore_adafactor", "galore_adamw_layerwise",
    "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise", "lomo", "adalomo", "grokadamw",
    "schedule_free_radam", "schedule_free_adamw", "schedule_free_sgd", "apollo_adamw", "apollo_adamw_layerwise",
    "stable_adamw",
)
INTERVAL_STRATEGIES = ("no", "steps", "epoch")
SAVE_STRATEGIES = (*INTERVAL_STRATEGIES, "best")
HUB_STRATEGIES = ("end", "every_save", "checkpoint", "all_checkpoints")
LOG_LEVELS = ("detail", "debug", "info", "warning", "error", "critical", "passive")
MP_CONTEXTS = (None, "fork", "spawn", "forkserver")
DDP_BACKENDS = (None, "nccl", "gloo", "mpi", "xccl", "hccl", "cncl", "mccl")
VLLM_MODES = ("server", "colocate")
VLLM_MODEL_IMPLS = ("vllm", "transformers")
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")

# Domains several fields share
_COUNT = at_least(1)  # a whole number >= 1
_COUNT_OR_NONE = at_least(1, ", or null", null=True)
_NON_NEGATIVE = interval(0)
_POSITIVE = interval(0, open_low=True)
_PROBABILITY = interval(0, 1)
_SEED = interval(0, 2**32 - 1, whole_number=True, note=" (numpy's seeds)")
_PORT = interval(1, 65535, whole_number=True)
_MAX_STEPS = _rule(
    lambda v: not whole(v) or v >= 1 or v == -1,
    ": give a number of optimizer steps >= 1 (or -1 to train num_train_epochs epochs)",
)
_WEIGHTS = _rule(
    lambda v: v is None or (isinstance(v, list) and all(number(w) for w in v)),
    ": give a list of numbers, one per reward function, or null",
)
# fmt: on

# fmt: off
# field -> (its declared type as text, module paths dropped; the rule)
GRPO_FIELDS: dict[str, tuple[str, FieldRule]] = {
    # ---- transformers TrainingArguments ------------------------------------------------------------------
    "output_dir": ("str | None", _h("checkpoints, metrics.jsonl and final/ go here (`pacs-rl train --output-dir`)")),
    "per_device_train_batch_size": ("int", _h("sequences per micro-batch per process; a multiple of num_generations", _COUNT)),
    "num_train_epochs": ("float", _TRAINER.checked(_POSITIVE)),
    "max_steps": ("int", _h("optimizer steps (TRL counts mini-batches, verl counts rollout batches)", _MAX_STEPS)),
    "learning_rate": ("float", _OPTIM.checked(interval(0, open_low=True, note=" (0 trains nothing)"))),
    "lr_scheduler_type": ("SchedulerType | str", _OPTIM.checked(one_of(SCHEDULER_TYPES))),
    "lr_scheduler_kwargs": ("dict | str | None", _OPTIM),
    "warmup_steps": ("float", _OPTIM.checked(interval(0, note=" (below 1: a fraction of the steps)"))),
    "optim": ("OptimizerNames | str", _OPTIM.checked(one_of(OPTIMIZERS))),
    "optim_args": ("str | None", _OPTIM),
    "weight_decay": ("float", _OPTIM.checked(_NON_NEGATIVE)),
    "adam_beta1": ("float", _OPTIM.checked(interval(0, 1, open_high=True))),
    "adam_beta2": ("float", _OPTIM.checked(interval(0, 1, open_high=True))),
    "adam_epsilon": ("float", _OPTIM.checked(_NON_NEGATIVE)),
    "optim_target_modules": ("None | str | list[str]", _OPTIM),
    "gradient_accumulation_steps": ("int", _h("micro-batches per optimizer step", _COUNT)),
    "average_tokens_across_devices": ("bool", _r(
        "transformers applies it in the Trainer's own compute_loss, which TRL replaces: each loss is a mean over "
        "its process's sequences and DDP averages the processes. Leave it at its default (True)"
    )),
    "max_grad_norm": ("float", _h("transformers' gradient clipping (the loss code decides whether PACS clips)")),
    "label_smoothing_factor": ("float", _r("label smoothing belongs to supervised token losses; PACS's labels are the 0/1 rewards")),
    "bf16": ("bool | None", _h("bf16 autocast (PACSConfig: default True on CUDA only)")),
    "fp16": ("bool", _h("fp16 autocast with a gradient scaler")),
    "bf16_full_eval": ("bool", _EVALUATE),
    "fp16_full_eval": ("bool", _EVALUATE),
    "tf32": ("bool | None", _h("torch's TF32 matmul switch")),
    "activation_checkpointing": ("bool | None", _h("transformers' activation checkpointing")),
    "activation_checkpointing_kwargs": ("dict[str, Any] | str | None", _h("transformers' activation checkpointing")),
    "gradient_checkpointing": ("bool", _h("alias of activation_checkpointing (PACSConfig accepts either name quietly)")),
    "gradient_checkpointing_kwargs": ("dict[str, Any] | str | None", _h("alias of activation_checkpointing_kwargs")),
    "torch_compile": ("bool", _TRAINER),
    "torch_compile_backend": ("str | None", _TRAINER),
    "torch_compile_mode": ("str | None", _TRAINER),
    "use_liger_kernel": ("bool", _h("TRL applies Liger's layer kernels (not its fused loss)")),
    "liger_kernel_config": ("dict[str, bool] | None", _h("TRL applies Liger's layer kernels (not its fused loss)")),
    "use_cache": ("bool", _TRAINER),
    "neftune_noise_alpha": ("float | None", _r(
        "NEFTune adds noise to the embeddings in training mode, so log π_θ on the update would not be the policy "
        "that sampled the rollout; it is a supervised fine-tuning technique"
    )),
    "torch_empty_cache_steps": ("int | None", _TRAINER.checked(_COUNT_OR_NONE)),
    "auto_find_batch_size": ("bool", _r("TRL refuses it too: shrinking the batch on out-of-memory splits groups; lower "
                               "per_device_train_batch_size (a multiple of num_generations) instead")),
    "logging_strategy": ("IntervalStrategy | str", _TRACKERS.checked(one_of(INTERVAL_STRATEGIES))),
    "logging_steps": ("float", _h("a metrics.jsonl row and a tracker log every N optimizer steps (PACSConfig: default 1)")),
    "logging_first_step": ("bool", _TRACKERS),
    "log_on_each_node": ("bool", _TRACKERS),
    "logging_nan_inf_filter": ("bool", _TRACKERS),
    "include_num_input_tokens_seen": ("str | bool", _r(
        "the Trainer counts `input_ids` in the batch, and TRL's rollout batches have none, so it only warns; "
        "completion lengths are logged as completions/mean_length"
    )),
    "log_level": ("str", _TRACKERS.checked(one_of(LOG_LEVELS))),
    "log_level_replica": ("str", _TRACKERS.checked(one_of(LOG_LEVELS))),
    "disable_tqdm": ("bool | None", _h("the Trainer's tqdm bar (`pacs-rl train` shows its own bar and always disables it)")),
    "report_to": ("None | str | list[str]", _TRACKERS),
    "run_name": ("str | None", _TRACKERS),
    "project": ("str", _TRACKERS),
    "trackio_space_id": ("str | None", _TRACKERS),
    "trackio_bucket_id": ("str | None", _TRACKERS),
    "trackio_static_space_id": ("Union[str, NoneType, Literal[False]]", _TRACKERS),
    "eval_strategy": ("IntervalStrategy | str", _EVALUATE.checked(one_of(INTERVAL_STRATEGIES))),
    "eval_steps": ("float | None", _h(
        "`pacs-rl train`: pass@k on the held-out set every eval_steps optimizer steps, num_generations_eval "
        "samples per problem, into metrics.jsonl and the trackers (with eval_strategy 'no', as transformers reads it)",
        _POSITIVE,
    )),
    "eval_delay": ("float", _EVALUATE.checked(_NON_NEGATIVE)),
    "per_device_eval_batch_size": ("int", _EVALUATE.checked(_COUNT)),
    "prediction_loss_only": ("bool", _EVALUATE),
    "eval_on_start": ("bool", _EVALUATE),
    "eval_do_concat_batches": ("bool", _EVALUATE),
    "eval_use_gather_object": ("bool", _EVALUATE),
    "eval_accumulation_steps": ("int | None", _EVALUATE.checked(_COUNT_OR_NONE)),
    "include_for_metrics": ("list[str]", _EVALUATE),
    "batch_eval_metrics": ("bool", _EVALUATE),
    "save_only_model": ("bool", _r(
        "a checkpoint without optimizer, scheduler and RNG state cannot resume exactly, and pacs-rl checkpoints "
        "exist to resume; final/ holds the model alone. Leave it False"
    )),
    "save_strategy": ("SaveStrategy | str", _TRAINER.checked(one_of(SAVE_STRATEGIES))),
    "save_steps": ("float", _TRAINER.checked(_POSITIVE)),
    "save_on_each_node": ("bool", _TRAINER),
    "save_total_limit": ("int | None", _TRAINER.checked(at_least(0, " (0 = keep all), or null", null=True))),
    "enable_jit_checkpoint": ("bool", _h("transformers saves a checkpoint on SIGTERM (PACSTrainer's state included)")),
    "push_to_hub": ("bool", _HUB),
    "hub_token": ("str | None", _HUB),
    "hub_private_repo": ("bool | None", _HUB),
    "hub_model_id": ("str | None", _HUB),
    "hub_strategy": ("HubStrategy | str", _HUB.checked(one_of(HUB_STRATEGIES))),
    "hub_always_push": ("bool", _HUB),
    "hub_revision": ("str | None", _HUB),
    "load_best_model_at_end": ("bool", _EVALUATE),
    "metric_for_best_model": ("str | None", _EVALUATE),
    "greater_is_better": ("bool | None", _EVALUATE),
    "ignore_data_skip": ("bool", _h("transformers' resume (True: not exact)")),
    "restore_callback_states_from_checkpoint": ("bool", _TRAINER),
    "full_determinism": ("bool", _TRAINER),
    "seed": ("int", _h("data order, sampling, initialisation", _SEED)),
    "data_seed": ("int | None", _DATA.checked(_SEED)),
    "use_cpu": ("bool", _DIST),
    "accelerator_config": ("dict | str | None", _DIST),
    "parallelism_config": ("ParallelismConfig | None", _r(
        "tensor, context or sequence parallelism splits a sequence's tokens across processes, and PACSTrainer "
        "computes each sequence's log-probs and each group's score on one process; use DDP, DeepSpeed ZeRO or FSDP"
    )),
    "dataloader_drop_last": ("bool", _DATA),
    "dataloader_num_workers": ("int", _DATA.checked(at_least(0))),
    "dataloader_pin_memory": ("bool", _DATA),
    "dataloader_persistent_workers": ("bool", _DATA),
    "dataloader_prefetch_factor": ("int | None", _DATA.checked(_COUNT_OR_NONE)),
    "dataloader_multiprocessing_context": ("str | None", _DATA.checked(one_of(MP_CONTEXTS))),
    "dataloader_in_order": ("bool", _DATA),
    "remove_unused_columns": ("bool | None", _h("TRL keeps the dataset columns for the reward functions")),
    "label_names": ("list[str] | None", _i("read by the Trainer's prediction loop for supervised labels; GRPO has none")),
    "train_sampling_strategy": ("str", _r(
        "TRL's RepeatSampler replaces the Trainer's sampler (it keeps each prompt's num_generations copies "
        "together), so group_by_length or sequential sampling would not happen; use shuffle_dataset"
    )),
    "length_column_name": ("str", _i("only read by train_sampling_strategy='group_by_length', which is refused")),
    "ddp_find_unused_parameters": ("bool | None", _DIST),
    "ddp_bucket_cap_mb": ("int | None", _DIST.checked(_COUNT_OR_NONE)),
    "ddp_broadcast_buffers": ("bool | None", _DIST),
    "ddp_static_graph": ("bool | None", _DIST),
    "ddp_backend": ("str | None", _DIST.checked(one_of(DDP_BACKENDS))),
    "ddp_timeout": ("int", _DIST.checked(_COUNT)),
    "fsdp": ("str | None", _h("accelerate's FSDP (the weights load in the training dtype; fp32 master weights)")),
    "fsdp_config": ("dict[str, Any] | str | None", _h("accelerate's FSDP")),
    "deepspeed": ("dict | str | None", _h("DeepSpeed through accelerate (ZeRO-3 loads the weights partitioned)")),
    "debug": ("str | list[DebugOption]", _TRAINER),
    "skip_memory_metrics": ("bool", _TRAINER),
    "do_train": ("bool", _i("transformers: for scripts, not read by the Trainer")),
    "do_eval": ("bool", _i("transformers: for scripts (TRL's evaluate checks read eval_strategy)")),
    "do_predict": ("bool", _i("transformers: for scripts, not read by the Trainer")),
    "resume_from_checkpoint": ("str | None", _i("transformers: for scripts, not read by the Trainer (`pacs-rl train --resume` "
                                  "refuses it and says to pass --resume)")),
    "local_rank": ("int", _i("set by the launcher")),
    # ---- TRL GRPOConfig ----------------------------------------------------------------------------------
    "model_init_kwargs": ("dict[str, Any] | str | None", _h(
        "TRL loads the policy from its name with these (dtype, attn_implementation, revision, trust_remote_code, "
        "...); `pacs-rl train` fills dtype and device_map when you do not"
    )),
    "trust_remote_code": ("bool", _h("TRL's model and tokenizer loading")),
    "router_aux_loss_coef": ("float | None", _r(
        "TRL adds a mixture-of-experts router loss inside its own loss, which PACSTrainer replaces; leave it unset"
    )),
    "disable_dropout": ("bool", _h("TRL switches dropout off in the policy")),
    "cast_lm_head_to_fp32": ("bool", _h("TRL casts the LM head; the log-probs of both logprob_impl paths use it")),
    "num_generations": ("int | None", _h("G, the group size", at_least(2, " (a group compares its completions; the paper: 8)", null=True))),
    "num_generations_eval": ("int | None", _h(
        "`pacs-rl train`: samples per held-out problem of the eval_steps evaluation (default 1); TRL's evaluate()",
        _COUNT_OR_NONE,
    )),
    "max_completion_length": ("int | None", _GEN.checked(_COUNT_OR_NONE)),
    "ds3_gather_for_generation": ("bool", _GEN),
    "shuffle_dataset": ("bool | None", _DATA),
    "pad_to_multiple_of": ("int | str | None", _GEN.checked(interval(1, whole_number=True))),
    "generation_batch_size": ("int | None", _h("the rollout batch (PACSConfig: mini_batches_per_rollout sets it)", _COUNT_OR_NONE)),
    "steps_per_generation": ("int | None", _h("micro-batches per rollout batch (PACSConfig: mini_batches_per_rollout sets it)", _COUNT_OR_NONE)),
    "temperature": ("float", _GEN.checked(interval(0, open_low=True, note=" (rollouts are sampled; the paper: 1.0)"))),
    "top_p": ("float", _GEN.checked(interval(0, 1, open_low=True, note=" (1 = no nucleus cut)"))),
    "top_k": ("int", _GEN.checked(at_least(0, " (0 = no top-k cut)"))),
    "min_p": ("float | None", _GEN.checked(_PROBABILITY)),
    "generation_kwargs": ("dict | str | None", _GEN),
    "chat_template_kwargs": ("dict | str | None", _h("TRL's prompt tokenisation")),
    "repetition_penalty": ("float", _GEN.checked(_POSITIVE)),
    "cache_implementation": ("str | None", _GEN),
    "use_vllm": ("bool", _VLLM),
    "vllm_mode": ("str", _VLLM.checked(one_of(VLLM_MODES))),
    "vllm_model_impl": ("str", _VLLM.checked(one_of(VLLM_MODEL_IMPLS))),
    "vllm_enable_sleep_mode": ("bool", _VLLM),
    "vllm_structured_outputs_regex": ("str | None", _VLLM),
    "vllm_server_base_url": ("str | None", _VLLM),
    "vllm_server_host": ("str", _VLLM),
    "vllm_server_port": ("int", _VLLM.checked(_PORT)),
    "vllm_server_timeout": ("float", _VLLM.checked(_POSITIVE)),
    "vllm_group_port": ("int", _VLLM.checked(_PORT)),
    "vllm_gpu_memory_utilization": ("float", _VLLM.checked(interval(0, 1, open_low=True))),
    "vllm_max_model_length": ("int | None", _VLLM.checked(_COUNT_OR_NONE)),
    "vllm_tensor_parallel_size": ("int", _VLLM.checked(_COUNT)),
    "beta": ("float", _h("the KL coefficient of the group baselines, with TRL's reference model; refused for pacs and ppo, "
               "which have no KL term (PACSConfig._check_reference says so; PACS's β is pacs_beta)", _NON_NEGATIVE)),
    "num_iterations": ("int", _h("optimizer passes over each rollout batch", _COUNT)),
    "epsilon": ("float", FieldRule(REFUSED, "PACS has no probability ratio to clip; the clipped baselines (grpo, dr_grpo, "
                                  "rloo, cw_grpo, ppo) use it as their clip range", _CLIPPED, _NON_NEGATIVE)),
    "delta": ("float | None", _r("TRL's two-sided clipping bound: " + _NO_TRL_LOSS)),
    "epsilon_high": ("float | None", FieldRule(REFUSED, "PACS has no probability ratio to clip; the clipped baselines use it as "
                                       "their upper clip range", _CLIPPED, _NON_NEGATIVE)),
    "sapo_temperature_neg": ("float", _r(_NO_TRL_LOSS)),
    "sapo_temperature_pos": ("float", _r(_NO_TRL_LOSS)),
    "vespo_k_pos": ("float", _r(_NO_TRL_LOSS)),
    "vespo_lambda_pos": ("float", _r(_NO_TRL_LOSS)),
    "vespo_k_neg": ("float", _r(_NO_TRL_LOSS)),
    "vespo_lambda_neg": ("float", _r(_NO_TRL_LOSS)),
    "importance_sampling_level": ("str", _r("sequence-level ratios (GSPO): " + _NO_TRL_LOSS)),
    "reward_weights": ("list[float] | None", _h("the rewards of several reward functions are summed with these weights", _WEIGHTS)),
    "multi_objective_aggregation": ("str", _r(_NO_TRL_ADVANTAGE)),
    "scale_rewards": ("str", _r(_NO_TRL_ADVANTAGE)),
    "loss_type": ("str", _h("PACSConfig's own field: the registered policy loss (pacs, grpo, dr_grpo, rloo, cw_grpo, ppo)")),
    "mask_truncated_completions": ("bool", FieldRule(
        REFUSED,
        "TRL zeroes a truncated completion's token mask, but PACS still scores it through its 0/1 label and its "
        "group's ψ, so it would not be left out; the baselines' token losses do leave it out",
        _CLIPPED,
    )),
    "sync_ref_model": ("bool", _r("TRL's reference model exists only with a KL term; PACS's reference is `reference` "
                         "(old, or frozen with ref_reset_steps)")),
    "ref_model_mixup_alpha": ("float", _i("only read with sync_ref_model, which is refused")),
    "ref_model_sync_steps": ("int", _i("only read with sync_ref_model, which is refused")),
    "top_entropy_quantile": ("float", _r("token selection by entropy: " + _NO_TRL_LOSS)),
    "entropy_coef": ("float", _r("an entropy bonus: " + _NO_TRL_LOSS)),
    "use_adaptive_entropy": ("bool", _r("an entropy bonus: " + _NO_TRL_LOSS)),
    "entropy_coef_min": ("float", _i("only read with use_adaptive_entropy, which is refused")),
    "entropy_coef_max": ("float", _i("only read with use_adaptive_entropy, which is refused")),
    "entropy_coef_delta": ("float", _i("only read with use_adaptive_entropy, which is refused")),
    "entropy_target": ("float", _i("only read with use_adaptive_entropy, which is refused")),
    "max_tool_calling_iterations": ("int | None", _h("TRL's tool-calling loop (a PACSTrainer given tools)", _COUNT_OR_NONE)),
    "vllm_importance_sampling_correction": ("bool", _LOSS_PATH),
    "vllm_importance_sampling_mode": ("str", _LOSS_PATH.checked(one_of(IS_MODES))),
    "vllm_importance_sampling_clip_max": ("float | None", _LOSS_PATH.checked(_POSITIVE)),
    "vllm_importance_sampling_clip_min": ("float | None", _LOSS_PATH.checked(_NON_NEGATIVE)),
    "vllm_importance_sampling_cap": ("float | None", _LOSS_PATH.checked(_POSITIVE)),
    "off_policy_mask_threshold": ("float | None", _r("the off-policy sequence mask (DeepSeek-V3.2): " + _NO_TRL_LOSS)),
    "use_bias_correction_kl": ("bool", _h("the baselines' KL term (beta > 0) is weighted by the importance ratio, as TRL's")),
    "log_completions": ("bool", _TRACKERS),
    "log_multimodal": ("bool", _TRACKERS),
    "num_completions_to_print": ("int | None", _TRACKERS.checked(at_least(0, ", or null (all)", null=True))),
    "log_unique_prompts": ("bool", _TRACKERS),
    "log_completions_hub_repo": ("str | None", _TRACKERS),
    "use_transformers_continuous_batching": ("bool", _GEN),
    "transformers_continuous_batching_config": ("dict | str | None", _GEN),
    "use_transformers_paged": ("bool", _GEN),
}
# fmt: on


# Loss options the trainers fill from one of TRL's fields (option -> field): the clipped losses' clip range and
# length from epsilon, epsilon_high and max_completion_length (a loss_options entry wins); the baselines' KL term
# from beta (a loss_options entry is refused: the field is the one setting). PACS's own options are declared
# with their fields (pacs_rl.training.schema).
CLIP_OPTION_FIELDS = {
    "clip_eps": "epsilon",
    "clip_eps_high": "epsilon_high",
    "max_completion_length": "max_completion_length",
}
KL_OPTION_FIELDS = {"kl_coef": "beta", "kl_ratio_weighted": "use_bias_correction_kl"}


def field_problems(values: Any, skip: Any = ()) -> list[str]:
    """What the declared domains of TRL's fields (their ``check``) find in ``values`` (a config object, or a mapping
    of field name -> value: a field it lacks is not checked), leaving out the fields named in ``skip`` (those this
    project declares itself)."""
    checks = ((name, rule.check) for name, (_, rule) in GRPO_FIELDS.items() if name not in skip)
    return problems_found(values, checks)


def rule_status(name: str, loss_type: str) -> str:
    """The status of GRPOConfig field ``name`` for ``loss_type`` (a per-loss refusal reads as honoured elsewhere)."""
    rule = GRPO_FIELDS[name][1]
    if rule.status == REFUSED and rule.losses is not None and loss_type not in rule.losses:
        return HONOURED
    return rule.status


def grpo_default(name: str) -> Any:
    """The default of GRPOConfig field ``name`` (what a run that never names the field gets from TRL)."""
    from trl import GRPOConfig  # the config module imports TRL anyway; kept here so the table imports nothing

    f = GRPOConfig.__dataclass_fields__[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _same(value: Any, default: Any) -> bool:
    """``value`` is TRL's default, or means the same: False for "no" (transformers' argument parser reads a field
    typed ``str | bool`` as a bool, so TRL's own command line turns its default "no" into False)."""
    off = {False, "no"}
    return value == default or (isinstance(value, (bool, str)) and value in off and default in off)


def refused_fields(values: Any, loss_type: str) -> list[str]:
    """One message per refused field set to a value other than TRL's default, naming it and what to do.

    values: a config object (attributes) or a mapping of field name -> value; fields it lacks are skipped.
    """
    get = values.get if isinstance(values, dict) else (lambda n, d=None: getattr(values, n, d))
    out = []
    for name, (_, rule) in GRPO_FIELDS.items():
        if rule_status(name, loss_type) != REFUSED:
            continue
        missing = object()
        value = get(name, missing)
        if value is missing or _same(value, grpo_default(name)):
            continue
        scope = f"with loss_type={loss_type!r}" if rule.losses else "by PACSTrainer"
        out.append(f"{name}={value!r} is not honoured {scope}: {rule.note}.")
    return out
