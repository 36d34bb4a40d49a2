"""`PACSTrainer`: TRL's `GRPOTrainer` with one loss hook for every method and whole groups.

The trainer is TRL's overrides and what ties them together; each job is a module of its own that it delegates to:

- the rollout (`pacs_rl.training.rollout`): the fast sampler, its log-probs as the rollout's old log-probs, which
  completions were cut off at the token limit, whole groups shuffled;
- the signal (`pacs_rl.training.reward_signal`, `pacs_rl.training.dynamic_sampling`): the rewards and PACS's 0/1
  labels, the groups with two different rewards, dynamic sampling's rounds, the no-signal gate, the finite rows;
- the update (`pacs_rl.training.update`, `pacs_rl.training.logprobs`): what the loss is given, the old log-probs,
  the loss in pieces, the step's metrics, which optimizer steps are skipped and which move the policy.

TRL's private methods it overrides, and why, all in `PACSTrainer` below (tests/test_trl_contract.py watches each:
its signature, and that no other is overridden unwatched):

- `_calculate_rewards` / `_generate_and_score_completions`: keep the raw per-completion rewards in the
  inputs dict (TRL passes only advantages), check they are 0/1 for PACS, compute the frozen reference's
  log-probs when `reference="frozen"`, log rollout-level metrics.
- `_prepare_inputs`: TRL shuffles *rows* of a rollout batch before cutting it into micro-batches; we
  shuffle *groups*, so every micro-batch holds whole groups (ψ_i of PACS needs all r̂_j of its group). With
  `dynamic_sampling` (DAPO) the rollout batch first keeps only groups whose rewards are not all equal, further
  prompts sampled until it is full.
- `_compute_loss`: per-token log-probs, then `pacs_rl.algorithms.compute_policy_loss(args.loss_type, ...)`,
  divided by the accumulation steps itself (`loss_is_scaled_for_ga = True`, so transformers does not divide
  again); groups with a non-finite log-prob are left out and counted. The baselines also get TRL's reference
  log-probs (KL, `beta` > 0), the vLLM importance-sampling ratio and which completions were scored. With
  `update_token_budget` (one process) the log-probs are values whose backward runs the model in pieces. While the
  policy has not stepped since the rollout, the old log-probs are the loss's own (detached), so PACS's r̂ and ψ are
  exactly 0 and a baseline's ratio exactly 1.
- `_get_grad_norm`: a step whose gradient norm is not finite is skipped (gradients dropped before the
  optimizer step) and counted, whatever `max_grad_norm` (None/0: no clip, the norm still logged); so is, with
  `skip_no_signal_steps`, a step none of whose micro-batches (on any process) held a group with two different
  rewards: no signal, no step (docs/ALGORITHMS.md, "No signal, no step").
- `_get_per_token_logps_and_entropies`: with `logprob_impl="logits"` (`auto` on CPU) the LM head runs on the
  completion positions only, and (`shared_prompt_forward`) each distinct prompt runs once per batch with the
  completions trimmed to the longest (`pacs_rl.training.logprobs`); otherwise TRL's fused head. Right after a
  fast-sampler rollout, TRL's old-log-prob call takes the sampler's log-probs (`old_logprobs_from_sampler`).
- `_generate_single_turn`: with `fast_sampler`, each prompt is sampled once with n = G by pacs_rl.sampling.
- `_save_checkpoint` / `_load_optimizer_and_scheduler`: also save the buffered rollout batch, TRL's
  micro-step counter, the optimizer steps' record, dynamic sampling's prompt stream and the frozen reference, so a
  resumed run continues exactly.

With `use_vllm`: the engine TRL builds gets `vllm_engine_kwargs` (and, on vLLM's CPU build, the policy's dtype),
the colocate weight sync goes through vLLM's `reload_weights` on vLLM's CPU build, and without TRL's
importance-sampling correction (PACS) the rollout-vs-trainer log-prob mismatch is still logged
(`pacs_rl.training.vllm_colocate`).

Everything else (generation, vLLM, PEFT, accelerate/DeepSpeed, logging) is TRL's. A frozen reference is
refused under ZeRO-3 or FSDP, its optimizer reset under any DeepSpeed or FSDP (`sharding_problems`).
"""

from __future__ import annotations

import copy
import os
import time
import warnings
from collections.abc import Callable, Collection
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
from pacs_rl.algorithms import compute_policy_loss
from pacs_rl.rewards.trl_reward import MathRewardFunction
from pacs_rl.run_folder import PACS_STATE_FILE
from pacs_rl.sampling.transformers_backend import BF16_SLOW_WARNING, cpu_has_native_bf16
from pacs_rl.training.config import PACSConfig
from pacs_rl.training.dynamic_sampling import DynamicSampler
from pacs_rl.training.logprobs import completion_only_logps, pieces_problems
from pacs_rl.training.monitor import AnswerMonitor
from pacs_rl.training.reward_signal import (
    SignalGate,
    finite_rows,
    group_mixed_fraction,
    no_signal_skip_note,
    rollout_rewards,
)
from pacs_rl.training.rollout import FastSampler, cut_offs, sequence_tensors, shuffle_groups
from pacs_rl.training.update import (
    OptimizerSteps,
    logps_in_pieces,
    loss_batch,
    loss_options,
    nothing_to_learn,
    old_logps,
    step_metrics,
)
from pacs_rl.training.vllm_colocate import (
    engine_arguments,
    logprob_mismatch,
    torch_threads_kept,
    use_reloading_sync,
    vllm_runs_on_cpu,
)

if is_peft_available():
    from peft import PeftModel


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
    fast_sampler: FastSampler | None = None  # built at its first rollout (fast_sampler=True)

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
        self.signal_gate = SignalGate()
        self.optimizer_steps = OptimizerSteps()
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
        self._use_pieces = self._update_in_pieces()
        self.dynamic_sampler = None
        if args.dynamic_sampling:  # where its further prompts come from, what it did
            self.dynamic_sampler = DynamicSampler(
                self.train_dataset, args.seed, self.shuffle_dataset, self.num_generations,
                args.dynamic_sampling_max_rounds, self.accelerator,
            )  # fmt: skip
        self.answer_monitor = AnswerMonitor(
            args.output_dir, self._math_reward_grader(), write=self.accelerator.is_main_process
        )
        # a run that prints what it does (a log file, pacs_rl.training.run) sets this: one line per phase
        self.announce: Callable[[str], None] | None = None
        self._announced_step = -1  # the global_step whose start was announced

    @property
    def num_skipped_steps(self) -> int:
        """Optimizer steps skipped for a non-finite gradient norm (kept in checkpoints)."""
        return self.optimizer_steps.skipped_nonfinite

    @property
    def num_skipped_no_signal(self) -> int:
        """Optimizer steps skipped for want of a group with two different rewards (kept in checkpoints)."""
        return self.optimizer_steps.skipped_no_signal

    @property
    def dynamic_sampling_totals(self) -> dict[str, float]:
        """What dynamic sampling did over the run (kept in checkpoints): rollouts, groups sampled, kept and padded,
        rounds, seconds; empty when it is off."""
        return {} if self.dynamic_sampler is None else self.dynamic_sampler.totals

    # ------------------------------------------------------------------ TRL's private methods, overridden
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # every reward function is told which completions were cut off at the token limit (keyword `truncated`):
        # the training grader never pays one
        cut = self.completion_cut_offs(completion_ids_list)
        inputs = [{**x, "truncated": c} for x, c in zip(inputs, cut, strict=True)]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func  # (B_all_processes, n_funcs), gathered
        return rewards_per_func

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
        if self.fast_sampler is None:
            self.fast_sampler = FastSampler(
                self.accelerator.unwrap_model(self.model), self.processing_class, self.args
            )
        completions = self.fast_sampler.generate(
            prompt_ids, num_generations, self.temperature, self.top_p, self.max_completion_length,
            self.eos_token_ids,
        )  # fmt: skip
        return completions, None

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
            self.fast_sampler is not None
            and self.fast_sampler.old_logps is not None
            and model is self.model
            and not (torch.is_grad_enabled() or compute_entropy or compute_aux_loss)
        ):  # TRL's old-log-prob forward right after a fast-sampler rollout: the sampler already scored it
            logps = self.fast_sampler.take_old_logps(
                input_ids, attention_mask, logits_to_keep, entropies=self._use_pieces
            )  # the update in pieces reads the entropies too
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

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        if mode == "train":
            self.optimizer_steps.rollout_step = self.state.global_step
            self._monitor_answers(output, mode)
        # the fp32 sampler's entropies, kept with its old log-probs for the update in pieces
        entropies = None if self.fast_sampler is None else self.fast_sampler.pop_entropies()
        if entropies is not None and entropies.shape == output["completion_mask"].shape:
            output["sampler_entropies"] = entropies
        metrics = self._metrics[mode]
        rewards, unscorable, thresholded = rollout_rewards(
            self._last_rewards_per_func,
            self.reward_weights.to(self.accelerator.device),
            binary=self.loss_type == "pacs",
            reject_non_binary=self.args.reject_non_binary_rewards,
            func_names=self.reward_func_names,
        )
        if thresholded is not None:
            metrics["rewards/thresholded_frac"].append(thresholded)
        n_local = output["completion_ids"].size(0)
        rank = self.accelerator.process_index
        local = slice(rank * n_local, (rank + 1) * n_local)
        output["rewards"] = rewards[local]  # (B_local,)
        if self.loss_type != "pacs":
            output["scored"] = ~unscorable[local]  # (B_local,)

        G = self.num_generations if mode == "train" else self.num_generations_eval
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
        batch = loss_batch(self.loss_type, inputs, old_logp, self.beta)
        rows = self._finite_rows(mode, G, mask, rewards, logp=logp, old_logp=old_logp, **batch)
        if rows is not None and rows.numel() == 0:  # no finite group: no loss, the step's norm decides
            return nothing_to_learn(logp)
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
            **loss_options(self.args, self.loss_type),
        )
        if mode == "train":
            loss = loss / self.current_gradient_accumulation_steps
        self._log_step_metrics(mode, loss_metrics, entropies, mask, rewards, G)
        return loss

    def _get_grad_norm(self, model, grad_norm=None):
        """transformers calls this on every optimizer step, after any clipping and before optimizer.step(): a step
        whose gradient norm is not finite, or (``skip_no_signal_steps``) none of whose micro-batches on any process
        held a group with two different rewards, is skipped and counted (`OptimizerSteps.end`)."""
        grad_norm = super()._get_grad_norm(model, grad_norm)
        value = float(grad_norm) if grad_norm is not None else 0.0
        deepspeed = getattr(self, "is_deepspeed_enabled", False)
        # a collective: every process, every step; DeepSpeed takes the step itself
        no_signal = self.signal_gate.step_without_signal(
            self.args.skip_no_signal_steps and not deepspeed, self.accelerator
        )
        skipped = self.optimizer_steps.end(
            model, value, no_signal, self.state.global_step,
            grad_scaler=self.accelerator.scaler is not None, deepspeed=deepspeed,
            weight_decay=self.args.weight_decay,
        )  # fmt: skip
        self._metrics["train"]["optimizer/skipped_nonfinite"].append(float(skipped))
        self._metrics["train"]["optimizer/skipped_no_signal"].append(float(no_signal and not skipped))
        return grad_norm

    def _save_checkpoint(self, model, trial):
        folder = os.path.join(
            self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        )
        os.makedirs(folder, exist_ok=True)
        state = {
            "step": self._step,
            "buffered_inputs": self._buffered_inputs,
            "num_reference_resets": self.num_reference_resets,
            **self.optimizer_steps.state_dict(),
        }
        if self.dynamic_sampler is not None:  # where its further prompts stand, its totals
            state.update(self.dynamic_sampler.state_dict())
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
        self.optimizer_steps.load_state_dict(state)
        if self.dynamic_sampler is not None:
            self.dynamic_sampler.load_state_dict(state)
        if self.ref_policy is not None:
            ref_state = state.get("ref_policy")
            if ref_state is None:  # saved by the main process only
                main = os.path.join(checkpoint, PACS_STATE_FILE.format(rank=0))
                ref_state = torch.load(main, map_location="cpu", weights_only=False)["ref_policy"]
            self.ref_policy.load_state_dict(ref_state)

    # ------------------------------------------------------------------ the overrides' parts (PPOTrainer's too)
    def _dynamic_sampling(self, batch: dict[str, Any]) -> dict[str, Any]:
        """This process's rollout batch with only groups whose rewards are not all equal, further rounds sampled
        until it is full or dynamic_sampling_max_rounds is reached (pacs_rl.training.dynamic_sampling)."""
        sequence_ratio = str(getattr(self, "vllm_importance_sampling_mode", "")).startswith("sequence")
        out, step = self.dynamic_sampler.fill(
            batch,
            lambda prompts: self._generate_and_score_completions(self._more_prompts(prompts)),
            lambda text: self._say(f"{self._step_name()}: {text}"),
            self._tokenizer.pad_token_id,
            per_sequence=("importance_sampling_ratio",) if sequence_ratio else (),
        )
        for name, value in step.items():
            self._metrics["train"][f"dynamic_sampling/{name}"].append(value)
        return out

    def _more_prompts(self, prompts: int) -> list[dict[str, Any]]:
        """The next ``prompts`` training rows of this process for dynamic sampling, each G times in a row, with
        the columns transformers' data loader leaves (``remove_unused_columns``)."""
        columns: Collection[str] | None = None
        if self.args.remove_unused_columns:
            self._set_signature_columns_if_needed()
            columns = self._signature_columns
        return self.dynamic_sampler.prompts(prompts, columns)

    def _logps_backward_in_pieces(self, model, inputs, input_ids, attention_mask, mask):
        """(logp, entropies) for `_compute_loss` with update_token_budget (`update.logps_in_pieces`): the
        rollout's old log-probs (and the fp32 sampler's entropies) while the policy has not stepped since the
        rollout, else a forward without gradient."""
        old = inputs.get("old_per_token_logps")
        rollout = None
        if old is not None and self.optimizer_steps.policy_unchanged_since_rollout():
            rollout = (old, inputs.get("sampler_entropies"))
        return logps_in_pieces(
            model, input_ids, attention_mask, mask, self.temperature, self.args.update_token_budget,
            self.accelerator.autocast, rollout, lambda value: self._metrics["train"]["entropy"].append(value),
        )  # fmt: skip

    def _old_logps(self, mode: str, inputs: dict[str, Any], logp: torch.Tensor) -> torch.Tensor:
        """The old policy's log-probs (B, T) for the loss (`update.old_logps`): ``logp`` itself, detached, while
        the policy has not stepped since the rollout in training, else the rollout's."""
        unchanged = mode == "train" and self.optimizer_steps.policy_unchanged_since_rollout()
        return old_logps(inputs, logp, unchanged)

    def _finite_rows(self, mode, G, mask, rewards, **tensors) -> torch.Tensor | None:
        """Rows of the groups whose response tokens are finite in every given (B, T) tensor; None when all are
        (`reward_signal.finite_rows`); the fraction left out is logged (loss/nonfinite_groups_frac)."""
        rows, left_out = finite_rows(G, mask, rewards, **tensors)
        self._metrics[mode]["loss/nonfinite_groups_frac"].append(left_out)
        return rows

    def _note_signal(self, rewards: torch.Tensor, G: int, scored: torch.Tensor | None) -> None:
        """Mark the optimizer step in progress as holding a signal when this micro-batch's loss has a group of
        two different rewards (`reward_signal.SignalGate`)."""
        self.signal_gate.note(rewards, G, scored)

    def _log_step_metrics(self, mode, loss_metrics, entropies, mask, rewards, G) -> None:
        """Average each metric over processes (one all-reduce) and queue it for TRL's `log`."""
        for key, value in step_metrics(
            loss_metrics, entropies, mask, rewards, G, f"{self.loss_type}/",
            lambda values: self.accelerator.reduce(values, reduction="mean"), self.accelerator.device,
        ):  # fmt: skip
            self._metrics[mode][key].append(value)

    # ------------------------------------------------------------------ the rollout's other parts
    def completion_cut_offs(self, completion_ids: list[list[int]]) -> list[bool]:
        """Which of ``completion_ids`` (this process's, as generated) were cut off at the token limit: the fast
        sampler's finish reasons when they are its last samples, else the token count against
        max_completion_length and the EOS ids (TRL's generate, vLLM): `rollout.cut_offs`."""
        finish = None if self.fast_sampler is None else self.fast_sampler.finish
        return cut_offs(completion_ids, finish, self.max_completion_length, self.eos_token_ids)

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

    # ------------------------------------------------------------------ phase lines
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
            rollout_step = self.optimizer_steps.rollout_step
            sampled = f" sampled in step {rollout_step + 1}" if rollout_step >= 0 else ""
            self._say(f"{self._step_name()}: update on the rollout{sampled}")

    # ------------------------------------------------------------------ the run's set-up
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

    def _completion_only_head(self) -> bool:
        """Whether log-probs come from the model's own forward on the completion positions only."""
        impl = self.args.logprob_impl
        return impl == "logits" or (impl == "auto" and self.accelerator.device.type == "cpu")

    def _math_reward_grader(self) -> str | None:
        """The grader of the run's math reward function, None when no reward function is ``math``."""
        funcs = [f for f in getattr(self, "reward_funcs", []) if isinstance(f, MathRewardFunction)]
        return funcs[0].grader if funcs else None

    # ------------------------------------------------------------------ reference policy (frozen mode)
    @torch.no_grad()
    def reset_reference(self) -> None:
        """Hard-reset the frozen reference to the current policy (paper §3.4)."""
        policy = self.accelerator.unwrap_model(self.model)
        self.ref_policy.load_state_dict(policy.state_dict())
        self.num_reference_resets += 1


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
    "sharding_problems",
]
