"""Every setting of `pacs-rl train`, declared once: ``name: type = setting(default, help, check=...,
loss_option=...)`` (`pacs_rl.settings.declarations.setting`, a dataclass field) holds its name, type, default,
help text and the check that needs neither torch nor TRL. Everything else is read from these declarations:

- `RunSettings`: what a run trains on and reports (the data and prompt settings are
  `pacs_rl.settings.data.DataSettings`, shared with `pacs-rl eval` and `compare`);
- `PACSFields`: the fields PACS adds to TRL's `GRPOConfig` (and the TRL defaults it changes); `PACSConfig` is
  these fields over `GRPOConfig` (training/config.py), so the config class cannot drift from them. The PACS loss's
  options (pacs_beta, ...) are declared beside the loss, `pacs_rl.algorithms.options.PACS_OPTIONS`, and their fields
  generated from there (`PACSOptionFields`, which PACSFields extends);
- `CriticFields`: the critic's fields, which `PPOConfig` adds;
- TRL's own fields, with their types and how the trainer treats each, are one table in `trl_fields.py`.

A check (``check(name, value)``: a problem's text, a list of them, or None) runs in `pacs-rl train`, the dry run
and the config class; ``loss_option`` names the loss's keyword the trainer fills from the field. The type table
(`setting_type`), the loss options (`PACS_OPTION_FIELDS`), the options of `pacs-rl train` (their help, `--set`,
TRL's ``--name value``) and `--list-keys` are derived from the declarations. `CPU_DEFAULTS` is the config of the
CPU default run (configs/cpu_default.yaml, checked against it).

Adding a PACS option: a `LossOption` in `PACS_OPTIONS` (pacs_rl/algorithms/options.py) and the keyword in the loss
(pacs_rl/algorithms/pacs.py). Nothing else names it (tests/test_adding_an_option.py).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pacs_rl.algorithms.options import LOSS_AGG_MODES, PACS_OPTIONS
from pacs_rl.rewards.graders import TRAINING_GRADER, parse_grader, reward_spec_problem, split_reward_specs
from pacs_rl.run_folder import resolved_grader
from pacs_rl.settings.data import DataSettings
from pacs_rl.settings.declarations import at_least as _at_least
from pacs_rl.settings.declarations import declared, declared_problems, interval, option_class, setting, typed
from pacs_rl.settings.declarations import one_of as _one_of
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training.trl_fields import GRPO_FIELDS

# The names pacs_rl.algorithms registers, spelled here so that a name is checked without importing torch (the
# registry is read instead once it is loaded: `loss_type_names`; tests/test_trl_contract.py keeps them equal).
LOSS_TYPES = ("pacs", "grpo", "dr_grpo", "rloo", "cw_grpo", "ppo")
CRITIC_LOSS_TYPES = ("ppo",)  # served by PPOConfig, whose own fields (CriticFields) apply to it alone
POLICY_LOSS_TYPES = tuple(t for t in LOSS_TYPES if t not in CRITIC_LOSS_TYPES)
REFERENCES = ("old", "frozen")
LOGPROB_IMPLS = ("auto", "trl", "logits")
MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16")
FAST_SAMPLER_DTYPES = (None, "float32", "fp32", "bfloat16", "bf16")  # pacs_rl.sampling.TransformersSampler's


# ---------------------------------------------------------------------------------------------------- checks
def _grader(name: str, value: Any) -> str | None:
    if value == "auto":  # the old default's name, still accepted
        return None
    try:
        parse_grader(value)
    except ValueError as e:
        return f"{name}={value!r}: {e}"
    return None


def _reward_funcs(name: str, value: Any) -> list[str]:
    specs = split_reward_specs(value) if isinstance(value, (str, list)) else []
    if not specs:
        return [f"{name}={value!r}: name at least one, e.g. math or mypkg.rewards:my_reward"]
    return [f"{name}: {p}" for p in map(reward_spec_problem, specs) if p]


def _loss_type(name: str, value: Any) -> str | None:
    names = loss_type_names()
    return (
        None
        if value in names
        else f"{name}={value!r} is not a registered policy loss; use one of {', '.join(names)}"
    )


# ---------------------------------------------------------------------------------------------------- run keys
@dataclass
class RunSettings(DataSettings):
    """What a run trains on and reports, beside the trainer's config (the "run keys"); the data and prompt
    settings (split, problem_field, answer_field, prompt_field, instruction, system_prompt, skip_bad_rows) are
    :class:`pacs_rl.settings.data.DataSettings`', shared with `pacs-rl eval` and `compare`."""

    model: str = setting(
        "smollm2-135m", "Bundled alias (smollm2-135m), tiny (a tiny random model), Hub id or local folder."
    )
    dataset: str = setting(
        "arithmetic",
        "Training problems: arithmetic[?n=..&ops=..&digits=..] | reasoning_gym:<task> | a .jsonl/.json/"
        ".parquet file | a Hub dataset id | a benchmark name.",
    )
    arithmetic_ops: str = setting(
        "+-", "Operators of the built-in arithmetic task (training and held-out); '+-*' adds ×."
    )
    arithmetic_digits: str = setting(
        "2,1", "Operand lengths of the arithmetic task: '2,1' (47 + 8) or '2' (47 + 38)."
    )
    train_size: int = setting(
        2000,
        "Problems drawn for the arithmetic task (a ceiling: capped at the split's size) or rows "
        "kept of another source (0 = all).",
        check=_at_least(0, " (0 = all rows)"),
    )
    max_prompt_tokens: int | None = setting(
        None,
        "Drop training prompts longer than this many tokens after the chat template (counted and "
        "reported when the run starts; verl's data.max_prompt_length with filter_overlong_prompts; the paper: "
        "512). The dry run's memory plan takes it as the longest prompt. None: keep every prompt.",
        check=_at_least(1, ", or null", null=True),
    )
    eval_dataset: str | None = setting(
        None,
        "Held-out problems; default: the held-out arithmetic split when training on arithmetic. A file "
        "or Hub dataset is read with the training set's field names, a named benchmark with its own.",
    )
    eval_size: int = setting(
        200,
        "Held-out problems for before/after accuracy (0 = no evaluation).",
        check=_at_least(0, " (0 = no evaluation)"),
    )
    eval_temperature: float = setting(
        0.0,
        "Held-out sampling temperature (0 = greedy).",
        check=typed(float, interval(0, note=" (0 = greedy)")),
    )
    eval_top_p: float = setting(
        1.0,
        "Held-out nucleus sampling (top-p) with eval_temperature > 0, for the before/after accuracy and "
        "the eval_steps evaluation (the paper: 0.95); greedy ignores it.",
        check=typed(float, interval(0, 1, open_low=True, note=" (1 = no nucleus cut)")),
    )
    eval_max_new_tokens: int | None = setting(
        None,
        "Held-out completion length; default: max_completion_length.",
        check=_at_least(1, ", or null (max_completion_length)", null=True),
    )
    eval_batch_size: int = setting(50, "Held-out problems sampled together.", check=_at_least(1))
    reward_funcs: str | list = setting(
        "math",
        "Reward functions, comma-separated: math (the answer verifier, graded by `grader`) and/or your "
        "own as package.module:function or path/to/file.py:function, called as TRL calls reward functions "
        "(completions=..., prompts=..., one keyword per dataset column: answer, problem, problem_id). Weights: "
        "TRL's reward_weights.",
        check=_reward_funcs,
    )
    grader: str = setting(
        TRAINING_GRADER,
        "Grader of the math reward and the held-out accuracy: sound (the final answer read as a reader reads "
        "it, a number where the gold is one, never the question given back, a final form on MATH-style golds, "
        "never an answer cut at the token limit), paper (math-verify as the PACS authors call it; pays restated questions and unevaluated "
        "expressions), strict (a \\boxed{} answer), paper or strict with +rules (restatement, multiple_boxed, "
        "echo). auto is the old name of the default.",
        check=_grader,
    )
    model_dtype: str = setting(
        "auto",
        "Dtype the weights load in: auto (float32; bfloat16/float16 under DeepSpeed or FSDP training in "
        "bf16/fp16, which keep fp32 master weights) | float32 | bfloat16 | float16. bf16 autocast is the "
        "config's `bf16`.",
        check=_one_of(MODEL_DTYPES, "choose"),
        choices=list(MODEL_DTYPES),
    )
    use_lora: bool = setting(False, "Train a LoRA adapter (peft) instead of all weights.")
    lora_r: int = setting(16, "LoRA rank.", check=_at_least(1))
    lora_alpha: int = setting(32, "LoRA alpha.", check=_at_least(1))
    lora_dropout: float = setting(0.0, "LoRA dropout.", check=interval(0, 1, open_high=True))
    lora_target_modules: str = setting("all-linear", "LoRA target modules.")
    plot: bool = setting(True, "Write a PNG of the training curves at the end.")
    num_threads: int | None = setting(
        None,
        "torch CPU threads of each training process (torch.set_num_threads); default torch's own (one "
        "per core). 1 makes a run repeat itself bit for bit on one machine: with 2 threads two runs of the "
        "same command part in the 7th digit within a few steps (docs/benchmarks/repeatability.json), and "
        "after that their samples.",
        check=_at_least(1, ", or null", null=True),
    )
    mini_batch_prompts: int | None = setting(
        None,
        "The prompts per optimizer step these settings are written for (verl's ppo_mini_batch_size; "
        "the paper: 256). Checked, not applied: the run's own is per_device_train_batch_size x "
        "gradient_accumulation_steps x processes / num_generations, so it changes with the number of "
        "processes; where the two differ, the dry run's first lines and the run's start say by how much and "
        "which gradient_accumulation_steps gives it back.",
        check=_at_least(1, ", or null", null=True),
    )

    def __post_init__(self):
        problems = self.problems()
        if problems:
            raise SettingsError("; ".join(problems))

    def problems(self) -> list[str]:
        """Every setting that cannot be used, each naming the setting and what to do (empty when all is well)."""
        return declared_problems(self, dataclasses.fields(self))

    def on_arithmetic(self) -> bool:
        """Whether the training set is the built-in arithmetic task."""
        return self.dataset == "arithmetic" or self.dataset.startswith("arithmetic?")

    def resolved_grader(self) -> str:
        """``grader`` in its canonical name (``auto``, the old default's name, is the training grader)."""
        return resolved_grader(self.grader)

    def prompt_kwargs(self, config: Any = None) -> dict[str, Any]:
        """The prompt settings as :func:`pacs_rl.data.format_prompt` takes them (``chat_template_kwargs`` is
        the trainer config's own field, which TRL applies to the training prompts)."""
        return {
            "system_prompt": self.system_prompt,
            "instruction": self.instruction,
            "chat_template_kwargs": getattr(config, "chat_template_kwargs", None),
        }


# ---------------------------------------------------------------------------------------------------- config
# The options of the PACS loss, one field each, generated from their declaration beside the loss
# (pacs_rl/algorithms/options.py: name, type, default, check, help and the loss's keyword).
PACSOptionFields = option_class(
    "PACSOptionFields",
    PACS_OPTIONS,
    __name__,
    "The options of the PACS loss as config fields (pacs_rl.algorithms.options.PACS_OPTIONS), each filling the "
    "loss's keyword of its declaration.",
    init=False,
    repr=False,
    eq=False,
)


@dataclass(init=False, repr=False, eq=False)  # a declaration: PACSConfig builds the methods
class PACSFields(PACSOptionFields):
    """The fields `PACSConfig` adds to TRL's `GRPOConfig`, and the GRPOConfig defaults it changes. TRL's KL
    coefficient `beta` stays 0 for PACS (the paper uses no KL term; PACS's β is `pacs_beta`); for the group
    baselines it is their KL coefficient, with TRL's reference model."""

    # ---- which loss -------------------------------------------------------------------------------------
    loss_type: str = setting(
        "pacs",
        "Policy loss: a name registered in pacs_rl.algorithms (pacs_rl.algorithms.loss_names()), "
        "computed by compute_policy_loss on the same rollouts for every method; 'pacs' (default) is the BCE "
        "between σ(ψ) and the 0/1 reward (PACS paper eq. 9). A loss that needs a learned critic is served by "
        "its own config class (see the choices of `pacs-rl train --help`).",
        check=_loss_type,
        choices=list(POLICY_LOSS_TYPES),
    )
    loss_options: dict | str | None = setting(
        None,
        "Extra keyword options passed to the loss (pacs_rl.algorithms.policy_loss_options(loss_type) lists "
        "them), e.g. {'loss_agg_mode': 'seq-mean-token-sum-norm', 'clip_ratio_c': 3.0} for the PACS authors' "
        f"GRPO. The PACS options have their own fields ({', '.join(o.name for o in PACS_OPTIONS)}); the clipped "
        "losses get clip_eps / clip_eps_high from `epsilon` / `epsilon_high` and max_completion_length from the field of "
        "that name unless set here. A baseline's KL term is TRL's `beta` (not an option here).",
    )

    # ---- PACS (its loss's options are PACSOptionFields', above) -----------------------------------------
    reference: str = setting(
        "old",
        "π_ref of the reward proxy. 'old' (default, the authors' code): the policy that generated the "
        "rollout batch; r̂ = 0 on the first mini-batch of a rollout (its gradient is not 0) and informative on "
        "the later ones. 'frozen' (the paper's text): a copy of the policy, hard-reset to the current policy "
        "every `ref_reset_steps` optimizer steps.",
        check=_one_of(REFERENCES),
        choices=list(REFERENCES),
    )
    ref_reset_steps: int = setting(
        0,
        "With reference='frozen': copy the current policy into the reference every this many optimizer "
        "steps (0 = never). Must be a multiple of mini_batches_per_rollout so a reset falls between rollouts.",
        check=_at_least(0, " (0 = never reset)"),
    )
    reset_optimizer: bool = setting(
        False,
        "With reference='frozen' and ref_reset_steps > 0: clear the optimizer state (Adam moments) at "
        "each reference reset, as in the paper.",
    )
    mini_batches_per_rollout: int | None = setting(
        None,
        "Optimizer steps taken on each rollout batch (4 in the paper). Sets TRL's steps_per_generation = "
        "mini_batches_per_rollout × gradient_accumulation_steps. Default: 4, or derived from "
        "steps_per_generation / generation_batch_size when you set one of those instead.",
        check=_at_least(1, ", or null (4, or derived from steps_per_generation)", null=True),
    )
    skip_no_signal_steps: bool = setting(
        True,
        "Skip an optimizer step none of whose micro-batches (on any process) holds a group with two different "
        "rewards, for every loss: such a step's gradient is float rounding or nothing, which AdamW would turn into a "
        "full step of noise (and its moments and weight decay move weights even on a zero gradient). The weights "
        "and optimizer state stay exactly as they were; the step counts towards max_steps and is logged as "
        "optimizer/skipped_no_signal. False: step anyway, as the PACS authors' and TRL's trainers do. Not applied "
        "under DeepSpeed (its step is its own; a warning says so).",
    )
    reject_non_binary_rewards: bool = setting(
        True,
        "With loss_type='pacs', stop with an error naming the reward function when a reward is not 0 or "
        "1 (PACS treats the reward as a label). False thresholds at 0.5 instead, counted in the metrics.",
    )

    # ---- generation -------------------------------------------------------------------------------------
    fast_sampler: bool = setting(
        False,
        "Generate rollouts with pacs_rl.sampling.TransformersSampler (each prompt prefilled once and its "
        "KV cache shared by its G samples, exact inverse-CDF sampling, finished rows leave the batch) instead "
        "of transformers' generate. Same distribution in fp32; CPU/single-device text-only runs; ignored "
        "with use_vllm.",
    )
    fast_sampler_dtype: str | None = setting(
        None,
        "With fast_sampler: 'bfloat16' samples under bf16 autocast (bf16 matmul units of the CPU or GPU); None = model dtype.",
        check=_one_of(FAST_SAMPLER_DTYPES),
    )
    old_logprobs_from_sampler: bool = setting(
        False,
        "With fast_sampler in fp32 (bf16=False, fast_sampler_dtype=None, fp32 weights): the log-probs the "
        "sampler computed while drawing the rollout (at the sampling temperature) are the old log-probs, so "
        "TRL's extra forward over the rollout batch is skipped. Same policy, same weights: they differ from that "
        "forward by float rounding only. Otherwise (bf16, vLLM) the forward runs as usual, with a warning.",
    )
    fast_sampler_batch_size: int = setting(
        64, "With fast_sampler: sequences decoded together (bounds memory).", check=_at_least(1)
    )
    vllm_engine_kwargs: dict | str | None = setting(
        None,
        "With use_vllm and vllm_mode='colocate': further vllm.LLM arguments (JSON on the command line), "
        "e.g. {'enforce_eager': true, 'kv_cache_memory_bytes': 1000000000}. The arguments TRL sets from its own "
        "vllm_* fields are refused here. On vLLM's CPU build the dtype defaults to the policy's (vLLM would run "
        "an fp32 checkpoint in bf16).",
    )

    dynamic_sampling: bool = setting(
        False,
        "DAPO's dynamic sampling (verl: algorithm.filter_groups), for every loss: drop the groups whose "
        "rewards are all equal (with 0/1 rewards: one label only, no signal), and sample further prompts from "
        "the training set until the rollout batch is full of groups with both, at most "
        "dynamic_sampling_max_rounds rollout batches in all; a batch still short then is filled with "
        "single-label groups of the first. Logged as dynamic_sampling/groups_sampled, groups_kept, "
        "groups_padded, rounds and seconds.",
    )
    dynamic_sampling_max_rounds: int = setting(
        4,
        "With dynamic_sampling: the most rollout batches sampled for one, the first included (verl's "
        "max_num_gen_batches, which also counts the first; there 0 means no limit, here a cap is required). "
        "Each round costs one rollout's sampling and grading.",
        check=_at_least(1, " (1: no further sampling)"),
    )

    logprob_impl: str = setting(
        "auto",
        "How per-token log-probs are computed for the loss and the reference: 'trl' (TRL's fused, "
        "tiled LM head: low memory on GPUs, but without Triton it scores every prompt position too, in "
        "Python-level tiles), 'logits' (the model's own forward with logits_to_keep: the LM head on the "
        "completion positions only, then log-softmax), 'auto' = 'logits' on CPU, 'trl' elsewhere.",
        check=_one_of(LOGPROB_IMPLS),
        choices=list(LOGPROB_IMPLS),
    )

    shared_prompt_forward: bool = setting(
        True,
        "With the 'logits' log-prob path (logprob_impl='logits', or 'auto' on CPU): run each distinct "
        "prompt of a batch once and share its KV cache (with gradient) among its G completions, and trim the "
        "completions to the longest one. Same function as a forward over every full row, with (G-1)/G of the "
        "prompt work and the trailing padding left out. Off under gradient checkpointing (it drops the cache).",
    )

    update_token_budget: int | None = setting(
        None,
        "Run the update's backward in pieces of at most this many completion tokens (rows sorted by "
        "length, each piece padded to its own longest row): the log-probs' gradient is taken first (on the "
        "rollout's log-probs while the policy has not stepped since it, else on a forward without gradient), "
        "then each piece runs a forward and backward with it. Same gradient; activation memory bounded by the "
        "budget instead of the micro-batch, and the padding to the batch's longest completion left out. "
        "One process, the 'logits' log-prob path, no DeepSpeed/FSDP/activation checkpointing (otherwise "
        "ignored with a warning). None: one forward and backward per micro-batch (TRL's way).",
        check=_at_least(1, " tokens, or null (one forward and backward per micro-batch)", null=True),
    )

    # ---- defaults that differ from GRPOConfig -----------------------------------------------------------
    max_grad_norm: float | None = setting(
        1.0,
        "Clip the gradient norm at this value before each optimizer step. None or 0: no clipping, as the "
        "PACS authors' actor (configs/paper_*.yaml); the norm is still computed and logged as grad_norm. "
        "Whatever the clip, a step whose gradient norm is not finite is skipped (the weights and optimizer "
        "state stay as they were) and counted in optimizer/skipped_nonfinite.",
        check=interval(0, note=" (0 or null: no clipping)"),
    )
    vllm_importance_sampling_correction: bool | None = setting(
        None,
        "With use_vllm: weight the baselines' token losses by TRL's importance-sampling ratio between the "
        "trainer's and vLLM's log-probs (vllm_importance_sampling_mode / _clip_min / _clip_max choose it). "
        "Default (None): False for PACS, which has no ratio to correct (nor had the authors'); True for the "
        "baselines, TRL's default. True with loss_type='pacs' and use_vllm is refused.",
    )
    bf16: bool | None = setting(
        None,
        "bf16 mixed precision. Default: True on a CUDA machine, False otherwise (TRL's default True "
        "fails or slows down on CPU).",
    )
    logging_steps: float = setting(
        1,
        "Log every this many optimizer steps (also the rate of metrics.jsonl rows).",
        check=interval(0, open_low=True, note=" (below 1: a fraction of max_steps)"),
    )
    activation_checkpointing: bool | None = setting(
        None,
        "Recompute activations in the backward pass to save memory (slower; off by default, i.e. None "
        "reads as False).",
    )
    gradient_checkpointing: bool | None = setting(
        None,
        "The older name of activation_checkpointing (transformers 5 renamed it); either name works, "
        "without transformers' deprecation warning.",
    )


@dataclass(init=False, repr=False, eq=False)  # a declaration: PPOConfig builds the methods
class CriticFields:
    """The fields `PPOConfig` adds for its learned critic and GAE; they apply to loss_type='ppo' alone."""

    critic_model_name_or_path: str | None = setting(
        None,
        "Where the critic's backbone comes from: a local folder or Hub id loaded with "
        "AutoModelForTokenClassification(num_labels=1). Default: the policy's own weights (its path, or a copy of "
        "the model object you pass). A folder holding a saved critic (a checkpoint's critic/) keeps its value head; "
        "otherwise the head is new and zero-initialised.",
    )
    critic_learning_rate: float = setting(
        1e-5,
        "Learning rate of the critic's AdamW (1e-5 in the paper, Appendix B.2; actor 1e-6).",
        check=interval(0, open_low=True, note=" (1e-5 in the paper)"),
    )
    critic_max_grad_norm: float | None = setting(
        None,
        "Gradient-norm clip of the critic; default: the policy's max_grad_norm. 0 disables it (the norm is "
        "still logged). A critic step whose gradient norm is not finite is skipped and counted, as verl does.",
        check=interval(0, note=" (0 disables the clip; null: the policy's max_grad_norm)"),
    )
    critic_loss_agg_mode: str = setting(
        "token-mean",
        "How the value loss's token terms are reduced (pacs_rl.algorithms.aggregate_token_loss): 'token-mean' "
        "(default, TRL's and verl's), 'seq-mean-token-mean', or 'seq-mean-token-sum-norm' (the PACS authors' "
        "PPO: in their verl the critic follows the actor's loss_agg_mode; L = max_completion_length).",
        check=_one_of(LOSS_AGG_MODES, "choose"),
        choices=list(LOSS_AGG_MODES),
    )
    critic_warmup_steps: int = setting(
        0,
        "For the first this many optimizer steps only the critic trains: the policy gets no gradient and "
        "its optimizer skips it (weights and Adam state untouched). The steps count towards max_steps and the "
        "policy's learning-rate schedule.",
        check=_at_least(0),
    )
    gae_gamma: float = setting(
        1.0,
        "Discount γ of GAE over response tokens. 1.0 (default, verl's too): the outcome reward is not "
        "discounted, so every token's return is the reward itself.",
        check=interval(0, 1, note=" (1.0 is the default for outcome rewards)"),
    )
    gae_lambda: float = setting(
        1.0,
        "λ of GAE. 1.0 (default): A_t = R − V(s_t), unbiased Monte-Carlo advantages with the critic as "
        "baseline; smaller values trade bias from the critic for lower variance.",
        check=interval(0, 1, note=" (1.0 is the default for outcome rewards)"),
    )
    value_clip_eps: float = setting(
        0.5,
        "Clip range of the value loss: V may move at most this far from the rollout-time value before its "
        "error stops counting down (0.5 as in verl's cliprange_value). Use a large value to disable.",
        check=interval(0, open_low=True, note=" (e.g. 0.5; a large value disables the clip)"),
    )
    whiten_advantages: bool = setting(
        True,
        "Whiten the GAE advantages over the whole rollout batch (all processes): zero mean, unit "
        "variance over response tokens (verl does this for GAE). The critic's targets are not whitened.",
    )


# The config of the CPU default run (configs/cpu_default.yaml mirrors these and RunSettings' defaults; a test
# keeps them equal). Why each value: docs/TRAINING.md, "The first run".
CPU_DEFAULTS: dict[str, Any] = {
    "use_cpu": True,
    "bf16": None,  # unset: fp32 on a CPU (bf16 not shown to learn as well: device.CPU_BF16_DEFAULT), bf16 on GPUs
    "loss_type": "pacs",
    "num_generations": 8,
    "per_device_train_batch_size": 8,  # one group per forward/backward: half the activation memory
    "gradient_accumulation_steps": 2,  # 2 groups of 8 = 16 sequences per optimizer step
    "mini_batches_per_rollout": 2,  # 4 prompts x 8 completions per rollout, 2 optimizer steps on it
    "dynamic_sampling": True,  # only groups with both labels: without, most rollouts held no signal (pilot)
    "max_steps": 24,
    "learning_rate": 2.0e-5,
    "lr_scheduler_type": "constant",
    "warmup_steps": 0,
    "max_grad_norm": 1.0,
    "temperature": 0.7,  # at 1.0 the 135M model rambles and finds fewer right answers on this task
    "top_p": 1.0,
    "max_completion_length": 96,  # much shorter and most completions are cut off before their answer
    "fast_sampler": True,  # pacs_rl.sampling: one prefill per prompt shared by its 8 samples
    "fast_sampler_dtype": None,  # the model's fp32; bfloat16 with bf16 on a CPU (device.CPU_BF16)
    "old_logprobs_from_sampler": True,  # the fp32 sampler's log-probs are the old ones: no second forward
    "update_token_budget": 128,  # the backward in pieces of <= 128 completion tokens: peak memory, padding
    "logging_steps": 1,
    "save_strategy": "steps",
    "save_steps": 10,
    "save_total_limit": 2,
    "report_to": "none",
    "seed": 0,
    "dataloader_num_workers": 0,
}


# ---------------------------------------------------------------------------------------------------- lookups
RUN_FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(RunSettings)}
CONFIG_FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(PACSFields)}
CRITIC_FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(CriticFields)}
# the loss options the trainer fills from a PACS field (option -> field)
PACS_OPTION_FIELDS = {declared(f).loss_option: n for n, f in CONFIG_FIELDS.items() if declared(f).loss_option}


def known_keys() -> list[str]:
    """Every setting name: the run keys and every field of every trainer config class."""
    return sorted({*RUN_FIELDS, *CONFIG_FIELDS, *CRITIC_FIELDS, *GRPO_FIELDS})


def default_settings() -> dict[str, Any]:
    """The CPU default run as one flat mapping (what `pacs-rl train` runs with no arguments)."""
    return {**dataclasses.asdict(RunSettings()), **CPU_DEFAULTS}


def loss_type_names() -> tuple[str, ...]:
    """The loss types a run may name: the registry's once pacs_rl.algorithms is loaded (a loss registered from
    your code included), else LOSS_TYPES (without importing torch)."""
    registry = sys.modules.get("pacs_rl.algorithms.registry")
    return tuple(registry.loss_names()) if registry is not None else LOSS_TYPES


def type_text(annotation: Any) -> str:
    """A field's declared type as text, module paths dropped: 'int', 'float | None', 'SchedulerType | str'."""
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+", "", text)


def setting_type(key: str) -> str:
    """The declared type of setting ``key`` as text ('float', 'int | None', ...): ours, else TRL's."""
    for table in (RUN_FIELDS, CONFIG_FIELDS, CRITIC_FIELDS):
        if key in table:
            return type_text(table[key].type)
    return GRPO_FIELDS[key][0] if key in GRPO_FIELDS else "str"


def config_problems_declared(values: Mapping[str, Any]) -> list[str]:
    """What the declared checks of the config fields find in ``values`` (the critic's only with a critic loss)."""
    fields = list(CONFIG_FIELDS.values())
    if str(values.get("loss_type", "pacs")) in CRITIC_LOSS_TYPES:
        fields += list(CRITIC_FIELDS.values())
    return declared_problems(values, fields)
