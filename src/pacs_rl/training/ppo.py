"""PPO with a learned critic (PACS paper, Appendix A.1): the paper's main baseline, on PACSTrainer's path.

`PPOTrainer` is a `PACSTrainer` (same generation, rewards, whole-group shuffling, metrics, exact resume)
plus a value model. Per rollout batch (`_values_and_advantages`; with `dynamic_sampling`, on the batch it keeps):

    V_old(s_t)      critic values on the response tokens, next to TRL's old log-probs     (B, T)
    r_t             the outcome reward R on the last response token, 0 elsewhere            (B, T)
    δ_t = r_t + γ V(s_{t+1}) − V(s_t),   A_t = δ_t + γλ A_{t+1}     (1) GAE, no bootstrap past the end
    G_t = A_t + V_old(s_t)                                           (2) the critic's regression target
    Â_t = (A_t − mean A) / sqrt(var A + 1e-8)                        (3) optional, over the whole rollout batch

Per mini-batch (`_compute_loss`), with ρ_t = π_θ(o_t) / π_old(o_t):

    L_π = 1/B Σ_i 1/|o_i| Σ_t max(−Â ρ, −Â clip(ρ, 1−ε, 1+ε))                         (4) Appendix A.1
    L_V = ½ · mean_t max((V − G)², (V_old + clip(V − V_old, −ε_V, ε_V) − G)²)            (5) clipped value loss

(the reductions are the defaults; `loss_options={'loss_agg_mode': ...}` and `critic_loss_agg_mode` choose
others, e.g. the PACS authors' seq-mean-token-sum-norm for both, pacs_rl.algorithms.aggregate_token_loss).
A completion no reward function scored gets advantage 0 and no value target (left out of the whitening
statistics and of the value loss), as TRL leaves such completions out of its baseline.

The critic has its own optimizer (AdamW, `critic_learning_rate`) and steps on the same micro-batches as the
policy, at the same optimizer-step boundaries. For the first `critic_warmup_steps` optimizer steps only the
critic trains (the policy gets no gradient, so its optimizer skips it). With `skip_no_signal_steps` a step none of whose
micro-batches holds a group with two different rewards skips the policy's optimizer step (PACSTrainer's rule), not
the critic's: the critic's target, the reward, is information whatever the group.

Why γ = λ = 1 by default: the reward is a single outcome at the last token and the paper uses no KL penalty,
so with γ = λ = 1 the target G_t is exactly R for every token and A_t = R − V(s_t): an unbiased Monte-Carlo
advantage with the critic as a per-prefix baseline (verl's defaults too). λ < 1 would lean on a critic that
starts from a language model with a fresh head, biasing early advantages.

The value head is zero-initialised, so V ≡ 0 at the start and the first advantages are R itself (whitened).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from safetensors.torch import load_file
from torch import Tensor
from transformers import AutoConfig, AutoModelForTokenClassification, get_scheduler

from pacs_rl.algorithms import (
    CRITIC_LOSSES,
    compute_gae,
    masked_mean,
    masked_var,
    outcome_token_rewards,
    ppo_policy_loss,
    ppo_value_loss,
)
from pacs_rl.run_folder import CRITIC_DIR, CRITIC_OPTIMIZER_FILE, CRITIC_SCHEDULER_FILE
from pacs_rl.settings.declarations import declared_problems, setting
from pacs_rl.training.config import PACSConfig, ServedLosses
from pacs_rl.training.rollout import sequence_tensors
from pacs_rl.training.schema import CRITIC_FIELDS, CriticFields
from pacs_rl.training.trainer import PACSTrainer
from pacs_rl.training.trl_fields import CLIP_OPTION_FIELDS

log = logging.getLogger("pacs_rl.training")

# loss_options keys ppo_policy_loss accepts (its keyword arguments but the tensors of the batch)
PPO_OPTIONS = tuple(
    k
    for k in inspect.signature(ppo_policy_loss).parameters
    if k not in ("logp", "old_logp", "mask", "advantages", "is_weights")
)


# ----------------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------------


@dataclass
class PPOConfig(CriticFields, PACSConfig):
    """Configuration of `PPOTrainer`: every `PACSConfig` field plus the critic and GAE fields below.

    The policy's clip range is TRL's `epsilon` / `epsilon_high` (0.2 by default), its learning rate
    `learning_rate` (1e-6 in the paper); the critic's is `critic_learning_rate` (1e-5 in the paper).
    """

    served_loss_types: ClassVar[tuple[str, ...]] = ServedLosses(CRITIC_LOSSES)

    loss_type: str = setting(
        "ppo",
        "Always 'ppo' here: the clipped policy loss of PACS paper Appendix A.1 with GAE advantages from a learned "
        "critic. The other losses are served by PACSConfig / PACSTrainer.",
        choices=CRITIC_LOSSES,
    )

    def __post_init__(self):
        if self.loss_type not in self.served_loss_types:
            served = " or ".join(repr(t) for t in self.served_loss_types)
            raise ValueError(
                f"PPOConfig is for loss_type={served}, got {self.loss_type!r}; use PACSConfig for the other losses."
            )
        problems = declared_problems(self, CRITIC_FIELDS.values())
        if problems:
            raise ValueError(" ".join(problems))
        if self.reference != "old":
            raise ValueError(
                f"reference={self.reference!r} applies to PACS's reward proxy only; PPO's ratio is always against the "
                "rollout policy. Leave reference='old' with loss_type='ppo'."
            )
        if self.fp16:
            raise ValueError(
                "fp16=True is not supported with loss_type='ppo' (one gradient scaler cannot serve the policy's and "
                "the critic's optimizers); use bf16=True or full precision."
            )
        if self.deepspeed or self.fsdp:
            raise ValueError(
                "loss_type='ppo' runs the critic under plain accelerate (one or several processes, DDP); DeepSpeed and "
                "FSDP are not supported for the critic yet. Drop the deepspeed/fsdp setting, or use another loss_type."
            )
        unknown = sorted(set(dict(self._options_dict())) - set(PPO_OPTIONS))
        if unknown:
            raise ValueError(
                f"loss_options {unknown} are not accepted by the PPO policy loss; it accepts {list(PPO_OPTIONS)} "
                "(the critic has its own fields: value_clip_eps, critic_learning_rate, critic_loss_agg_mode, gae_gamma, "
                "gae_lambda)."
            )
        super().__post_init__()  # every shared field: batch shapes, whole groups, schedule

    def _options_dict(self) -> dict:
        if isinstance(self.loss_options, str):
            return json.loads(self.loss_options)
        return dict(self.loss_options or {})


# ----------------------------------------------------------------------------------------------------
# pure pieces
# ----------------------------------------------------------------------------------------------------


@torch.no_grad()
def ppo_advantages(
    rewards: Tensor,
    old_values: Tensor,
    mask: Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = True,
    all_reduce: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Advantages and value targets of a rollout batch, eq. (1)-(3).

    rewards: (B,) outcome rewards; old_values, mask: (B, T) → (advantages, returns), both (B, T), 0 on padding.
    `all_reduce` sums a tensor over processes, so whitening uses the statistics of the whole rollout batch.
    """
    token_rewards = outcome_token_rewards(rewards.to(old_values.dtype), mask)  # (B, T), R on the last token
    advantages, returns = compute_gae(token_rewards, old_values, mask, gamma=gamma, lam=lam)  # (1), (2)
    if whiten:  # (3), masked_whiten's formula with global statistics
        mean = masked_mean(advantages, mask, all_reduce=all_reduce)
        var = masked_var(advantages, mask, all_reduce=all_reduce)
        advantages = (advantages - mean) * torch.rsqrt(var + 1e-8)
        advantages = torch.where(mask.bool(), advantages, torch.zeros_like(advantages))
    return advantages, returns


@torch.no_grad()
def explained_variance(
    values: Tensor, returns: Tensor, mask: Tensor, all_reduce: Callable[[Tensor], Tensor] | None = None
) -> float:
    """1 − Var(G − V) / Var(G) over response tokens (1: perfect critic, 0: no better than the mean, < 0 worse).

    values, returns, mask: (B, T). NaN when the returns barely vary (variance < 1e-8, e.g. every reward equal:
    the ratio would only measure rounding noise).
    """
    var_returns = masked_var(returns, mask, all_reduce=all_reduce)
    var_error = masked_var(returns - values, mask, all_reduce=all_reduce)
    if var_returns.item() < 1e-8:
        return float("nan")
    return (1.0 - var_error / var_returns).item()


def critic_values(critic, input_ids: Tensor, attention_mask: Tensor, logits_to_keep: int) -> Tensor:
    """Per-token values V(s_t) of the response tokens.

    input_ids, attention_mask: (B, P + T) prompt (left-padded) then completion; → (B, T) in fp32. V(s_t) is read
    at the position before response token t (the state that emits it), as the policy's logits are.
    """
    out = critic(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    values = out.logits[:, -logits_to_keep - 1 : -1, 0]  # (B, T): hidden state before token t
    return values.float()


# ----------------------------------------------------------------------------------------------------
# the critic
# ----------------------------------------------------------------------------------------------------


def _is_value_model(config) -> bool:
    archs = getattr(config, "architectures", None) or []
    return getattr(config, "num_labels", None) == 1 and any(
        a.endswith("ForTokenClassification") for a in archs
    )


def build_critic(source, dtype=None):
    """A value model: the policy's backbone + a Linear(hidden, 1) head (`AutoModelForTokenClassification`).

    source: a causal-LM model object (its backbone weights are copied), or a path / Hub id. A saved critic keeps
    its head; a new head starts at zero (V ≡ 0). Dropout in the head is 0.
    """
    if isinstance(source, (str, os.PathLike)):
        config = AutoConfig.from_pretrained(source)
        fresh_head = not _is_value_model(config)
        # on the config: transformers 5's generic token-classification heads take no classifier_dropout argument
        config.num_labels, config.classifier_dropout = 1, 0.0
        kwargs = {"config": config}
        if dtype is not None:
            kwargs["dtype"] = dtype
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*newly initialized.*")
            critic = AutoModelForTokenClassification.from_pretrained(source, **kwargs)
    else:
        policy = source
        if type(policy).__name__.startswith("Peft"):
            raise ValueError(
                "The policy is a PEFT model; the critic cannot copy its backbone. Set critic_model_name_or_path to "
                "the base model's path."
            )
        config = policy.config.__class__.from_dict(policy.config.to_dict())
        config.num_labels, config.classifier_dropout = 1, 0.0
        config.architectures = None
        critic = AutoModelForTokenClassification.from_config(config)
        prefix = critic.base_model_prefix
        try:
            getattr(critic, prefix).load_state_dict(policy.base_model.state_dict())
        except RuntimeError as e:
            raise ValueError(
                f"could not copy the policy's backbone into the critic ({type(critic).__name__}): {e}. Set "
                "critic_model_name_or_path to a model folder instead."
            ) from None
        critic = critic.to(dtype=dtype or next(policy.parameters()).dtype)
        fresh_head = True
    if fresh_head:
        head = _value_head(critic)
        with torch.no_grad():
            head.weight.zero_()
            if head.bias is not None:
                head.bias.zero_()
    return critic


def _value_head(critic) -> torch.nn.Linear:
    for name in ("score", "classifier"):
        head = getattr(critic, name, None)
        if isinstance(head, torch.nn.Linear) and head.out_features == 1:
            return head
    raise ValueError(f"{type(critic).__name__} has no Linear(hidden, 1) head named 'score' or 'classifier'.")


# ----------------------------------------------------------------------------------------------------
# the trainer
# ----------------------------------------------------------------------------------------------------


class PPOTrainer(PACSTrainer):
    """PACSTrainer with a critic: GAE advantages, the clipped policy loss (4) and the clipped value loss (5).

    Same constructor as `PACSTrainer` / `trl.GRPOTrainer`; `args` must be a `PPOConfig`. `critic` (optional):
    a value model to use instead of building one (see `build_critic`).
    """

    def __init__(self, model, reward_funcs=None, args: PPOConfig | None = None, *pos, critic=None, **kw):
        if args is None or not isinstance(args, PPOConfig):
            raise TypeError(f"PPOTrainer needs args=PPOConfig(...), got {type(args).__name__}")
        if critic is None:
            dtype = (args.model_init_kwargs or {}).get("dtype")
            dtype = getattr(torch, dtype) if isinstance(dtype, str) and dtype != "auto" else dtype
            dtype = None if dtype == "auto" else dtype
            critic = build_critic(args.critic_model_name_or_path or model, dtype=dtype)
        super().__init__(model, reward_funcs, args, *pos, **kw)
        stage, fsdp = self._sharding()
        if stage is not None or fsdp:  # PPOConfig refuses the fields; this catches an accelerate config file
            raise ValueError(
                "loss_type='ppo' runs the critic under plain accelerate (DDP); this launch uses "
                f"{'FSDP' if fsdp else f'DeepSpeed ZeRO-{stage}'}, which the critic does not support yet. Launch "
                "without a DeepSpeed/FSDP accelerate config, or use another loss_type."
            )
        self.critic = critic.to(self.accelerator.device)
        self.num_skipped_critic_steps = 0
        if args.gradient_checkpointing:
            self.critic.gradient_checkpointing_enable(args.gradient_checkpointing_kwargs)
        self.critic_optimizer = None
        self.critic_lr_scheduler = None

    # ------------------------------------------------------------------ optimizer, scheduler
    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model) if model is not None else super().create_optimizer()
        if self.critic_optimizer is None:
            critic = self.accelerator.unwrap_model(self.critic)
            decay = set(self.get_decay_parameter_names(critic))
            groups = [
                {
                    "params": [p for n, p in critic.named_parameters() if n in decay and p.requires_grad],
                    "weight_decay": self.args.weight_decay,
                },
                {
                    "params": [p for n, p in critic.named_parameters() if n not in decay and p.requires_grad],
                    "weight_decay": 0.0,
                },
            ]
            critic_optimizer = torch.optim.AdamW(
                [g for g in groups if g["params"]],
                lr=self.args.critic_learning_rate,
                betas=(self.args.adam_beta1, self.args.adam_beta2),
                eps=self.args.adam_epsilon,
            )
            self.critic, self.critic_optimizer = self.accelerator.prepare(self.critic, critic_optimizer)
        return optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        if self.critic_lr_scheduler is None:
            self.critic_lr_scheduler = get_scheduler(
                self.args.lr_scheduler_type,
                optimizer=self.critic_optimizer,
                num_warmup_steps=self.args.get_warmup_steps(num_training_steps),
                num_training_steps=num_training_steps,
                scheduler_specific_kwargs=self.args.lr_scheduler_kwargs,
            )
        return scheduler

    # ------------------------------------------------------------------ rollout: old values, advantages
    def _all_reduce_sum(self, x: Tensor) -> Tensor:
        return self.accelerator.reduce(x, reduction="sum") if self.accelerator.num_processes > 1 else x

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)  # + raw rewards (B_local,)
        if self.model.training and self.args.dynamic_sampling:
            return output  # values and advantages over the batch dynamic sampling keeps, whitened over it
        return self._values_and_advantages(output)

    def _dynamic_sampling(self, batch):
        return self._values_and_advantages(super()._dynamic_sampling(batch))

    def _values_and_advantages(self, output):
        """The critic's values of a rollout batch, its GAE advantages (whitened over the whole batch, all
        processes) and returns, (1)-(3); the rollout's value metrics."""
        mode = "train" if self.model.training else "eval"
        input_ids, attention_mask, mask = sequence_tensors(output)
        T = mask.size(1)
        chunk = self.args.per_device_train_batch_size
        self.critic.eval()
        with torch.no_grad(), self.accelerator.autocast():
            old_values = torch.cat(
                [
                    critic_values(self.critic, input_ids[i : i + chunk], attention_mask[i : i + chunk], T)
                    for i in range(0, input_ids.size(0), chunk)
                ]
            )  # (B_local, T)
        old_values = torch.where(mask.bool(), old_values, torch.zeros_like(old_values))
        scored = output.get("scored")
        target_mask = mask if scored is None else mask * scored[:, None]  # unscored rows: no target, A = 0
        advantages, returns = ppo_advantages(
            output["rewards"].float(),
            old_values,
            target_mask,
            gamma=self.args.gae_gamma,
            lam=self.args.gae_lambda,
            whiten=self.args.whiten_advantages,
            all_reduce=self._all_reduce_sum,
        )
        output["ppo_old_values"] = old_values
        output["ppo_advantages"] = advantages
        output["ppo_returns"] = returns

        metrics = self._metrics[mode]
        metrics["ppo/explained_variance"].append(
            explained_variance(old_values, returns, target_mask, all_reduce=self._all_reduce_sum)
        )
        metrics["ppo/rollout_value_mean"].append(
            masked_mean(old_values, mask, all_reduce=self._all_reduce_sum).item()
        )
        metrics["ppo/rollout_return_mean"].append(
            masked_mean(returns, target_mask, all_reduce=self._all_reduce_sum).item()
        )
        return output

    # ------------------------------------------------------------------ loss: critic then policy
    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        input_ids, attention_mask, mask = sequence_tensors(inputs)
        T = mask.size(1)
        G = self.num_generations if mode == "train" else self.num_generations_eval
        scored = inputs.get("scored")
        target_mask = mask if scored is None else mask * scored[:, None]

        # Critic first: its graph is freed by its own backward before the policy's forward. (5)
        value_metrics = self._critic_update(
            inputs, input_ids, attention_mask, target_mask, T, train=mode == "train"
        )

        warmup = mode == "train" and self.state.global_step < self.args.critic_warmup_steps
        grad_context = torch.no_grad() if warmup else contextlib.nullcontext()
        with grad_context:
            logp, entropies, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, T, compute_entropy=True
            )  # (B, T) each
        old_logp = self._old_logps(mode, inputs, logp)  # logp itself while the policy has not stepped
        options = {option: getattr(self.args, name) for option, name in CLIP_OPTION_FIELDS.items()}
        options.update(self.args.loss_options)
        advantages, rewards = inputs["ppo_advantages"], inputs["rewards"]
        is_weights = inputs.get("importance_sampling_ratio")  # TRL's, with use_vllm and the correction
        rows = self._finite_rows(mode, G, mask, rewards, logp=logp, old_logp=old_logp, is_weights=is_weights)
        if rows is not None and rows.numel() == 0:
            loss = torch.where(torch.isfinite(logp), logp, 0.0).sum() * 0.0
        else:
            if rows is not None:
                logp, old_logp, mask, advantages, rewards, entropies = (
                    x[rows] for x in (logp, old_logp, mask, advantages, rewards, entropies)
                )
                is_weights = None if is_weights is None else is_weights[rows]
            if (
                mode == "train"
            ):  # no group of two different rewards: the policy's step is skipped, not the critic's
                self._note_signal(rewards, G, scored if rows is None or scored is None else scored[rows])
            loss, policy_metrics = ppo_policy_loss(
                logp, old_logp, mask, advantages, is_weights=is_weights, **options
            )  # (4)
            metrics = {**policy_metrics, **value_metrics, "critic_warmup": float(warmup)}
            self._log_step_metrics(mode, metrics, entropies, mask, rewards, G)
        if mode == "train":
            loss = loss / self.current_gradient_accumulation_steps
        if warmup:  # only the critic trains: the Trainer's backward reaches no policy weight
            loss = loss.detach().requires_grad_()
        return loss

    def _critic_update(self, inputs, input_ids, attention_mask, mask, T, train: bool) -> dict[str, float]:
        """Clipped value loss on one micro-batch; in training, its backward, and the critic's optimizer step on
        the last micro-batch of an optimizer step (the same boundary as the policy's). mask: (B, T), the
        response tokens that have a value target."""
        critic = self.critic
        critic.train(train)
        sync = self.accelerator.sync_gradients
        no_sync = (
            self.accelerator.no_sync(critic) if train and not sync else contextlib.nullcontext()
        )  # DDP: reduce critic gradients once per optimizer step
        metrics: dict[str, float] = {}
        with no_sync, torch.set_grad_enabled(train), self.accelerator.autocast():
            values = critic_values(critic, input_ids, attention_mask, T)  # (B, T)
            old_values, returns = inputs["ppo_old_values"], inputs["ppo_returns"]
            ok = torch.isfinite(torch.where(mask.bool(), values.detach(), 0.0)).all(dim=1)  # (B,)
            if not bool(ok.all()):  # a non-finite value: leave the row out (counted); the step's norm decides
                log.warning("left out %d rows with non-finite critic values", int((~ok).sum()))
                mask = mask * ok[:, None]
            metrics["value_nonfinite_frac"] = 1.0 - ok.float().mean().item()
            values = torch.where(mask.bool(), values, 0.0)
            value_loss, value_metrics = ppo_value_loss(
                values,
                old_values,
                returns,
                mask,
                clip_eps=self.args.value_clip_eps,
                loss_agg_mode=self.args.critic_loss_agg_mode,
                max_completion_length=self.args.max_completion_length,
            )
            metrics.update(value_metrics)
            if train:
                self.accelerator.backward(value_loss / self.current_gradient_accumulation_steps)
        if train and sync:
            metrics.update(self._critic_optimizer_step())
        return metrics

    def _critic_optimizer_step(self) -> dict[str, float]:
        """Clip (critic_max_grad_norm, default max_grad_norm; 0: none), skip a non-finite step (as verl's critic
        does), step AdamW and the schedule."""
        max_norm = self.args.critic_max_grad_norm
        max_norm = self.args.max_grad_norm if max_norm is None else max_norm
        out = {"critic_lr": self.critic_lr_scheduler.get_last_lr()[0]}
        norm = self.accelerator.clip_grad_norm_(
            self.critic.parameters(), max_norm if max_norm and max_norm > 0 else float("inf")
        )
        out["critic_grad_norm"] = float(norm)
        skipped = not math.isfinite(out["critic_grad_norm"])
        if skipped:
            self.num_skipped_critic_steps += 1
            log.warning(
                "skipped critic step: gradient norm %s (%d skipped so far)",
                out["critic_grad_norm"], self.num_skipped_critic_steps,
            )  # fmt: skip
        else:
            self.critic_optimizer.step()
        self.critic_lr_scheduler.step()
        self.critic_optimizer.zero_grad(set_to_none=True)
        out["critic_skipped_nonfinite"] = float(skipped)
        return out

    # ------------------------------------------------------------------ checkpoints and exact resume
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        """Save the policy (as TRL does) and the critic into <output_dir>/critic (a loadable value model)."""
        super().save_model(output_dir, _internal_call)
        output_dir = output_dir or self.args.output_dir
        state_dict = self.accelerator.get_state_dict(self.critic)  # collective under sharding: every rank
        if self.args.should_save:
            critic = self.accelerator.unwrap_model(self.critic)
            critic.config.architectures = [type(critic).__name__]
            critic.save_pretrained(os.path.join(output_dir, CRITIC_DIR), state_dict=state_dict)

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        super()._save_optimizer_and_scheduler(output_dir)
        if not self.args.should_save:
            return
        folder = os.path.join(output_dir, CRITIC_DIR)
        os.makedirs(folder, exist_ok=True)
        for name, obj in (
            (CRITIC_OPTIMIZER_FILE, self.critic_optimizer),
            (CRITIC_SCHEDULER_FILE, self.critic_lr_scheduler),
        ):
            path = os.path.join(folder, name)
            torch.save(obj.state_dict(), path + ".tmp")
            os.replace(path + ".tmp", path)

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        self.load_critic_weights(resume_from_checkpoint)

    def load_critic_weights(self, checkpoint: str) -> None:
        """Load <checkpoint>/critic/ into the critic; a checkpoint without one is refused (not silently reset)."""
        folder = os.path.join(checkpoint, CRITIC_DIR)
        files = [f for f in os.listdir(folder) if f.endswith(".safetensors")] if os.path.isdir(folder) else []
        if not files:
            raise FileNotFoundError(
                f"{folder} holds no critic weights: {checkpoint} was not written by a loss_type='ppo' run (or its save "
                "was cut). Resume from a PPO checkpoint, or start a new run."
            )
        state = {}
        for f in sorted(files):
            state.update(load_file(os.path.join(folder, f)))
        self.accelerator.unwrap_model(self.critic).load_state_dict(state)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        folder = os.path.join(checkpoint, CRITIC_DIR)
        paths = [os.path.join(folder, n) for n in (CRITIC_OPTIMIZER_FILE, CRITIC_SCHEDULER_FILE)]
        if not all(os.path.isfile(p) for p in paths):
            warnings.warn(
                f"{folder} lacks {CRITIC_OPTIMIZER_FILE}/{CRITIC_SCHEDULER_FILE} (save_only_model?): the critic resumes "
                "with a fresh optimizer, so the run will not match an uninterrupted one exactly.",
                stacklevel=2,
            )
            return
        self.critic_optimizer.load_state_dict(torch.load(paths[0], map_location="cpu", weights_only=True))
        self.critic_lr_scheduler.load_state_dict(torch.load(paths[1], map_location="cpu", weights_only=True))


__all__ = [
    "PPOConfig",
    "PPOTrainer",
    "build_critic",
    "critic_values",
    "explained_variance",
    "ppo_advantages",
]
