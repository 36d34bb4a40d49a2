"""`PACSTrainer`: TRL's `GRPOTrainer` with one loss hook for every method and whole groups.

What is overridden, and why (each is pinned by tests/test_trl_contract.py):

- `_calculate_rewards` / `_generate_and_score_completions`: keep the raw per-completion rewards in the
  inputs dict (TRL passes only advantages), check they are 0/1 for PACS, compute the frozen reference's
  log-probs when `reference="frozen"`, log rollout-level metrics.
- `_prepare_inputs`: TRL shuffles *rows* of a rollout batch before cutting it into micro-batches; we
  shuffle *groups*, so every micro-batch holds whole groups (ψ_i of PACS needs all r̂_j of its group). With
  `dynamic_sampling` (DAPO) the rollout batch first keeps only groups whose rewards are not all equal, further
  prompts sampled until it is full (`pacs_rl.training.dynamic_sampling`).
- `_compute_loss`: per-token log-probs, then `pacs_rl.algorithms.compute_policy_loss(args.loss_type, ...)`,
  divided by the accumulation steps itself (`loss_is_scaled_for_ga = True`, so transformers does not divide
  again); groups with a non-finite log-prob are left out and counted. The baselines also get TRL's reference
  log-probs (KL, `beta` > 0), the vLLM importance-sampling ratio and which completions were scored. With
  `update_token_budget` (one process) the log-probs are values whose backward runs the model in pieces
  (`pacs_rl.training.logprobs`).
- `_get_grad_norm`: a step whose gradient norm is not finite is skipped (gradients dropped before the
  optimizer step) and counted, whatever `max_grad_norm` (None/0: no clip, the norm still logged); so is, with
  `skip_no_signal_steps`, a step none of whose micro-batches (on any process) held a group with two different
  rewards: no signal, no step (docs/ALGORITHMS.md, "No signal, no step").
- old log-probs: while the policy has not stepped since the rollout, the loss takes them from its own forward
  (detached), so PACS's r̂ and ψ are exactly 0 and a baseline's ratio exactly 1, whatever computed the rollout's
  old log-probs (the fp32 sampler, a forward over other rows, another dtype).
- `_get_per_token_logps_and_entropies`: with `logprob_impl="logits"` (`auto` on CPU) the LM head runs on the
  completion positions only, and (`shared_prompt_forward`) each distinct prompt runs once per batch with the
  completions trimmed to the longest (`pacs_rl.training.logprobs`); otherwise TRL's fused head.
- `_generate_single_turn`: with `fast_sampler`, each prompt is sampled once with n = G by pacs_rl.sampling; with
  `old_logprobs_from_sampler` (fp32 only) the sampler's log-probs of the rollout serve as TRL's old log-probs
  instead of a second forward over the rollout batch.
- `_save_checkpoint` / `_load_optimizer_and_scheduler`: also save the buffered rollout batch, TRL's
  micro-step counter and the frozen reference, so a resumed run continues exactly.

- with `use_vllm`: the engine TRL builds gets `vllm_engine_kwargs` (and, on vLLM's CPU build, the policy's dtype),
  the colocate weight sync goes through vLLM's `reload_weights` on vLLM's CPU build, and without TRL's
  importance-sampling correction (PACS) the rollout-vs-trainer log-prob mismatch is still logged
  (`pacs_rl.training.vllm_colocate`).

Everything else (generation, vLLM, PEFT, accelerate/DeepSpeed, logging) is TRL's. A frozen reference is
refused under ZeRO-3 or FSDP, its optimizer reset under any DeepSpeed or FSDP (`sharding_problems`).
"""

from __future__ import annotations

import copy
import logging
import math
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from accelerate.utils import gather_object
from transformers import AutoModelForCausalLM, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import is_peft_available
from trl import GRPOTrainer
from trl.trainer.utils import (
    add_fused_lm_head,
    split_pixel_values_by_grid,
    split_tensor_dict,
    unsplit_pixel_values_by_grid,
)

from pacs_rl import stopping
from pacs_rl.algorithms import compute_policy_loss, finite_groups, policy_loss_options
from pacs_rl.rewards.cutoff import is_cut_off
from pacs_rl.rewards.trl_reward import MathRewardFunction
from pacs_rl.run_folder import PACS_STATE_FILE
from pacs_rl.sampling import SamplingParams, TransformersSampler
from pacs_rl.sampling.transformers_backend import BF16_SLOW_WARNING, cpu_has_native_bf16
from pacs_rl.training.config import PACSConfig
from pacs_rl.training.dynamic_sampling import PromptStream, fill_batch
from pacs_rl.training.logprobs import (
    LogpsBackwardInPieces,
    completion_logps,
    completion_only_logps,
    pieces_problems,
)
from pacs_rl.training.monitor import AnswerMonitor
from pacs_rl.training.schema import PACS_OPTION_FIELDS
from pacs_rl.training.trl_fields import CLIP_OPTION_FIELDS, KL_OPTION_FIELDS
from pacs_rl.training.vllm_colocate import (
    engine_arguments,
    logprob_mismatch,
    torch_threads_kept,
    use_reloading_sync,
    vllm_runs_on_cpu,
)

if is_peft_available():
    from peft import PeftModel


log = logging.getLogger("pacs_rl.training")


def loss_options(args, loss_type: str) -> dict[str, Any]:
    """The options the trainer passes to loss ``loss_type``: ``loss_options`` as given, then each option a config
    field fills (an entry of loss_options wins): PACS's from the fields declared with a ``loss_option``
    (training/schema.py); a baseline's clip range and length from TRL's epsilon, epsilon_high and
    max_completion_length, and with a KL term (beta > 0) its coefficient, where the loss takes them."""
    options = dict(args.loss_options)
    if loss_type == "pacs":
        fields = PACS_OPTION_FIELDS
    else:
        accepted = policy_loss_options(loss_type)
        trl = {**CLIP_OPTION_FIELDS, **(KL_OPTION_FIELDS if args.beta != 0.0 else {})}
        fields = {option: name for option, name in trl.items() if option in accepted}
    for option, name in fields.items():
        options.setdefault(option, getattr(args, name))
    return options


def shuffle_groups(batch: dict[str, Any], group_size: int) -> dict[str, Any]:
    """Permute whole groups of a rollout batch in unison; rows inside a group keep their order.

    batch: values are tensors of shape (B, ...), lists of length B, 0-d tensors or None (left as is);
    rows [g·G, (g+1)·G) form group g. Uses the global torch RNG (restored on resume).
    """
    n_rows = len(
        next(v for v in batch.values() if v is not None and not (torch.is_tensor(v) and v.ndim == 0))
    )
    if n_rows % group_size != 0:
        raise ValueError(f"rollout batch of {n_rows} rows is not a whole number of groups of {group_size}")
    perm_groups = torch.randperm(n_rows // group_size)
    index = (perm_groups[:, None] * group_size + torch.arange(group_size)).reshape(-1)  # (B,)

    def permute(v):
        if v is None or (torch.is_tensor(v) and v.ndim == 0):
            return v
        if torch.is_tensor(v):
            return v[index.to(v.device)]
        return [v[i] for i in index.tolist()]

    return {k: permute(v) for k, v in batch.items()}


def sequence_tensors(inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of prompt + completion, each (B, P + T), and the loss mask (B, T):
    the completion mask, times TRL's tool mask when tool calls were made."""
    completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
    input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
    mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
    return input_ids, attention_mask, mask


def group_mixed_fraction(rewards: torch.Tensor, group_size: int) -> float:
    """Fraction of groups whose completions do not all share one reward. rewards: (B,), B = groups × G."""
    grouped = rewards.view(-1, group_size)
    return (grouped.max(dim=1).values != grouped.min(dim=1).values).float().mean().item()


def holds_signal(rewards: torch.Tensor, group_size: int, valid: torch.Tensor | None = None) -> bool:
    """Whether some group holds two different rewards among its ``valid`` rows (all rows when None): a group whose
    rows share one reward has advantage 0 in every group baseline, and at ψ = 0 a PACS gradient of float rounding
    or nothing. rewards, valid: (B,), B = groups × G; an empty batch holds none."""
    if rewards.numel() == 0:
        return False
    grouped = rewards.float().view(-1, group_size)
    if valid is None:
        return bool((grouped.max(dim=1).values != grouped.min(dim=1).values).any())
    keep = valid.bool().view(-1, group_size)
    high = torch.where(keep, grouped, -math.inf).max(dim=1).values
    low = torch.where(keep, grouped, math.inf).min(dim=1).values
    return bool(((high != low) & (keep.sum(dim=1) >= 2)).any())


def no_signal_skip_note(skip: bool, deepspeed_stage: int | None) -> str | None:
    """Why ``skip_no_signal_steps`` cannot act on this run (None: it can): under DeepSpeed the optimizer step runs
    inside DeepSpeed's backward, before the trainer sees the step's end."""
    if not skip or deepspeed_stage is None:
        return None
    return (
        f"skip_no_signal_steps=True is not applied under DeepSpeed (ZeRO-{deepspeed_stage}): DeepSpeed takes the "
        "optimizer step itself, so a mini-batch without a group of two different rewards still steps AdamW; set "
        "skip_no_signal_steps=false to say so, or train without DeepSpeed."
    )


def sharding_problems(
    reference: str, reset_optimizer: bool, deepspeed_stage: int | None, fsdp: bool
) -> list[str]:
    """What the frozen reference cannot do under this sharding (deepspeed_stage None: no DeepSpeed).

    The frozen reference is a full, unsharded copy of the policy per process, refreshed from the policy's
    ``state_dict()``: under ZeRO-3 or FSDP each process holds only a shard of the policy, so the copy would be
    built from (and reset to) a shard. The optimizer reset clears a torch optimizer's ``state``; DeepSpeed and
    FSDP keep the moments in their own partitioned structures, which it would not reach.
    """
    out = []
    if reference == "frozen" and (fsdp or (deepspeed_stage or 0) >= 3):
        where = "FSDP" if fsdp else "DeepSpeed ZeRO-3"
        out.append(
            f"reference='frozen' under {where}: the frozen copy and its reset read the whole policy, which each "
            "process holds only a shard of. Use reference='old' (the authors' choice, no extra model), or ZeRO-1/2 / "
            "plain data parallelism."
        )
    if reference == "frozen" and reset_optimizer and (fsdp or deepspeed_stage is not None):
        where = "FSDP" if fsdp else f"DeepSpeed (ZeRO-{deepspeed_stage})"
        out.append(
            f"reset_optimizer=True under {where}: the reset clears a torch optimizer's state, but {where} keeps the "
            "Adam moments in its own partitions. Set reset_optimizer=False, or train without DeepSpeed/FSDP."
        )
    return out


class ReferenceResetCallback(TrainerCallback):
    """Every `ref_reset_steps` optimizer steps: copy the policy into the frozen reference and, with
    `reset_optimizer`, clear the optimizer state (Adam moments) at the same moment (paper §3.4)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        every = args.ref_reset_steps
        if every > 0 and state.global_step % every == 0:
            self.trainer.reset_reference()
            if args.reset_optimizer:
                clear_optimizer_state(self.trainer.optimizer)
        return control


def clear_optimizer_state(optimizer) -> None:
    """Forget every per-parameter state (moments, step counts) of a (possibly accelerate-wrapped) optimizer."""
    inner = getattr(optimizer, "optimizer", optimizer)
    inner.state.clear()


class PACSTrainer(GRPOTrainer):
    """GRPOTrainer whose loss is `pacs_rl.algorithms.compute_policy_loss(args.loss_type, ...)`.

    Same constructor as `trl.GRPOTrainer`; `args` must be a `PACSConfig`.
    """

    # _compute_loss divides by the gradient-accumulation steps itself; transformers' training_step must not
    # divide again (it would scale the gradient by 1/GA²). TRL sets the same; pinned here and in
    # tests/test_trl_contract.py.
    loss_is_scaled_for_ga = True

    def __init__(self, model, reward_funcs=None, args: PACSConfig | None = None, *pos, **kw):
        if args is None or not isinstance(args, PACSConfig):
            raise TypeError(f"PACSTrainer needs args=PACSConfig(...), got {type(args).__name__}")
        ref_policy = None
        if args.reference == "frozen":
            if kw.get("peft_config") is not None or _is_peft(model):
                raise ValueError(
                    "reference='frozen' with a PEFT adapter is not supported; use reference='old'."
                )
            if isinstance(model, str):
                model = AutoModelForCausalLM.from_pretrained(model, **(args.model_init_kwargs or {}))
            # Copy before TRL patches the forward (its fused LM head closes over the original module).
            ref_policy = copy.deepcopy(model)
        with engine_arguments(args.vllm_engine_kwargs, self._vllm_default_dtype), torch_threads_kept():
            super().__init__(model, reward_funcs, args, *pos, **kw)
        if self.use_vllm and self.vllm_mode == "colocate" and vllm_runs_on_cpu():
            use_reloading_sync(self.vllm_generation)  # TRL's in-place copy fails on vLLM's CPU build
        self._warn_slow_bf16()
        self.ref_policy = None
        if ref_policy is not None:
            add_fused_lm_head(
                ref_policy, temperature=self.temperature, cast_lm_head_to_fp32=args.cast_lm_head_to_fp32
            )
            ref_policy.requires_grad_(False).eval()
            self.ref_policy = ref_policy.to(self.accelerator.device)
            if args.ref_reset_steps > 0:
                self.add_callback(ReferenceResetCallback(self))
        self._last_rewards_per_func: torch.Tensor | None = None
        self.num_reference_resets = 0
        self.num_skipped_steps = 0  # optimizer steps skipped for a non-finite gradient norm
        self.num_skipped_no_signal = 0  # optimizer steps skipped: no group of two different rewards
        self._step_signal = False  # whether a micro-batch of the optimizer step in progress held such a group
        if not hasattr(GRPOTrainer, "_get_grad_norm"):  # transformers < 5 has no such hook in its loop
            warnings.warn(
                "this transformers' Trainer has no _get_grad_norm: a step whose gradient norm is not finite will not "
                "be skipped or counted. Upgrade transformers (5.x).",
                stacklevel=2,
            )
        problems = sharding_problems(
            args.reference, args.reset_optimizer and args.ref_reset_steps > 0, *self._sharding()
        )
        if problems:
            raise ValueError("; ".join(problems))
        note = no_signal_skip_note(args.skip_no_signal_steps, self._sharding()[0])
        if note and self.accelerator.is_main_process:
            warnings.warn(note, stacklevel=2)
        # global_step when the buffered rollout was sampled (-1: unknown, e.g. a checkpoint without it)
        self._rollout_step = -1
        self._policy_step = -1  # global_step of the last optimizer step that moved the policy (-1: none)
        self._use_pieces = self._update_in_pieces()
        self._prompt_stream = self._dynamic_sampling_prompts()
        # dynamic sampling over the run (checkpoints keep it): rollouts, groups sampled/kept/padded, rounds, seconds
        self.dynamic_sampling_totals: dict[str, float] = {}
        self.answer_monitor = AnswerMonitor(
            args.output_dir, self._math_reward_grader(), write=self.accelerator.is_main_process
        )
        # a run that prints what it does (a log file, pacs_rl.training.run) sets this: one line per phase
        self.announce: Callable[[str], None] | None = None
        self._announced_step = -1  # the global_step whose start was announced

    def _vllm_default_dtype(self) -> torch.dtype | None:
        """The dtype of the colocated vLLM engine when vllm_engine_kwargs names none: the policy's on vLLM's CPU
        build (it would run an fp32 checkpoint in bf16), vLLM's own choice elsewhere. TRL builds the engine after
        loading the policy, so ``self.model`` is there when this is called."""
        if not vllm_runs_on_cpu():
            return None
        return next(self.accelerator.unwrap_model(self.model).parameters()).dtype

    def _update_in_pieces(self) -> bool:
        """Whether update_token_budget applies; where it cannot, say why (it is not silently ignored)."""
        if not self.args.update_token_budget:
            return False
        stage, fsdp = self._sharding()
        why = pieces_problems(
            num_processes=self.accelerator.num_processes,
            deepspeed=stage is not None,
            fsdp=fsdp,
            activation_checkpointing=_checkpoints_activations(self.model),
            completion_only_head=self._completion_only_head(),
            logprob_impl=self.args.logprob_impl,
            device=self.accelerator.device.type,
            shared_prompt_forward=self.args.shared_prompt_forward,
        )
        if why and self.accelerator.is_main_process:  # one warning per run, not one per process
            warnings.warn(
                f"update_token_budget={self.args.update_token_budget} is ignored with {', '.join(why)}: it needs one "
                "process and the 'logits' log-prob path with the shared prompt forward; the update runs one forward "
                "and backward per micro-batch.",
                stacklevel=3,
            )
        return not why

    def _sharding(self) -> tuple[int | None, bool]:
        """(DeepSpeed ZeRO stage or None, whether FSDP shards the model), as accelerate set them up."""
        stage = None
        if getattr(self, "is_deepspeed_enabled", False):
            plugin = self.accelerator.state.deepspeed_plugin
            stage = int(getattr(plugin, "zero_stage", 0) or 0)
        return stage, bool(getattr(self, "is_fsdp_enabled", False))

    def _warn_slow_bf16(self) -> None:
        """bf16 on a CPU without bf16 matmul instructions is several times slower than fp32: say so (the fast
        sampler says it for fast_sampler_dtype)."""
        if self.args.bf16 and self.accelerator.device.type == "cpu" and not cpu_has_native_bf16():
            warnings.warn(BF16_SLOW_WARNING.format(what="bf16=True", setting="bf16=false"), stacklevel=3)

    # ------------------------------------------------------------------ rollout
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # every reward function is told which completions were cut off at the token limit (keyword `truncated`):
        # the training grader never pays one
        cut = self.completion_cut_offs(completion_ids_list)
        inputs = [{**x, "truncated": c} for x, c in zip(inputs, cut, strict=True)]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func  # (B_all_processes, n_funcs), gathered
        return rewards_per_func

    def completion_cut_offs(self, completion_ids: list[list[int]]) -> list[bool]:
        """Which of ``completion_ids`` (this process's, as generated) were cut off at the token limit: the fast
        sampler's finish reasons when they are its last samples, else the token count against
        max_completion_length and the EOS ids (TRL's generate, vLLM), by the one rule ``is_cut_off``."""
        ids = [list(c) for c in completion_ids]
        sampled, reasons = getattr(self, "_rollout_finish", None) or (None, None)
        if sampled != ids:
            reasons = [None] * len(ids)
        return [
            is_cut_off(c, self.max_completion_length, self.eos_token_ids, r)
            for c, r in zip(ids, reasons, strict=True)
        ]

    def _generate_single_turn(
        self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        if not self.args.fast_sampler or self.use_vllm:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        if images is not None or multimodal_fields or self.tools:
            raise ValueError(
                "fast_sampler=True supports text-only prompts without tools; set fast_sampler=False."
            )
        return self._fast_generate(prompt_ids, num_generations), None

    def _fast_generate(self, prompt_ids: list[list[int]], G: int) -> list[list[int]]:
        """Sample with pacs_rl.sampling: each prompt once with n=G (TRL repeats every prompt G times)."""
        unique = prompt_ids[::G]
        if [p for p in unique for _ in range(G)] != list(prompt_ids):
            raise RuntimeError(
                "fast_sampler expects each prompt repeated G times in a row (TRL's RepeatSampler)"
            )
        if getattr(self, "_sampler", None) is None:
            self._sampler = TransformersSampler(
                self.accelerator.unwrap_model(self.model),
                self.processing_class,
                dtype=self.args.fast_sampler_dtype,
                batch_size=self.args.fast_sampler_batch_size,
            )
        # greedy decoding (a held-out evaluation through this engine) has no log-probs to keep
        keep_logprobs = self.temperature > 0 and self._sampler_logprobs_usable()
        params = SamplingParams(
            n=G,
            temperature=self.temperature,
            top_p=self.top_p,
            max_new_tokens=self.max_completion_length,
            seed=int(torch.randint(0, 2**62, (1,)).item()),  # from the global RNG: resumes exactly
            stop_token_ids=list(self.eos_token_ids),
            logprobs=keep_logprobs,
            # what the training forward scores: log_softmax(z / T)
            logprob_temperature=self.temperature if keep_logprobs else 1.0,
        )
        samples = [s for group in self._sampler.generate_ids(unique, params) for s in group]
        completions = [list(s.token_ids) for s in samples]
        self._rollout_finish = (completions, [s.finish_reason for s in samples])  # for completion_cut_offs
        self._sampler_old_logps = (
            (completions, [s.logprobs for s in samples], [s.entropies for s in samples])
            if keep_logprobs
            else None
        )
        return completions

    def _sampler_logprobs_usable(self) -> bool:
        """Whether the fast sampler's log-probs may serve as the rollout's old log-probs: asked for
        (`old_logprobs_from_sampler`) and computed as the training forward computes them (fp32 weights, no
        autocast on either side), so they differ from a fresh forward by float rounding only."""
        if not self.args.old_logprobs_from_sampler:
            return False
        model = self.accelerator.unwrap_model(self.model)
        same = (
            not (self.args.bf16 or self.args.fp16)
            and self.args.fast_sampler_dtype in (None, "float32", "fp32")
            and all(p.dtype == torch.float32 for p in model.parameters())
        )
        if not same and not getattr(self, "_warned_sampler_logprobs", False):
            self._warned_sampler_logprobs = True
            warnings.warn(
                "old_logprobs_from_sampler=True needs fp32 weights, bf16=False and fast_sampler_dtype=None (the "
                "sampler must compute what the training forward computes); the old log-probs are recomputed by "
                "a forward instead.",
                stacklevel=2,
            )
        return same

    def _take_sampler_logps(self, input_ids, attention_mask, logits_to_keep) -> torch.Tensor | None:
        """The last rollout's sampler log-probs as a (B, logits_to_keep) tensor (0 on padding) when ``input_ids``
        hold exactly its completions; None otherwise (the caller then runs a forward). Used once."""
        completions, logps, entropies = self._sampler_old_logps
        self._sampler_old_logps = None
        T = logits_to_keep
        if len(completions) != input_ids.size(0):
            return None
        out = torch.zeros((len(completions), T), dtype=torch.float32)
        ent = torch.zeros_like(out) if self._use_pieces else None  # only the update in pieces reads them
        mask = attention_mask[:, -T:].sum(-1).tolist()
        ids = input_ids[:, -T:].tolist()
        for row, (tokens, lp, h) in enumerate(zip(completions, logps, entropies, strict=True)):
            n = len(tokens)
            if n > T or mask[row] != n or ids[row][:n] != tokens:
                return None
            out[row, :n] = torch.tensor(lp)
            if ent is not None:
                ent[row, :n] = torch.tensor(h)
        if ent is not None:
            self._rollout_entropies = ent.to(input_ids.device)
        return out.to(input_ids.device)

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **multimodal,
    ):
        """Per-token log-probs (and entropies) of the last ``logits_to_keep`` tokens under ``model``.

        With ``logprob_impl='logits'`` (the CPU default) the model's own forward computes the LM head on the
        completion positions only (``logits_to_keep``), at the sampling temperature, followed by a log-softmax;
        TRL's fused head would score every prompt position too and, without Triton, in Python-level tiles
        (docs/TRAINING.md has the measured cost). With ``shared_prompt_forward`` (default) each distinct prompt
        of a batch runs once and only the completion tokens, trimmed to the longest, run per row
        (``pacs_rl.training.logprobs.completion_only_logps``). Same values as TRL's path (tested); entropies carry
        no gradient (they are only logged). Multimodal inputs and MoE auxiliary losses go to TRL's path.
        """
        if (
            getattr(self, "_sampler_old_logps", None) is not None
            and model is self.model
            and not (torch.is_grad_enabled() or compute_entropy or compute_aux_loss)
        ):  # TRL's old-log-prob forward right after a fast-sampler rollout: the sampler already scored it
            logps = self._take_sampler_logps(input_ids, attention_mask, logits_to_keep)
            if logps is not None:
                return logps, None, None
        if (
            compute_aux_loss
            or any(v is not None for v in multimodal.values())
            or not self._completion_only_head()
        ):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size=batch_size,
                compute_entropy=compute_entropy,
                compute_aux_loss=compute_aux_loss,
                **multimodal,
            )
        logps, entropies = completion_only_logps(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            self.temperature,
            batch_size=batch_size or input_ids.size(0),
            compute_entropy=compute_entropy,
            shared_prompt=self.args.shared_prompt_forward and not _checkpoints_activations(model),
            autocast=self.accelerator.autocast,
        )
        return logps, entropies, None

    def _completion_only_head(self) -> bool:
        """Whether log-probs come from the model's own forward on the completion positions only."""
        impl = self.args.logprob_impl
        return impl == "logits" or (impl == "auto" and self.accelerator.device.type == "cpu")

    def _math_reward_grader(self) -> str | None:
        """The grader of the run's math reward function, None when no reward function is ``math``."""
        funcs = [f for f in getattr(self, "reward_funcs", []) if isinstance(f, MathRewardFunction)]
        return funcs[0].grader if funcs else None

    def _monitor_answers(self, output: dict[str, Any], mode: str) -> None:
        """The reward-hacking monitor (pacs_rl.training.monitor): forms of the paid answers of this rollout,
        gathered over processes, logged, and the completions kept in samples/rollouts.jsonl."""
        funcs = [f for f in self.reward_funcs if isinstance(f, MathRewardFunction) and f.last_inputs]
        if not funcs or funcs[0].last_result is None:
            return
        func = funcs[0]
        texts, answers, questions = func.last_inputs
        lengths = output["completion_mask"].sum(dim=1).tolist()
        cut = func.last_truncated or [False] * len(texts)  # as _calculate_rewards told the reward function
        local = list(zip(func.last_result.verdicts, texts, answers, questions, lengths, cut, strict=True))
        rows = gather_object(local) if self.accelerator.num_processes > 1 else local
        metrics = self.answer_monitor.observe(self.state.global_step, *map(list, zip(*rows, strict=True)))
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        if mode == "train":
            self._rollout_step = self.state.global_step
            self._monitor_answers(output, mode)
        # the fp32 sampler's entropies, kept with its old log-probs for the update in pieces
        entropies = self.__dict__.pop("_rollout_entropies", None)
        if entropies is not None and entropies.shape == output["completion_mask"].shape:
            output["sampler_entropies"] = entropies
        device = self.accelerator.device
        rewards_per_func = self._last_rewards_per_func
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
        if self.loss_type == "pacs":
            rewards = self._binary_labels(rewards, unscorable, rewards_per_func, mode)
        # Unscorable (every reward function returned None): counted below. PACS labels them 0 (every row of a
        # group needs a label); the baselines leave them out of the group baseline with advantage 0, as TRL does.
        rewards = rewards.masked_fill(unscorable, 0.0)
        n_local = output["completion_ids"].size(0)
        rank = self.accelerator.process_index
        local = slice(rank * n_local, (rank + 1) * n_local)
        output["rewards"] = rewards[local]  # (B_local,)
        if self.loss_type != "pacs":
            output["scored"] = ~unscorable[local]  # (B_local,)

        G = self.num_generations if mode == "train" else self.num_generations_eval
        metrics = self._metrics[mode]
        metrics["rewards/unscorable_frac"].append(unscorable.float().mean().item())
        metrics["groups/mixed_frac"].append(group_mixed_fraction(rewards, G))
        if self.use_vllm and not self.vllm_importance_sampling_correction:
            self._log_sampler_mismatch(output, mode)

        if self.ref_policy is not None:
            input_ids, attention_mask, mask = sequence_tensors(output)
            with torch.no_grad():
                ref_logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.ref_policy,
                    input_ids,
                    attention_mask,
                    mask.size(1),
                    batch_size=self.args.per_device_train_batch_size,
                )
            output["pacs_ref_per_token_logps"] = ref_logps
        return output

    def _log_sampler_mismatch(self, output: dict[str, Any], mode: str) -> None:
        """Mean and max |Δ log p| between vLLM's log-probs of the rollout's tokens and the trainer's, under TRL's
        names (``sampling/sampling_logp_difference/mean`` and ``/max``), which TRL logs only with its
        importance-sampling correction on. The trainer's are the rollout's old log-probs when TRL computed them,
        else one forward without gradient over the rollout batch."""
        sampled = output.get("sampling_per_token_logps")
        if sampled is None:  # vLLM returned no log-probs (server without them)
            return
        input_ids, attention_mask, mask = sequence_tensors(output)
        trainer_logps = output.get("old_per_token_logps")
        if trainer_logps is None:
            batch_size = self.args.per_device_train_batch_size if mode == "train" else None
            with torch.no_grad():
                trainer_logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, input_ids, attention_mask, mask.size(1), batch_size=batch_size
                )
        mean, largest = logprob_mismatch(trainer_logps, sampled, mask)
        metrics = self._metrics[mode]
        metrics["sampling/sampling_logp_difference/mean"].append(self.accelerator.gather(mean).mean().item())
        metrics["sampling/sampling_logp_difference/max"].append(self.accelerator.gather(largest).max().item())

    def _binary_labels(self, rewards, unscorable, rewards_per_func, mode) -> torch.Tensor:
        """PACS needs labels R ∈ {0, 1}: refuse (default) or threshold at 0.5 other values."""
        ok = (rewards == 0) | (rewards == 1) | unscorable
        if bool(ok.all()):
            return rewards
        bad = rewards[~ok]
        if self.args.reject_non_binary_rewards:
            funcs = ", ".join(
                f"{name} (e.g. {rewards_per_func[~ok][0, i].item():g})"
                for i, name in enumerate(self.reward_func_names)
            )
            raise ValueError(
                f"loss_type='pacs' treats the reward as a 0/1 label, but {bad.numel()} of {rewards.numel()} "
                f"completions got a reward outside {{0, 1}} (first: {bad[0].item():g}) from reward function(s): "
                f"{funcs}. Make the reward function return 0 or 1, or set reject_non_binary_rewards=False to "
                "threshold at 0.5."
            )
        self._metrics[mode]["rewards/thresholded_frac"].append((~ok).float().mean().item())
        return (rewards >= 0.5).float()

    def _prepare_inputs(self, generation_batch):
        # Same flow as GRPOTrainer._prepare_inputs, with groups (not rows) shuffled before the split.
        stopping.check()  # a stop asked for by a signal lands between micro-batches (pacs_rl.stopping)
        if not self.model.training:
            return self._generate_and_score_completions(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        generate = self._step % generate_every == 0 or self._buffered_inputs is None
        self._announce_step(len(generation_batch) if generate else None)
        if generate:
            started = time.perf_counter()
            batch = self._generate_and_score_completions(generation_batch)
            if self.args.dynamic_sampling:
                batch = self._dynamic_sampling(batch)
            if self.announce is not None:  # the update starts: a phase of its own
                self._say(
                    f"{self._step_name()}: update (the rollout took {time.perf_counter() - started:.0f} s)"
                )
            batch = split_pixel_values_by_grid(batch)
            batch = shuffle_groups(batch, self.num_generations)
            self._buffered_inputs = [
                unsplit_pixel_values_by_grid(b)
                for b in split_tensor_dict(batch, self.args.steps_per_generation)
            ]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _say(self, text: str) -> None:
        """One line of what the run is doing (``announce``: set by a run that prints them), on the main process."""
        if self.announce is not None and self.accelerator.is_main_process:
            self.announce(text)

    def _step_name(self) -> str:
        return f"step {self.state.global_step + 1}/{self.state.max_steps}"

    def _announce_step(self, rows: int | None) -> None:
        """At the first micro-batch of an optimizer step: the step starts, sampling ``rows`` rows of this process (the
        rollout's prompts × G), or (None) updating on the buffered rollout."""
        if self.announce is None or self._announced_step == self.state.global_step:
            return
        self._announced_step = self.state.global_step
        if rows is not None:
            prompts = rows // self.num_generations * self.accelerator.num_processes
            self._say(f"{self._step_name()}: sampling {prompts} prompts x {self.num_generations} completions")
        else:
            sampled = f" sampled in step {self._rollout_step + 1}" if self._rollout_step >= 0 else ""
            self._say(f"{self._step_name()}: update on the rollout{sampled}")

    # ------------------------------------------------------------------ dynamic sampling (DAPO)
    def _dynamic_sampling_prompts(self) -> PromptStream | None:
        """Where dynamic sampling draws its further prompts: the training set, by index (None when it is off)."""
        if not self.args.dynamic_sampling:
            return None
        dataset = self.train_dataset
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise ValueError(
                f"dynamic_sampling=True draws further prompts from the training set by index, which a "
                f"{type(dataset).__name__} (a streamed dataset) cannot give: load it as a datasets.Dataset, or "
                "set dynamic_sampling=False."
            )
        return PromptStream(len(dataset), self.args.seed, shuffle=self.shuffle_dataset)

    def _dynamic_sampling(self, batch: dict[str, Any]) -> dict[str, Any]:
        """This process's rollout batch with only groups whose rewards are not all equal, further rounds sampled
        until it is full or dynamic_sampling_max_rounds is reached (pacs_rl.training.dynamic_sampling)."""
        started, G, rows = time.perf_counter(), self.num_generations, batch["rewards"].numel()
        sequence_ratio = str(getattr(self, "vllm_importance_sampling_mode", "")).startswith("sequence")
        need, most = rows // G, self.args.dynamic_sampling_max_rounds
        round_ = {"number": 1, "kept": 0}

        def fewest_kept(kept: int) -> int:
            round_["kept"] = self._fewest_kept(kept)
            return round_["kept"]

        def sample_more() -> dict[str, Any]:
            round_["number"] += 1
            self._say(
                f"{self._step_name()}: dynamic sampling round {round_['number']} of at most {most} "
                f"({round_['kept']} of {need} groups with two different rewards so far): sampling {need} more prompts"
            )
            return self._generate_and_score_completions(self._more_prompts(need))

        filled = fill_batch(
            batch,
            sample_more,
            fewest_kept,
            G,
            self.args.dynamic_sampling_max_rounds,
            self._tokenizer.pad_token_id,
            per_sequence=("importance_sampling_ratio",) if sequence_ratio else (),
        )
        out = filled.batch
        mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
        # TRL's count of the loss's tokens, over the batch kept
        out["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
        device = self.accelerator.device
        kept, padded = self.accelerator.reduce(
            torch.tensor([filled.kept, filled.padded], dtype=torch.float64, device=device), reduction="sum"
        ).tolist()
        groups = rows // G * self.accelerator.num_processes
        step = {
            "groups_sampled": float(groups * filled.rounds),
            "groups_kept": kept,
            "groups_padded": padded,
            "rounds": float(filled.rounds),
            "seconds": time.perf_counter() - started,  # the further rounds: what dynamic sampling adds
        }
        totals = self.dynamic_sampling_totals
        totals["rollouts"] = totals.get("rollouts", 0.0) + 1
        for name, value in step.items():
            self._metrics["train"][f"dynamic_sampling/{name}"].append(value)
            totals[name] = totals.get(name, 0.0) + value
        if padded and self.accelerator.is_main_process and not getattr(self, "_warned_short", False):
            self._warned_short = True
            log.warning(
                "dynamic sampling: %d of %d groups of this rollout batch hold both labels after %d rounds "
                "(dynamic_sampling_max_rounds); %d places filled with single-label groups (counted in "
                "dynamic_sampling/groups_padded from now on, not warned again)",
                int(kept), groups, filled.rounds, int(padded),
            )  # fmt: skip
        return out

    def _fewest_kept(self, kept: int) -> int:
        """The fewest kept groups of any process, this one holding ``kept`` (a collective: every process calls it)."""
        if self.accelerator.num_processes == 1:
            return kept
        counts = self.accelerator.gather(torch.tensor([kept], device=self.accelerator.device))
        return int(counts.min().item())

    def _more_prompts(self, prompts: int) -> list[dict[str, Any]]:
        """The next ``prompts`` training rows of this process from the prompt stream, each G times in a row (as
        TRL's RepeatSampler hands them over); every process draws the round's prompts of all and takes its own."""
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        indices = self._prompt_stream.take(prompts * world)[rank * prompts : (rank + 1) * prompts]
        rows = [dict(self.train_dataset[i]) for i in indices]
        if self.args.remove_unused_columns:  # as transformers' data loader leaves them
            self._set_signature_columns_if_needed()
            rows = [{k: v for k, v in row.items() if k in self._signature_columns} for row in rows]
        return [dict(row) for row in rows for _ in range(self.num_generations)]

    # ------------------------------------------------------------------ loss
    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        input_ids, attention_mask, mask = sequence_tensors(inputs)
        if self._use_pieces and mode == "train" and model is self.model and torch.is_grad_enabled():
            logp, entropies = self._logps_backward_in_pieces(model, inputs, input_ids, attention_mask, mask)
        else:
            logp, entropies, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, mask.size(1), compute_entropy=True
            )  # (B, T) each
        old_logp = self._old_logps(mode, inputs, logp)
        rewards = inputs["rewards"]  # (B,) raw, 0/1 for PACS
        G = self.num_generations if mode == "train" else self.num_generations_eval

        options = loss_options(self.args, self.loss_type)
        batch = {"ref_logp": None, "scored": None, "is_weights": None}
        if self.loss_type == "pacs":  # eq. 8: π_ref = the rollout policy ("old") or the frozen copy
            batch["ref_logp"] = inputs.get("pacs_ref_per_token_logps", old_logp)
        else:
            if self.beta != 0.0:  # TRL's reference model (the initial policy) computed these at rollout time
                batch["ref_logp"] = inputs["ref_per_token_logps"]
            batch["scored"] = inputs.get("scored")
            # TRL computes it with use_vllm and vllm_importance_sampling_correction
            batch["is_weights"] = inputs.get("importance_sampling_ratio")

        rows = self._finite_rows(mode, G, mask, rewards, logp=logp, old_logp=old_logp, **batch)
        if rows is not None and rows.numel() == 0:  # no finite group: no loss, the step's norm decides
            return torch.where(torch.isfinite(logp), logp, 0.0).sum() * 0.0
        if rows is not None:
            logp, old_logp, mask, rewards = (x[rows] for x in (logp, old_logp, mask, rewards))
            entropies = None if entropies is None else entropies[rows]
            batch = {k: (None if v is None else v[rows]) for k, v in batch.items()}
        if mode == "train":
            self._note_signal(rewards, G, batch["scored"])
        loss, loss_metrics = compute_policy_loss(
            self.loss_type,
            logp=logp,
            old_logp=old_logp,
            mask=mask,
            rewards=rewards,
            group_size=G,
            **batch,
            **options,
        )
        if mode == "train":
            loss = loss / self.current_gradient_accumulation_steps

        self._log_step_metrics(mode, loss_metrics, entropies, mask, rewards, G)
        return loss

    def _logps_backward_in_pieces(self, model, inputs, input_ids, attention_mask, mask):
        """(logp, entropies) for `_compute_loss` with update_token_budget (pacs_rl.training.logprobs).

        logp holds the values without a graph; its backward runs the model's forward and backward in pieces.
        The values: the rollout's old log-probs while the policy has not stepped since the rollout (the same
        weights computed them), else a forward without gradient. entropies: the fp32 sampler's or that forward's;
        None when neither has them, and then the pieces compute and log them (over the rows they run)."""
        T, budget = mask.size(1), self.args.update_token_budget
        old = inputs.get("old_per_token_logps")
        if old is not None and self._policy_unchanged_since_rollout():
            values, entropies = old.float(), inputs.get("sampler_entropies")
        else:
            # without gradient only a piece's logits are alive (4 bytes x vocabulary per token): 4x the budget
            with torch.no_grad(), self.accelerator.autocast():
                values, entropies = completion_logps(
                    model, input_ids, attention_mask, T, self.temperature, 4 * budget, compute_entropy=True
                )

        def backward(grad: torch.Tensor) -> None:
            with self.accelerator.autocast():
                _, ent = completion_logps(model, input_ids, attention_mask, T, self.temperature, budget,
                                          grad=grad, compute_entropy=entropies is None)  # fmt: skip
            rows = mask * grad.ne(0).any(-1, keepdim=True)  # the rows the pieces ran (no gradient: skipped)
            if ent is not None and rows.any():
                self._metrics["train"]["entropy"].append(
                    (ent * rows).sum().item() / max(rows.sum().item(), 1.0)
                )

        anchor = torch.zeros((), device=input_ids.device, requires_grad=True)
        return LogpsBackwardInPieces.apply(anchor, values, backward), entropies

    def _old_logps(self, mode: str, inputs: dict[str, Any], logp: torch.Tensor) -> torch.Tensor:
        """The old policy's log-probs (B, T) for the loss: ``logp`` itself, detached, while the policy has not
        stepped since the rollout (it is the old policy then), else the rollout's (TRL's old_per_token_logps).

        The rollout's were computed by another computation of the same function: the fp32 sampler
        (old_logprobs_from_sampler), or a forward over other rows or in another dtype, equal to ``logp`` up to
        float rounding only. Taking ``logp`` makes PACS's r̂ = β Σ (logp − old) and ψ exactly 0, and a baseline's
        ratio exactly 1, instead of rounding noise that AdamW scales into a full step. TRL leaves the rollout's
        out when one optimizer step uses the whole rollout: the same case."""
        old = inputs.get("old_per_token_logps")
        if old is None or (mode == "train" and self._policy_unchanged_since_rollout()):
            return logp.detach()
        return old

    def _policy_unchanged_since_rollout(self) -> bool:
        """Whether no optimizer step has moved the policy since the buffered rollout was sampled (a skipped step
        moves nothing); False when unknown (the rollout's step not recorded)."""
        return self._rollout_step >= 0 and self._policy_step < self._rollout_step

    def _note_signal(self, rewards: torch.Tensor, G: int, scored: torch.Tensor | None) -> None:
        """Mark the optimizer step in progress as holding a signal when this micro-batch's loss has a group of
        two different rewards (among its scored rows: an unscored row's advantage is 0 for the baselines; PACS
        labels every row, so passes None)."""
        self._step_signal = self._step_signal or holds_signal(rewards, G, scored)

    def _finite_rows(self, mode, G, mask, rewards, **tensors) -> torch.Tensor | None:
        """Rows of the groups whose response tokens are finite in every given (B, T) tensor; None when all are.

        A non-finite log-prob (e.g. an fp16 overflow in the forward) must neither stop a long run nor reach the
        loss: its group is left out and counted (loss/nonfinite_groups_frac); if the backward still makes
        the gradient non-finite, the optimizer step is skipped (see _get_grad_norm).
        """
        token_tensors = {k: v for k, v in tensors.items() if v is not None and v.shape == mask.shape}
        ok = finite_groups(mask, G, rewards, **token_tensors)  # (n_groups,)
        seq_weights = tensors.get("is_weights")
        if seq_weights is not None and seq_weights.shape != mask.shape:  # one ratio per sequence, (B, 1)
            ok &= torch.isfinite(seq_weights.reshape(-1, G)).all(dim=1)
        self._metrics[mode]["loss/nonfinite_groups_frac"].append(1.0 - ok.float().mean().item())
        if bool(ok.all()):
            return None
        log.warning(
            "left out %d of %d groups with non-finite log-probs from this loss", int((~ok).sum()), ok.numel()
        )
        return ok.repeat_interleave(G).nonzero()[:, 0]

    # ------------------------------------------------------------------ optimizer step
    def _get_grad_norm(self, model, grad_norm=None):
        """transformers calls this on every optimizer step, after any clipping and before optimizer.step().

        Two kinds of step are skipped, by dropping the gradients (``zero_grad(set_to_none=True)``): torch's
        optimizers leave a parameter without a gradient alone, so weights, Adam moments, step counts and weight
        decay stay exactly as they were (a zero-gradient step would still move weights through the moments and
        the decay). The learning-rate schedule and global_step advance. Each is counted.
        - a non-finite gradient norm (as the PACS authors' actor and verl do);
        - with ``skip_no_signal_steps``, a step none of whose micro-batches, on any process, held a group with two
          different rewards: its gradient is float rounding or nothing (no signal, no step)."""
        grad_norm = super()._get_grad_norm(model, grad_norm)
        value = float(grad_norm) if grad_norm is not None else 0.0
        skipped = not math.isfinite(value)
        no_signal = self._step_without_signal()  # a collective: every process, every step
        deepspeed = getattr(self, "is_deepspeed_enabled", False)
        if skipped:
            self.num_skipped_steps += 1
            if self.accelerator.scaler is not None:
                pass  # fp16: the grad scaler finds the inf, skips the step and lowers its scale itself
            elif deepspeed:
                warnings.warn(
                    f"gradient norm {value} at step {self.state.global_step + 1}: under DeepSpeed the optimizer step is "
                    "DeepSpeed's own and cannot be skipped from here.",
                    stacklevel=2,
                )
            else:
                model.zero_grad(set_to_none=True)  # torch optimizers skip parameters without a gradient
                log.warning(
                    "skipped optimizer step %d: gradient norm %s (%d skipped so far)",
                    self.state.global_step + 1, value, self.num_skipped_steps,
                )  # fmt: skip
        elif no_signal:
            self.num_skipped_no_signal += 1
            model.zero_grad(set_to_none=True)
        if deepspeed or (not (skipped or no_signal) and self._step_moves_policy(model, value)):
            self._policy_step = self.state.global_step
        self._metrics["train"]["optimizer/skipped_nonfinite"].append(float(skipped))
        self._metrics["train"]["optimizer/skipped_no_signal"].append(float(no_signal and not skipped))
        return grad_norm

    def _step_moves_policy(self, model, grad_norm: float) -> bool:
        """Whether the optimizer step about to run changes a weight: it has a gradient (a parameter without one is
        left alone), and the gradient is not all zero, or weight decay or Adam moments of an earlier moving step
        move the weights anyway. (A zero gradient on zero moments without decay moves nothing.)"""
        if not any(p.grad is not None for p in model.parameters()):
            return False
        return grad_norm != 0 or self.args.weight_decay != 0 or self._policy_step >= 0

    def _step_without_signal(self) -> bool:
        """Whether the optimizer step now ending is to be skipped for want of a signal: skip_no_signal_steps is on,
        the step is the trainer's (not DeepSpeed's), and no micro-batch of it on any process held a group with two
        different rewards. Resets the mark for the next step."""
        signal, self._step_signal = self._step_signal, False
        if not self.args.skip_no_signal_steps or getattr(self, "is_deepspeed_enabled", False):
            return False
        if self.accelerator.num_processes > 1:  # the gradients are averaged: any process's signal counts
            flag = torch.tensor([float(signal)], device=self.accelerator.device)
            signal = bool(self.accelerator.reduce(flag, reduction="sum").item() > 0)
        return not signal

    def _log_step_metrics(self, mode, loss_metrics, entropies, mask, rewards, G) -> None:
        """Average each metric over processes (one all-reduce) and queue it for TRL's `log`."""
        loss_metrics = dict(loss_metrics)
        # PACS's critic AUC is defined on mixed groups only (nan without one): averaged over those groups
        auc, auc_groups = loss_metrics.pop("critic_auc", None), loss_metrics.pop("critic_auc_groups", 0)
        names = sorted(loss_metrics)
        local = [float(loss_metrics[k]) for k in names]
        entropy = float("nan")  # None: the update's pieces log it themselves (update_token_budget)
        if entropies is not None:
            entropy = (entropies.detach() * mask).sum().item() / max(mask.sum().item(), 1.0)
        local += [rewards.float().mean().item(), group_mixed_fraction(rewards, G), entropy]
        local += [auc * auc_groups if auc_groups else 0.0, float(auc_groups)]
        values = torch.tensor(local, dtype=torch.float64, device=self.accelerator.device)
        values = self.accelerator.reduce(values, reduction="mean").tolist()
        prefix = f"{self.loss_type}/"
        for name, value in zip(names, values[: len(names)], strict=True):
            key = name if "/" in name else prefix + name
            self._metrics[mode][key].append(value)
        accuracy, mixed, entropy, auc_sum, auc_groups = values[len(names) :]
        if auc is not None and auc_groups > 0:
            self._metrics[mode][prefix + "critic_auc"].append(auc_sum / auc_groups)
        if entropies is not None:
            self._metrics[mode]["entropy"].append(entropy)
        self._metrics[mode]["accuracy"].append(accuracy)  # of this mini-batch's completions
        self._metrics[mode]["groups/mixed_frac_minibatch"].append(mixed)

    # ------------------------------------------------------------------ reference policy (frozen mode)
    @torch.no_grad()
    def reset_reference(self) -> None:
        """Hard-reset the frozen reference to the current policy (paper §3.4)."""
        policy = self.accelerator.unwrap_model(self.model)
        self.ref_policy.load_state_dict(policy.state_dict())
        self.num_reference_resets += 1

    # ------------------------------------------------------------------ exact resume
    def _save_checkpoint(self, model, trial):
        folder = os.path.join(
            self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        )
        os.makedirs(folder, exist_ok=True)
        state = {
            "step": self._step,
            "buffered_inputs": self._buffered_inputs,
            "num_reference_resets": self.num_reference_resets,
            "num_skipped_steps": self.num_skipped_steps,
            "num_skipped_no_signal": self.num_skipped_no_signal,
            "rollout_step": self._rollout_step,
            "policy_step": self._policy_step,
        }
        if self._prompt_stream is not None:  # dynamic sampling: where its further prompts stand, its totals
            state["prompts_drawn"] = self._prompt_stream.drawn
            state["dynamic_sampling_totals"] = dict(self.dynamic_sampling_totals)
        if self.ref_policy is not None and self.accelerator.is_main_process:
            state["ref_policy"] = self.ref_policy.state_dict()
        path = os.path.join(folder, PACS_STATE_FILE.format(rank=self.accelerator.process_index))
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, PACS_STATE_FILE.format(rank=self.accelerator.process_index))
        if not os.path.isfile(path):
            warnings.warn(
                f"{path} is missing: the rollout batch in progress at this checkpoint is regenerated, so the resumed "
                "run will not match an uninterrupted one exactly.",
                stacklevel=2,
            )
            return
        # map_location="cpu", then move: under DDP on CPU the device is "cpu:<rank>", which torch.load refuses
        state = torch.load(path, map_location="cpu", weights_only=False)
        self._step = state["step"]
        self._buffered_inputs = _to_device(state["buffered_inputs"], self.accelerator.device)
        self.num_reference_resets = state.get("num_reference_resets", 0)
        self.num_skipped_steps = state.get("num_skipped_steps", 0)
        self.num_skipped_no_signal = state.get("num_skipped_no_signal", 0)
        # where the buffered rollout stands (an older checkpoint lacks it: the rollout's step counts as unknown)
        self._rollout_step = state.get("rollout_step", -1)
        self._policy_step = state.get("policy_step", -1)
        if self._prompt_stream is not None:
            self._prompt_stream.drawn = state.get("prompts_drawn", 0)
            self.dynamic_sampling_totals = dict(state.get("dynamic_sampling_totals", {}))
        if self.ref_policy is not None:
            ref_state = state.get("ref_policy")
            if ref_state is None:  # saved by the main process only
                main = os.path.join(checkpoint, PACS_STATE_FILE.format(rank=0))
                ref_state = torch.load(main, map_location="cpu", weights_only=False)["ref_policy"]
            self.ref_policy.load_state_dict(ref_state)


def _to_device(obj, device):
    """Tensors inside nested lists/dicts moved to ``device``; everything else unchanged."""
    if torch.is_tensor(obj):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_device(v, device) for v in obj]
    return obj


def _checkpoints_activations(model) -> bool:
    """Whether activation (gradient) checkpointing is on: it drops a KV cache passed to a layer in training."""
    flag = getattr(model, "is_activation_checkpointing", None)  # transformers >= 5.x name
    if flag is None:
        flag = getattr(model, "is_gradient_checkpointing", False)
    return bool(flag)


def _is_peft(model) -> bool:
    return is_peft_available() and isinstance(model, PeftModel)


__all__ = [
    "PACSTrainer",
    "ReferenceResetCallback",
    "clear_optimizer_state",
    "group_mixed_fraction",
    "sharding_problems",
    "shuffle_groups",
]
