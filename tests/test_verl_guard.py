"""The group guard of the verl integration, without verl installed: configs as nested dicts, and the shipped
examples/verl configs and launch scripts read as YAML."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path

import pytest
import yaml

from pacs_rl.integrations.verl import VerlConfigError, check_verl_config, verl_config_problems
from pacs_rl.integrations.verl.guard import _fit, data_parallel_size, verl_batch_problems

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "verl"

SAFE = {
    "algorithm": {"adv_estimator": "pacs", "rollout_correction": {"rollout_is": None}},
    "data": {"train_batch_size": 1024},
    "trainer": {"n_gpus_per_node": 8, "nnodes": 8, "balance_batch": False, "use_v1": False},
    "actor_rollout_ref": {
        "rollout": {"n": 8, "tensor_model_parallel_size": 2, "log_prob_micro_batch_size_per_gpu": 32},
        "actor": {
            "ppo_mini_batch_size": 256,
            "ppo_micro_batch_size_per_gpu": 8,
            "use_dynamic_bsz": False,
            "shuffle": False,
            "policy_loss": {"loss_mode": "pacs", "pacs_beta": 1.0, "pacs_score": "rloo"},
            "fsdp_config": {"ulysses_sequence_parallel_size": 1},
        },
    },
}


def with_(path: str, value):
    config = copy.deepcopy(SAFE)
    node = config
    *parents, leaf = path.split(".")
    for key in parents:
        node = node[key]
    node[leaf] = value
    return config


def test_the_papers_recipe_passes():
    assert verl_config_problems(SAFE) == []
    check_verl_config(SAFE)


def test_non_pacs_runs_are_not_checked():
    config = with_("algorithm.adv_estimator", "grpo")
    config["actor_rollout_ref"]["actor"]["policy_loss"]["loss_mode"] = "vanilla"
    config["actor_rollout_ref"]["actor"]["use_dynamic_bsz"] = True
    assert verl_config_problems(config) == []


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        ("actor_rollout_ref.actor.use_dynamic_bsz", True, "use_dynamic_bsz=True"),
        ("actor_rollout_ref.actor.shuffle", True, "actor_rollout_ref.actor.shuffle=True"),
        ("trainer.balance_batch", True, "trainer.balance_batch=True"),
        ("trainer.use_v1", True, "set trainer.use_v1=False"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 12, "ppo_micro_batch_size_per_gpu=12"),
        (
            "actor_rollout_ref.actor.ppo_mini_batch_size",
            100,
            "ppo_mini_batch_size=100 prompts is not a multiple of the 64",
        ),
        ("data.train_batch_size", 1000, "data.train_batch_size=1000 is not a multiple"),
        ("actor_rollout_ref.rollout.n", 1, "rollout.n=1"),
        ("algorithm.adv_estimator", "grpo", "set algorithm.adv_estimator=pacs"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla", "policy_loss.loss_mode=pacs"),
        ("actor_rollout_ref.actor.policy_loss.pacs_score", "ppo", "pacs_score='ppo'"),
        ("actor_rollout_ref.actor.policy_loss.pacs_beta", 0.0, "pacs_beta=0.0"),
        (
            "actor_rollout_ref.actor.policy_loss.pacs_beta",
            -1.0,
            "policy_loss.pacs_beta=-1.0: give a number > 0",
        ),
        ("actor_rollout_ref.actor.policy_loss.pacs_beta", float("inf"), "pacs_beta=inf"),
        ("actor_rollout_ref.actor.policy_loss.pacs_beta", "abc", "pacs_beta='abc': expected float"),
        ("actor_rollout_ref.actor.policy_loss.pacs_weighted", "yes", "pacs_weighted='yes': expected bool"),
        ("algorithm.rollout_correction.rollout_is", "token", "rollout_is=null"),
    ],
)
def test_each_unsafe_setting_is_refused_by_name(path, value, named):
    config = with_(path, value)
    problems = verl_config_problems(config)
    assert any(named in p for p in problems), problems
    with pytest.raises(VerlConfigError, match="cannot run PACS"):
        check_verl_config(config)


def test_deprecated_global_micro_batch_is_refused_with_the_per_gpu_value():
    """verl 0.9's workers read only ppo_micro_batch_size_per_gpu and assert it is set (init_model)."""
    config = with_("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", None)
    config["actor_rollout_ref"]["actor"]["ppo_micro_batch_size"] = 64 * 16
    (problem,) = verl_config_problems(config)
    assert problem.startswith("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu is not set")
    assert "ppo_micro_batch_size=1024 is deprecated" in problem and problem.endswith("set it, e.g. to 16.")
    config["actor_rollout_ref"]["actor"]["ppo_micro_batch_size"] = 64 * 12  # 12 per GPU: not whole groups
    assert verl_config_problems(config)[0].endswith("set it, e.g. to 8.")
    config["actor_rollout_ref"]["actor"]["ppo_micro_batch_size_per_gpu"] = 16
    del config["actor_rollout_ref"]["actor"]["ppo_micro_batch_size"]
    assert verl_config_problems(config) == []


def test_all_problems_are_reported_at_once():
    config = with_("actor_rollout_ref.actor.shuffle", True)
    config["actor_rollout_ref"]["actor"]["use_dynamic_bsz"] = True
    config["trainer"]["balance_batch"] = True
    with pytest.raises(VerlConfigError, match=r"\(3 problem\(s\)\)"):
        check_verl_config(config)


def test_data_parallel_size_divides_out_model_parallelism():
    assert data_parallel_size(SAFE) == 64
    assert (
        data_parallel_size(with_("actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size", 4))
        == 16
    )
    megatron = copy.deepcopy(SAFE)
    megatron["actor_rollout_ref"]["actor"]["megatron"] = {
        "tensor_model_parallel_size": 4,
        "pipeline_model_parallel_size": 2,
    }
    assert data_parallel_size(megatron) == 8
    # 8 data-parallel ranks: 100 prompts per mini-batch no longer divides, 256 still does
    megatron["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = 100
    assert any("multiple of the 8 data-parallel ranks" in p for p in verl_config_problems(megatron))


# ---------------------------------------------------------------------------------------------------
# What verl 0.9 asserts on in its workers, after Ray starts


def test_log_prob_micro_batch_must_divide_the_rows_per_gpu():
    """1024 prompts × 8 / 64 ranks = 128 rows per GPU: 40 (the example's old value) fails verl's
    prepare_micro_batches at the first old-log-prob pass; 32 is the largest divisor below it."""
    config = with_("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", 40)
    (problem,) = verl_config_problems(config)
    assert problem == (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=40 does not divide the 128 rows per "
        "GPU of the old-log-prob pass (data.train_batch_size=1024 × rollout.n=8 / 64 data-parallel ranks), "
        "which verl asserts at the first step; use 32."
    )
    # the log-prob pass has no groups: any divisor works, a multiple of n is not needed
    assert verl_config_problems(with_("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", 2)) == []
    # Ulysses 2 halves the ranks: 256 rows per GPU, which 40 still does not divide
    sp = with_("actor_rollout_ref.actor.ulysses_sequence_parallel_size", 2)
    sp["actor_rollout_ref"]["rollout"]["log_prob_micro_batch_size_per_gpu"] = 40
    assert "the 256 rows per GPU" in verl_config_problems(sp)[0]


def test_update_micro_batch_must_divide_the_mini_batch_rows_per_gpu():
    """256 prompts × 8 / 64 ranks = 32 rows per GPU and mini-batch: 24 holds whole groups yet fails verl."""
    (problem,) = verl_config_problems(with_("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 24))
    assert (
        "ppo_micro_batch_size_per_gpu=24 does not divide the 32 rows per GPU of an update mini-batch"
        in problem
    )
    assert problem.endswith("use 16.")  # a divisor of 32 and a multiple of n = 8
    # 12 breaks both rules: one line, suggesting a size that satisfies both
    (problem,) = verl_config_problems(with_("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 12))
    assert "=12 is not a multiple of actor_rollout_ref.rollout.n=8" in problem
    assert "e.g. 8, which divides the 32 rows per GPU of a mini-batch" in problem
    assert verl_config_problems(with_("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 32)) == []


def test_reference_pass_is_checked_only_when_verl_builds_a_reference_model():
    config = with_("actor_rollout_ref.ref", {"log_prob_micro_batch_size_per_gpu": 40})
    assert verl_config_problems(config) == []  # no KL term: verl builds no reference model
    config["actor_rollout_ref"]["actor"]["use_kl_loss"] = True
    (problem,) = verl_config_problems(config)
    assert problem.startswith(
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=40 does not divide the 128"
    )
    assert problem.endswith("use 32.")
    # the reference has its own Ulysses size: 4 → 16 ranks, 512 rows per GPU, which 40 still does not divide
    config["actor_rollout_ref"]["ref"]["ulysses_sequence_parallel_size"] = 4
    assert "the 512 rows per GPU of the reference pass" in verl_config_problems(config)[0]
    # the actor's Ulysses 2 (new spelling) leaves the reference on all 8 GPUs: 4 prompts × 3 rows split over
    # the actor's 4 ranks, not over the reference's 8
    small = copy.deepcopy(config)
    small["trainer"].update(n_gpus_per_node=8, nnodes=1)
    small["data"]["train_batch_size"] = 4
    small["actor_rollout_ref"]["rollout"].update(n=3, log_prob_micro_batch_size_per_gpu=3)
    small["actor_rollout_ref"]["actor"].update(ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=3)
    small["actor_rollout_ref"]["actor"]["fsdp_config"]["ulysses_sequence_parallel_size"] = 2
    small["actor_rollout_ref"]["ref"] = {"log_prob_micro_batch_size_per_gpu": 3}
    (problem,) = verl_config_problems(small)
    assert "12 rows do not split evenly over the reference model's 8 data-parallel ranks" in problem
    # with LoRA the actor without its adapter is the reference: its pass uses the rollout's micro-batch
    config["actor_rollout_ref"]["model"] = {"lora": {"rank": 8}}
    assert verl_config_problems(config) == []
    del config["actor_rollout_ref"]["model"]
    config["actor_rollout_ref"]["ref"] = {}
    config["algorithm"]["use_kl_in_reward"] = True
    assert any(
        p.startswith("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu is not set")
        for p in verl_config_problems(config)
    )


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            None,
            "rollout.log_prob_micro_batch_size_per_gpu is not set: verl's workers assert it",
        ),
        (
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
            True,
            "log_prob_use_dynamic_bsz=True differs from actor_rollout_ref.actor.use_dynamic_bsz=False",
        ),
        (
            "actor_rollout_ref.rollout.tensor_model_parallel_size",
            3,
            "= 3 GPUs per rollout replica does not divide the 64 GPUs",
        ),
    ],
)
def test_verls_start_up_assertions_are_refused(path, value, named):
    problems = verl_config_problems(with_(path, value))
    assert any(named in p for p in problems), problems


def test_verl_batch_problems_hold_for_any_loss_and_state_verls_row_splits():
    grpo = with_("algorithm.adv_estimator", "grpo")
    grpo["actor_rollout_ref"]["actor"]["policy_loss"]["loss_mode"] = "vanilla"
    grpo["actor_rollout_ref"]["rollout"]["log_prob_micro_batch_size_per_gpu"] = 40
    assert verl_config_problems(grpo) == []  # not a PACS run: the PACS guard stays silent
    assert "=40 does not divide the 128 rows per GPU" in verl_batch_problems(grpo)[0]
    # rows, not prompts: 1000 prompts × 8 = 8000 rows do split over 64 ranks (125 each) for verl
    rows = with_("data.train_batch_size", 1000)
    assert all("do not split evenly" not in p for p in verl_batch_problems(rows))
    text = "\n".join(verl_batch_problems(rows))
    assert "=32 does not divide the 125 rows per GPU of the old-log-prob pass" in text and "use 25." in text
    assert (
        "data.train_batch_size=1000 is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size=256"
        in text
    )
    rows["data"]["train_batch_size"] = 1001
    assert "8008 rows do not split evenly over the 64 data-parallel ranks" in verl_batch_problems(rows)[0]
    mini = with_("actor_rollout_ref.actor.ppo_mini_batch_size", 250)  # 2000 rows: not a multiple of 64
    assert any("ppo_mini_batch_size=250 × rollout.n=8 = 2000 rows" in p for p in verl_batch_problems(mini))


@pytest.mark.parametrize(
    ("rows", "wanted", "step", "fit"),
    [(128, 40, 1, 32), (32, 24, 8, 16), (32, 4, 8, 8), (7, 5, 1, 1), (6, 4, 4, 4)],
)
def test_fit_is_a_divisor_and_a_multiple_of_the_step(rows, wanted, step, fit):
    assert _fit(rows, wanted, step) == fit
    assert fit % step == 0 and (rows % fit == 0 or rows % step != 0)


# ---------------------------------------------------------------------------------------------------
# Rollout correction: what changes the inputs of the PACS loss


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (
            "algorithm.rollout_correction.bypass_mode",
            True,
            "takes the rollout engine's log-probs as old_log_probs",
        ),
        ("algorithm.rollout_correction.rollout_rs", "seq_mean_k3", "rejects whole sequences"),
        ("algorithm.rollout_correction.rollout_rs", "token_k1,seq_max_k2", "rejects whole sequences"),
        ("algorithm.rollout_correction.rollout_rs", "token_k3", "drops them from eq. 8's masked sum"),
    ],
)
def test_rollout_correction_modes_that_change_pacs_inputs_are_refused(path, value, named):
    problems = verl_config_problems(with_(path, value))
    assert len(problems) == 1 and named in problems[0], problems
    assert problems[0].endswith(f"set {path}=null.") or problems[0].endswith(f"set {path}=false.")
    assert verl_config_problems(with_(path, None)) == []


def test_dynamic_sampling_is_refused_on_the_legacy_trainer_in_one_line():
    """verl's AlgoConfig declares algorithm.filter_groups, but only the DAPO recipe's trainer reads it: on the
    legacy trainer the plug-in runs it would be ignored, so it is refused, naming the setting."""
    config = copy.deepcopy(SAFE)
    config["algorithm"]["filter_groups"] = {"enable": True, "metric": "acc", "max_num_gen_batches": 10}
    (problem,) = verl_config_problems(config)
    assert problem.startswith("algorithm.filter_groups.enable=True: verl's legacy trainer")
    assert "\n" not in problem and problem.endswith("--set dynamic_sampling=true).")
    config["algorithm"]["filter_groups"]["enable"] = "false"  # a hydra override read as text
    assert verl_config_problems(config) == []


# ---------------------------------------------------------------------------------------------------
# The shipped examples


def _set(config: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.lstrip("+").split(".")
    for key in parents:
        config = config.setdefault(key, {})
    config[leaf] = value


def example_scripts() -> list[tuple[Path, str, list[str]]]:
    """(script, config name, its fixed key=value overrides) for every launch of the runner in
    examples/verl."""
    found = []
    for script in sorted(EXAMPLES.glob("*.sh")):
        for line in script.read_text().replace("\\\n", " ").splitlines():
            if "pacs_rl.integrations.verl " not in line:
                continue  # the data converter (pacs_rl.integrations.verl.data) and other lines
            tokens = shlex.split(line)
            name = next(t.split("=", 1)[1] for t in tokens if t.startswith("--config-name="))
            overrides = [t for t in tokens if "=" in t and not t.startswith(("-", "$"))]
            found.append((script, name, overrides))
    return found


def test_every_example_script_launches_a_shipped_config():
    launched = {name for _, name, _ in example_scripts()}
    assert launched == {path.stem for path in EXAMPLES.glob("*.yaml")}


@pytest.mark.parametrize("config_path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_example_config_passes_the_guard(config_path):
    """The YAML as written (verl's ppo_trainer.yaml fills the rest; tests/test_verl.py composes it with
    hydra), with the fixed overrides of the scripts that launch it."""
    config = yaml.safe_load(config_path.read_text())
    assert verl_config_problems(config) == [] and verl_batch_problems(config) == []
    for _, name, overrides in example_scripts():
        if name == config_path.stem:
            launched = copy.deepcopy(config)
            for override in overrides:
                key, value = override.split("=", 1)
                _set(launched, key, yaml.safe_load(value))
            assert verl_config_problems(launched) == []


def test_verls_config_class_is_generated_from_the_declaration():
    """PACSPolicyLossConfig (core.py) is options.policy_loss_config_class over verl's PolicyLossConfig: every
    declared field with its type, default and help, loss_mode pacs, and the declared checks when it is built (here
    over a stand-in for verl's class, a Mapping dataclass as verl's BaseConfig is)."""
    import collections.abc
    import dataclasses

    from pacs_rl.integrations.verl.options import LOSS_FIELDS, policy_loss_config_class

    @dataclasses.dataclass
    class PolicyLossConfig(collections.abc.Mapping):
        loss_mode: str = "vanilla"
        clip_cov_ratio: float = 0.0002

        def __getitem__(self, key):
            return getattr(self, key)

        def __iter__(self):
            return iter(f.name for f in dataclasses.fields(self))

        def __len__(self):
            return len(dataclasses.fields(self))

    generated = policy_loss_config_class(PolicyLossConfig, "somewhere.core")
    fields = {f.name: f for f in dataclasses.fields(generated)}
    assert generated.__module__ == "somewhere.core" and issubclass(generated, PolicyLossConfig)
    assert fields["loss_mode"].default == "pacs" and "clip_cov_ratio" in fields
    for f in LOSS_FIELDS:
        assert (fields[f.name].default, fields[f.name].metadata) == (f.default, f.metadata)
    config = generated(pacs_beta=0.5, pacs_score="dr_grpo")
    assert (config.pacs_beta, config.pacs_score, config.pacs_weighted) == (0.5, "dr_grpo", True)
    with pytest.raises(ValueError, match=r"actor.policy_loss.pacs_beta=0: give a number > 0"):
        generated(pacs_beta=0)
    with pytest.raises(ValueError, match=r"actor.policy_loss.pacs_score='ppo'; choose one of"):
        generated(pacs_score="ppo")


def test_the_sound_reward_asks_for_the_reward_manager_that_says_which_responses_were_cut_off():
    """verl hands a reward function the decoded text only: with our reward and a grader that refuses cut-off
    responses, the guard asks for PACSRewardManager, which tells it."""
    config = {
        **copy.deepcopy(SAFE),
        "reward": {"custom_reward_function": {"path": "pkg://pacs_rl.integrations.verl.reward"}},
    }
    (problem,) = verl_config_problems(config)
    assert problem.startswith(
        "reward.reward_manager: the sound grader never pays a response cut at the length"
    )
    assert "reward.reward_manager.name=PACSRewardManager" in problem
    manager = {"source": "importlib", "name": "PACSRewardManager",
               "module": {"path": "pkg://pacs_rl.integrations.verl.reward_manager"}}  # fmt: skip
    config["reward"]["reward_manager"] = manager
    assert verl_config_problems(config) == []
    del config["reward"]["reward_manager"]
    config["reward"]["custom_reward_function"]["reward_kwargs"] = {"grader": "paper"}  # pays them: no need
    assert verl_config_problems(config) == []
    legacy = {
        **copy.deepcopy(SAFE),
        "custom_reward_function": {"path": "pacs_rl/integrations/verl/reward.py"},
    }
    assert len(verl_config_problems(legacy)) == 1  # verl's older top-level key, which it migrates
