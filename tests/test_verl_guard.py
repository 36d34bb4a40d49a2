"""The group guard of the verl integration, without verl installed: configs as nested dicts."""

from __future__ import annotations

import copy

import pytest

from pacs_rl.integrations.verl import VerlConfigError, check_verl_config, verl_config_problems
from pacs_rl.integrations.verl.guard import data_parallel_size

SAFE = {
    "algorithm": {"adv_estimator": "pacs", "rollout_correction": {"rollout_is": None}},
    "data": {"train_batch_size": 1024},
    "trainer": {"n_gpus_per_node": 8, "nnodes": 8, "balance_batch": False, "use_v1": False},
    "actor_rollout_ref": {
        "rollout": {"n": 8},
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
        ("algorithm.rollout_correction.rollout_is", "token", "rollout_is=null"),
    ],
)
def test_each_unsafe_setting_is_refused_by_name(path, value, named):
    config = with_(path, value)
    problems = verl_config_problems(config)
    assert any(named in p for p in problems), problems
    with pytest.raises(VerlConfigError, match="cannot run PACS with whole groups"):
        check_verl_config(config)


def test_deprecated_global_micro_batch_is_divided_by_the_ranks():
    config = with_("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", None)
    config["actor_rollout_ref"]["actor"]["ppo_micro_batch_size"] = 64 * 4  # 4 rows per GPU: half a group
    (problem,) = verl_config_problems(config)
    assert "ppo_micro_batch_size=256 / 64 ranks = 4 rows per GPU" in problem
    config["actor_rollout_ref"]["actor"]["ppo_micro_batch_size"] = 64 * 16
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
