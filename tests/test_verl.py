"""PACS inside a real verl install (CPU): the registered estimator and loss called through verl's own
lookups and call sites equal pacs_rl.algorithms on the same input; the guard refuses each setting that
splits groups, on verl's own composed config. Run: python -m pytest -m verl tests/test_verl*.py"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.verl
verl = pytest.importorskip("verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.single_controller.base.decorator import _split_args_kwargs_data_proto  # noqa: E402
from verl.trainer import main_ppo  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.workers.engine.utils import prepare_micro_batches  # noqa: E402
from verl.workers.engine_workers import TrainingWorker  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402

from pacs_rl.algorithms import pacs_loss  # noqa: E402
from pacs_rl.integrations.verl import (  # noqa: E402
    VerlConfigError,
    check_verl_config,
    core,
    verl_config_problems,
)
from pacs_rl.integrations.verl.guard import verl_batch_problems  # noqa: E402
from pacs_rl.integrations.verl.labels import decode_labels  # noqa: E402

VERL_CONFIG_DIR = str(Path(main_ppo.__file__).resolve().parent / "config")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "verl"
G = 4

PACS_OVERRIDES = [
    "algorithm.adv_estimator=pacs",
    "actor_rollout_ref.actor.policy_loss._target_=pacs_rl.integrations.verl.core.PACSPolicyLossConfig",
    "actor_rollout_ref.actor.policy_loss.loss_mode=pacs",
    f"actor_rollout_ref.rollout.n={G}",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "data.train_batch_size=16",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.balance_batch=False",
    "trainer.use_v1=False",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
]


def verl_config(*extra: str, overrides=PACS_OVERRIDES):
    """verl's own ppo_trainer.yaml composed by hydra with the given overrides."""
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose("ppo_trainer", overrides=[*overrides, *extra])


def actor_config(*extra: str):
    """verl's ActorConfig exactly as its workers build it (omega_conf_to_dataclass of the actor node)."""
    return omega_conf_to_dataclass(verl_config(*extra).actor_rollout_ref.actor)


def make_batch(n_groups: int, group_size: int, max_len: int = 6, seed: int = 0):
    """Rows of n_groups groups (contiguous), random response lengths, 0/1 rewards with mixed groups."""
    gen = torch.Generator().manual_seed(seed)
    batch = n_groups * group_size
    lengths = torch.randint(1, max_len + 1, (batch,), generator=gen)
    mask = (torch.arange(max_len)[None, :] < lengths[:, None]).float()
    rewards = torch.randint(0, 2, (batch,), generator=gen).float()
    rewards[0], rewards[1] = 1.0, 0.0  # group 0 mixed whatever the draw
    uids = np.array([f"prompt-{g}" for g in range(n_groups) for _ in range(group_size)], dtype=object)
    old = -torch.rand(batch, max_len, generator=gen) * 2
    new = old + 0.3 * torch.randn(batch, max_len, generator=gen)
    return mask, rewards, uids, old, new, lengths


def outcome_rewards(rewards, mask, lengths):
    """verl's token_level_rewards: the outcome reward on the last response token."""
    out = torch.zeros_like(mask)
    out[torch.arange(len(rewards)), lengths - 1] = rewards
    return out


# ---------------------------------------------------------------------------------------------------
# Registration


def test_pacs_is_found_through_verls_registries():
    assert core_algos.get_adv_estimator_fn("pacs") is core.compute_pacs_label_advantage
    assert core_algos.get_policy_loss_fn("pacs") is core.compute_pacs_policy_loss
    core.register()  # idempotent: a second import (e.g. a Ray worker re-import) must not raise
    assert core_algos.get_adv_estimator_fn("pacs") is core.compute_pacs_label_advantage


def test_policy_loss_config_comes_from_verls_command_line():
    cfg = actor_config(
        "+actor_rollout_ref.actor.policy_loss.pacs_beta=0.5",
        "+actor_rollout_ref.actor.policy_loss.pacs_score=dr_grpo",
        "+actor_rollout_ref.actor.policy_loss.pacs_weighted=false",
    )
    assert isinstance(cfg.policy_loss, core.PACSPolicyLossConfig)
    assert (cfg.policy_loss.pacs_beta, cfg.policy_loss.pacs_score, cfg.policy_loss.pacs_weighted) == (
        0.5,
        "dr_grpo",
        False,
    )
    assert cfg.rollout_n == G
    with pytest.raises(Exception, match="pacs_score"):
        actor_config("+actor_rollout_ref.actor.policy_loss.pacs_score=ppo")


# ---------------------------------------------------------------------------------------------------
# The estimator, through verl's compute_advantage


def test_estimator_through_verls_compute_advantage_writes_labels_and_group_ids():
    mask, rewards, uids, _, _, lengths = make_batch(3, G)
    data = DataProto.from_single_dict(
        {"token_level_rewards": outcome_rewards(rewards, mask, lengths), "response_mask": mask, "uid": uids}
    )
    algo = omega_conf_to_dataclass(verl_config().algorithm)
    out = compute_advantage(data, adv_estimator=algo.adv_estimator, config=algo)
    adv = out.batch["advantages"]
    # eq. (A): 4·g + 2·R + 1 on every response token, 0 on padding; g = ordinal of the uid
    expected_code = 4 * torch.arange(3).repeat_interleave(G).float() + 2 * rewards + 1
    assert torch.equal(adv, expected_code[:, None] * mask)
    labels, groups = decode_labels(adv, mask)
    assert torch.equal(labels, rewards)
    assert torch.equal(groups, torch.arange(3).repeat_interleave(G))


def test_estimator_refuses_non_binary_rewards_and_missing_uid():
    mask, rewards, uids, _, _, lengths = make_batch(2, G)
    rewards[3] = 0.5  # a format bonus, say
    with pytest.raises(ValueError, match=r"0/1 label.*rows \[3\]"):
        core_algos.get_adv_estimator_fn("pacs")(
            token_level_rewards=outcome_rewards(rewards, mask, lengths), response_mask=mask, index=uids
        )
    with pytest.raises(ValueError, match="uid"):
        core_algos.get_adv_estimator_fn("pacs")(token_level_rewards=mask, response_mask=mask)


# ---------------------------------------------------------------------------------------------------
# The loss, through verl's own ppo_loss (the call site of the engine workers)


def verl_ppo_loss(config, new_lp, old, adv, mask, lengths, global_batch_size):
    """Call verl.workers.utils.losses.ppo_loss as the FSDP engine does: the model's log-probs come flat
    (no padding, one value per prompt+response token, shifted left by one) and verl re-pads them."""
    batch, max_len = mask.shape
    prompt_len = 2
    pieces = []
    for i in range(batch):
        filler = torch.zeros(1)
        pieces += [filler.expand(prompt_len - 1), new_lp[i, : lengths[i]], filler]
    flat = torch.cat(pieces)
    attention = torch.cat([torch.ones(batch, prompt_len), mask], dim=1).long()
    td = TensorDict(
        {
            "prompts": torch.ones(batch, prompt_len, dtype=torch.long),
            "responses": torch.ones(batch, max_len, dtype=torch.long),
            "attention_mask": attention,
            "response_mask": mask.long(),
            "old_log_probs": old,
            "advantages": adv,
        },
        batch_size=[batch],
    )
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=global_batch_size)
    return ppo_loss(config, {"log_probs": flat}, td)


@pytest.mark.parametrize(
    ("score", "weighted", "beta"), [("rloo", True, 1.0), ("grpo", False, 2.0), ("dr_grpo", True, 0.5)]
)
def test_loss_through_verls_ppo_loss_equals_pacs_loss(score, weighted, beta):
    mask, rewards, uids, old, new, lengths = make_batch(2, G, seed=3)
    config = actor_config(
        f"+actor_rollout_ref.actor.policy_loss.pacs_beta={beta}",
        f"+actor_rollout_ref.actor.policy_loss.pacs_score={score}",
        f"+actor_rollout_ref.actor.policy_loss.pacs_weighted={weighted}",
    )
    adv, _ = core.compute_pacs_label_advantage(outcome_rewards(rewards, mask, lengths), mask, index=uids)

    new_verl = new.clone().requires_grad_(True)
    loss, metrics = verl_ppo_loss(config, new_verl, old, adv, mask, lengths, global_batch_size=len(rewards))
    loss.backward()

    new_ref = new.clone().requires_grad_(True)
    expected, _ = pacs_loss(new_ref, old, mask, rewards, G, beta=beta, score=score, weighted=weighted)
    expected.backward()

    torch.testing.assert_close(loss.detach(), expected.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(new_verl.grad * mask, new_ref.grad * mask, rtol=1e-5, atol=1e-7)
    assert "pacs/psi_mean" in metrics and "actor/pg_loss" in metrics


def test_loss_regroups_interleaved_rows_and_scales_to_the_global_mini_batch():
    """Rows of two groups interleaved inside one micro-batch give the same loss as contiguous rows; verl's
    normalisation Σ_i ℓ_i · dp / global_batch_size makes a micro-batch of half the mini-batch count half."""
    mask, rewards, uids, old, new, lengths = make_batch(2, G, seed=5)
    adv, _ = core.compute_pacs_label_advantage(outcome_rewards(rewards, mask, lengths), mask, index=uids)
    config = actor_config()
    config.global_batch_info.update(dp_size=1, global_batch_size=2 * len(rewards))
    perm = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])  # g0 g1 g0 g1 ...
    loss, _ = core_algos.get_policy_loss_fn("pacs")(
        old_log_prob=old[perm],
        log_prob=new[perm],
        advantages=adv[perm],
        response_mask=mask[perm],
        config=config,
    )
    expected, _ = pacs_loss(new, old, mask, rewards, G)
    torch.testing.assert_close(loss, expected * len(rewards) / (2 * len(rewards)))


def test_loss_skips_verls_padding_rows():
    """verl pads a batch with rows whose response mask is empty: they carry no label and add no loss."""
    mask, rewards, uids, old, new, lengths = make_batch(1, G, seed=7)
    adv, _ = core.compute_pacs_label_advantage(outcome_rewards(rewards, mask, lengths), mask, index=uids)
    pad = 2
    config = actor_config()
    config.global_batch_info.update(dp_size=1, global_batch_size=G + pad)
    padded = [torch.cat([x, torch.zeros(pad, x.shape[1])]) for x in (old, new, adv, mask)]
    loss_fn = core_algos.get_policy_loss_fn("pacs")
    loss, _ = loss_fn(
        old_log_prob=padded[0],
        log_prob=padded[1],
        advantages=padded[2],
        response_mask=padded[3],
        config=config,
    )
    expected, _ = pacs_loss(new, old, mask, rewards, G)
    torch.testing.assert_close(loss, expected * G / (G + pad))
    only_pad = [x[G:] for x in padded]
    loss, metrics = loss_fn(
        old_log_prob=only_pad[0],
        log_prob=only_pad[1],
        advantages=only_pad[2],
        response_mask=only_pad[3],
        config=config,
    )
    assert loss.item() == 0.0 and metrics == {}


def test_loss_refuses_a_split_group_and_non_pacs_advantages():
    mask, rewards, uids, old, new, lengths = make_batch(2, G)
    adv, _ = core.compute_pacs_label_advantage(outcome_rewards(rewards, mask, lengths), mask, index=uids)
    config = actor_config()
    config.global_batch_info.update(dp_size=1, global_batch_size=len(rewards))
    loss_fn = core_algos.get_policy_loss_fn("pacs")
    keep = slice(0, 2 * G - 1)  # the last row of group 1 went to another micro-batch
    with pytest.raises(ValueError, match=r"whole groups of rollout.n=4.*\{1: 3\}.*use_dynamic_bsz"):
        loss_fn(
            old_log_prob=old[keep],
            log_prob=new[keep],
            advantages=adv[keep],
            response_mask=mask[keep],
            config=config,
        )
    grpo_adv, _ = core_algos.compute_grpo_outcome_advantage(
        outcome_rewards(rewards, mask, lengths), mask, uids
    )
    with pytest.raises(ValueError, match=r"algorithm\.adv_estimator=pacs"):
        loss_fn(old_log_prob=old, log_prob=new, advantages=grpo_adv, response_mask=mask, config=config)


# ---------------------------------------------------------------------------------------------------
# The guard, on verl's own composed config


def test_guard_accepts_the_safe_config_and_ignores_non_pacs_runs():
    assert verl_config_problems(verl_config()) == []
    check_verl_config(verl_config())
    assert verl_config_problems(verl_config(overrides=["actor_rollout_ref.actor.use_dynamic_bsz=True"])) == []


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("actor_rollout_ref.actor.use_dynamic_bsz=True", "actor_rollout_ref.actor.use_dynamic_bsz=True"),
        ("actor_rollout_ref.actor.shuffle=True", "actor_rollout_ref.actor.shuffle=True"),
        ("trainer.balance_batch=True", "trainer.balance_batch=True"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=6", "ppo_micro_batch_size_per_gpu=6"),
        ("data.train_batch_size=12", "data.train_batch_size=12"),
        ("algorithm.adv_estimator=grpo", "algorithm.adv_estimator='grpo'"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=vanilla", "loss_mode='vanilla'"),
        ("actor_rollout_ref.rollout.n=1", "actor_rollout_ref.rollout.n=1"),
        ("algorithm.rollout_correction.rollout_is=token", "rollout_correction.rollout_is='token'"),
        ("algorithm.rollout_correction.bypass_mode=True", "rollout_correction.bypass_mode=True takes"),
        ("algorithm.rollout_correction.rollout_rs=seq_mean_k1", "rollout_rs='seq_mean_k1' rejects whole"),
        ("algorithm.rollout_correction.rollout_rs=token_k2", "rollout_rs='token_k2' zeroes"),
        # 16 prompts × 4 / 1 GPU = 64 rows for the old-log-prob pass, 8 × 4 = 32 per update mini-batch
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=12", "=12 does not divide the 64 rows"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=12", "=12 does not divide the 32 rows"),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null", "per_gpu is not set"),
        ("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True", "log_prob_use_dynamic_bsz=True differs"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size=2", "does not divide the 1 GPUs"),
    ],
)
def test_guard_refuses_each_unsafe_setting(override, named):
    config = verl_config(override)
    with pytest.raises(VerlConfigError) as err:
        check_verl_config(config)
    assert named in str(err.value)


def test_guard_refuses_v1_trainer_and_mini_batches_that_straddle_ranks_on_several_gpus():
    config = verl_config(
        "trainer.n_gpus_per_node=4",
        "trainer.use_v1=True",
        "actor_rollout_ref.actor.ppo_mini_batch_size=6",
        "data.train_batch_size=12",
    )
    text = "\n".join(verl_config_problems(config))
    assert "trainer.use_v1=True: verl's v1 trainer" in text
    assert "ppo_mini_batch_size=6 prompts is not a multiple of the 4 data-parallel ranks" in text
    assert "data.train_batch_size=12 prompts is not a multiple of the 4" not in text  # 12 = 3 × 4
    # verl's own default is the v1 trainer: a PACS run must opt out of it
    assert any(
        "use_v1" in p
        for p in verl_config_problems(verl_config(overrides=[o for o in PACS_OVERRIDES if "use_v1" not in o]))
    )


# ---------------------------------------------------------------------------------------------------
# The guard against verl's own batch arithmetic
#
# verl checks its batch sizes inside the Ray workers only. Its checks are inline in methods of workers that
# need GPUs and a model, so the test runs the smallest units of verl that perform them, on one rank's rows
# (every rank gets an equal share): the dispatch's split over dp ranks
# (decorator._split_args_kwargs_data_proto, which asserts through chunk_tensordict), then
# TrainingWorker.infer_batch (old-log-prob and reference passes) and TrainingWorker.train_mini_batch →
# train_batch (update), verl's own methods called on a stand-in worker whose engine, like verl's FSDP engine,
# cuts its rows with verl's prepare_micro_batches and skips the model. What the stand-in reproduces from
# verl's source: the dp size (FSDPEngine.get_data_parallel_size: GPUs // the engine's Ulysses size, read from
# verl's own FSDPActorConfig), the micro-batch sizes that ActorRolloutRefWorker.init_model copies into the
# engine configs, and the meta that RayPPOTrainer._update_actor sends (mini_batch_size = ppo_mini_batch_size ×
# rollout.n).


class _StandInEngine:
    """What TrainingWorker asks of its engine on one rank; train/infer only cut micro-batches."""

    def __init__(self, dp: int):
        self.dp = dp

    def get_data_parallel_size(self):
        return self.dp

    def get_data_parallel_rank(self):
        return 0

    def train_mode(self, **kwargs):
        return contextlib.nullcontext()

    eval_mode = train_mode

    def is_mp_src_rank_with_outputs(self):
        return False

    def lr_scheduler_step(self):
        return None

    def train_batch(self, data, loss_function):
        prepare_micro_batches(data)  # FSDPEngine.forward_backward_batch's call, before any forward

    infer_batch = train_batch


class _Profiler:
    rank = 0

    def step(self):
        pass

    def check_enable(self):
        return False


def _stand_in_worker(dp: int, micro: int | None, infer_micro: int | None):
    engine_config = SimpleNamespace(
        use_dynamic_bsz=False,
        micro_batch_size_per_gpu=micro,
        infer_micro_batch_size_per_gpu=infer_micro,
        max_token_len_per_gpu=None,
        infer_max_token_len_per_gpu=None,
        use_fused_kernels=False,
        forward_only=False,
    )
    worker = SimpleNamespace(
        engine=_StandInEngine(dp),
        engine_config=engine_config,
        model_config={},
        loss_fn=ppo_loss,
        profiler=_Profiler(),
    )
    worker.train_batch = functools.partial(TrainingWorker.train_batch, worker)
    return worker


def _one_rank(rows: int, dp: int, **meta) -> TensorDict:
    """Rank 0's share of ``rows`` rows (with meta) when verl's dispatch splits them over ``dp`` ranks."""
    batch = TensorDict({"row": torch.arange(rows)}, batch_size=[rows])
    tu.assign_non_tensor(batch, global_token_num=None, **meta)
    (chunks,), _ = _split_args_kwargs_data_proto(dp, batch)
    return chunks[0].unlock_()  # as a Ray worker receives it: its own, writable copy


@functools.cache
def _verl_ulysses(actor_sp: int, fsdp_sp: int) -> int:
    """The actor engine's Ulysses size as verl's FSDPActorConfig derives it from the two keys."""
    config = verl_config(
        f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={actor_sp}",
        f"actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size={fsdp_sp}",
    )
    return omega_conf_to_dataclass(config.actor_rollout_ref.actor).engine.ulysses_sequence_parallel_size


@functools.cache
def _verl_reference(actor_sp: int, fsdp_sp: int, log_prob_micro: int) -> tuple[int, int]:
    """(Ulysses size, micro-batch size) of the reference engine, as verl's init_model builds it."""
    config = verl_config(
        f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={actor_sp}",
        f"actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size={fsdp_sp}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={log_prob_micro}",
    )
    ref = OmegaConf.to_container(config.actor_rollout_ref.ref, resolve=True)
    ref["ppo_mini_batch_size"] = config.actor_rollout_ref.actor.ppo_mini_batch_size
    ref["ppo_micro_batch_size"] = ref.pop("log_prob_micro_batch_size", None)
    ref["ppo_micro_batch_size_per_gpu"] = ref.pop("log_prob_micro_batch_size_per_gpu", None)
    ref["use_dynamic_bsz"] = ref.pop("log_prob_use_dynamic_bsz", False)
    ref["ppo_max_token_len_per_gpu"] = ref.pop("log_prob_max_token_len_per_gpu", None)
    ref_config = omega_conf_to_dataclass(OmegaConf.create(ref))
    return ref_config.engine.ulysses_sequence_parallel_size, ref_config.ppo_micro_batch_size_per_gpu


def verl_assertion(config) -> str | None:
    """Run verl's batch code for one step of ``config`` (see above); the AssertionError it raises, or None."""
    a = config.actor_rollout_ref
    gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
    sizes = (a.actor.ulysses_sequence_parallel_size, a.actor.fsdp_config.ulysses_sequence_parallel_size)
    dp = gpus // _verl_ulysses(*sizes)
    rows = config.data.train_batch_size * a.rollout.n
    actor = _stand_in_worker(
        dp, a.actor.ppo_micro_batch_size_per_gpu, a.rollout.log_prob_micro_batch_size_per_gpu
    )
    try:
        TrainingWorker.infer_batch(actor, _one_rank(rows, dp, compute_loss=False))  # old log-probs
        if a.actor.use_kl_loss:  # the reference pass, on the reference engine's own ranks
            ref_sp, ref_micro = _verl_reference(*sizes, a.ref.log_prob_micro_batch_size_per_gpu)
            ref = _stand_in_worker(gpus // ref_sp, None, ref_micro)
            TrainingWorker.infer_batch(ref, _one_rank(rows, gpus // ref_sp, compute_loss=False))
        mini = a.actor.ppo_mini_batch_size * a.rollout.n  # RayPPOTrainer._update_actor
        meta = dict(
            global_batch_size=mini,
            mini_batch_size=mini,
            epochs=1,
            seed=0,
            dataloader_kwargs={"shuffle": False},
        )
        TrainingWorker.train_mini_batch(actor, _one_rank(rows, dp, **meta))
    except AssertionError as err:
        return str(err) or "AssertionError"
    return None


def test_guard_refuses_exactly_what_verls_batch_code_asserts_on():
    """Over a grid of GPUs, Ulysses sizes (either spelling), prompts, n, mini- and micro-batch sizes and KL
    on/off, verl_batch_problems is non-empty exactly when verl's own code asserts, and the PACS guard refuses
    wherever verl asserts."""
    config = verl_config()
    a = config.actor_rollout_ref
    parallel = [(1, 1, 1), (8, 1, 1)] + [
        (gpus, sp, fsdp) for gpus in (2, 4) for sp, fsdp in ((1, 1), (2, 1), (1, 2))
    ]
    grid = itertools.product(parallel, (4, 6), (2, 3, 4), (1, 2, 4), (2, 3, 4), (2, 3, 8))
    counts, mismatches = {"asserts": 0, "runs": 0}, []
    for index, ((gpus, sp, fsdp), train, n, mini, micro, log_prob) in enumerate(grid):
        config.trainer.n_gpus_per_node = gpus
        config.data.train_batch_size = train
        a.rollout.n = n
        a.actor.ppo_mini_batch_size = mini
        a.actor.ppo_micro_batch_size_per_gpu = micro
        a.rollout.log_prob_micro_batch_size_per_gpu = log_prob
        a.actor.ulysses_sequence_parallel_size = sp
        a.actor.fsdp_config.ulysses_sequence_parallel_size = fsdp
        a.actor.use_kl_loss = index % 2 == 1  # the reference model's ranks follow only the first spelling
        a.ref.log_prob_micro_batch_size_per_gpu = (2, 3)[index % 3 == 0]
        verl_says = verl_assertion(config)
        counts["asserts" if verl_says else "runs"] += 1
        if bool(verl_says) != bool(verl_batch_problems(config)):
            mismatches.append((gpus, sp, fsdp, train, n, mini, micro, log_prob, verl_says))
        if verl_says:
            assert verl_config_problems(config), (gpus, sp, fsdp, train, n, mini, micro, log_prob, verl_says)
    assert mismatches == [], mismatches[:5]
    assert min(counts.values()) >= 200, counts  # the grid holds many of each outcome


def test_what_the_refused_rollout_correction_modes_do_to_the_pacs_inputs():
    """The reasons behind the guard's refusals, through verl's own rollout-correction code: bypass_mode puts
    the sampler's log-probs in old_log_probs and renames the loss; sequence-level rejection empties a row,
    which then leaves its group short in the PACS loss; token-level rejection drops tokens from eq. 8's masked
    sum."""
    from verl.trainer.ppo.rollout_corr_helper import (
        apply_bypass_mode,
        compute_rollout_correction_and_add_to_batch,
    )

    mask, rewards, uids, old, new, lengths = make_batch(2, G, seed=11)
    row = int(lengths.argmax())  # a row with several tokens, so token-level rejection leaves some
    rollout = old.clone()
    rollout[row, 0] -= 2.0  # the sampler's log-prob of one token differs from the trainer's

    def batch():
        tensors = {"old_log_probs": old, "rollout_log_probs": rollout, "response_mask": mask}
        tensors["token_level_rewards"] = outcome_rewards(rewards, mask, lengths)
        return DataProto.from_single_dict({**{k: v.clone() for k, v in tensors.items()}, "uid": uids})

    correction = {"rollout_is": None, "rollout_rs_threshold": 0.5, "bypass_mode": True}
    data, policy_loss = batch(), verl_config().actor_rollout_ref.actor.policy_loss
    apply_bypass_mode(data, rollout_corr_config=correction, policy_loss_config=policy_loss)
    assert torch.equal(data.batch["old_log_probs"], rollout) and policy_loss.loss_mode == "bypass_mode"

    algo = omega_conf_to_dataclass(verl_config().algorithm)
    config = actor_config()
    config.global_batch_info.update(dp_size=1, global_batch_size=len(rewards))

    def pacs_through_verl(data):
        data = compute_advantage(data, adv_estimator=algo.adv_estimator, config=algo)
        fields = ("old_log_probs", "advantages", "response_mask")
        old_lp, adv, response_mask = (data.batch[k] for k in fields)
        return core_algos.get_policy_loss_fn("pacs")(
            old_log_prob=old_lp, log_prob=new, advantages=adv, response_mask=response_mask, config=config
        )

    rejected, _ = compute_rollout_correction_and_add_to_batch(
        batch(), {**correction, "rollout_rs": "seq_max_k2"}
    )
    assert rejected.batch["response_mask"][row].sum() == 0  # 0.5 · 2² > 0.5: the whole row is rejected
    assert torch.equal(
        torch.cat([rejected.batch["response_mask"][:row], rejected.batch["response_mask"][row + 1 :]]),
        torch.cat([mask[:row], mask[row + 1 :]]),
    )
    with pytest.raises(ValueError, match=f"whole groups of rollout.n={G}"):
        pacs_through_verl(rejected)

    rejected, _ = compute_rollout_correction_and_add_to_batch(
        batch(), {**correction, "rollout_rs": "token_k2"}
    )
    kept = rejected.batch["response_mask"]
    assert kept[row, 0] == 0 and kept.sum() == mask.sum() - 1  # only the disagreeing token
    loss, _ = pacs_through_verl(rejected)
    torch.testing.assert_close(loss, pacs_loss(new, old, kept, rewards, G)[0])
    assert not torch.allclose(loss, pacs_loss(new, old, mask, rewards, G)[0])  # r̂ of eq. 8 changed


# ---------------------------------------------------------------------------------------------------
# Examples and processes


def test_example_configs_pass_the_guard_and_hold_the_papers_recipe():
    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        examples = {path.stem: compose(path.stem) for path in sorted(EXAMPLES.glob("*.yaml"))}
    paper, single = examples["pacs_qwen2.5_7b_deepscaler"], examples["pacs_qwen2.5_0.5b_single_gpu"]
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    for config in examples.values():  # every shipped example, composed on verl's own ppo_trainer.yaml
        check_verl_config(config)
        assert verl_batch_problems(config) == []
        # verl's own start-up validation (main_ppo.main runs it); PACS needs no critic and no reference model
        assert not need_critic(config) and not need_reference_policy(config)
        validate_config(config, use_reference_policy=False, use_critic=False)
    actor = paper.actor_rollout_ref.actor
    assert (paper.data.train_batch_size, actor.ppo_mini_batch_size, paper.actor_rollout_ref.rollout.n) == (
        1024,
        256,
        8,
    )
    assert (actor.optim.lr, actor.use_kl_loss, paper.algorithm.use_kl_in_reward) == (1e-6, False, False)
    assert (paper.data.max_prompt_length, paper.data.max_response_length) == (512, 4096)
    assert (paper.trainer.nnodes, paper.trainer.n_gpus_per_node, actor.ppo_micro_batch_size_per_gpu) == (
        8,
        8,
        8,
    )
    assert (actor.policy_loss.pacs_beta, actor.policy_loss.pacs_score, actor.policy_loss.pacs_weighted) == (
        1.0,
        "rloo",
        True,
    )
    assert isinstance(omega_conf_to_dataclass(actor).policy_loss, core.PACSPolicyLossConfig)
    for config in (paper, single):  # the authors' PACS optimizer step: no clip, verl's weight decay
        optim = omega_conf_to_dataclass(config.actor_rollout_ref.actor.optim)
        assert optim.clip_grad == float("inf") and optim.weight_decay == 0.01
        assert config.actor_rollout_ref.actor.grad_clip == float("inf")
        assert config.algorithm.rollout_correction.rollout_is is None


def test_verls_sum_norm_with_loss_scale_factor_is_the_authors_baselines_aggregation():
    """verl 0.9 divides seq-mean-token-sum-norm by the global batch size; with loss_scale_factor = L / (rows
    per micro-batch) its mini-batch loss equals verl 0.4.0's, which the PACS authors' GRPO and PPO ran, as
    pacs_rl.algorithms.aggregate_token_loss computes it per micro-batch (divided by the micro-batch count)."""
    from pacs_rl.algorithms import aggregate_token_loss

    gen = torch.Generator().manual_seed(0)
    mini, micro, length = 32, 8, 64
    loss_mat = torch.randn(mini, length, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, length + 1, (mini,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).double()
    chunks = range(0, mini, micro)
    authors = sum(
        aggregate_token_loss(loss_mat[i : i + micro], mask[i : i + micro], "seq-mean-token-sum-norm", length)
        for i in chunks
    ) / len(chunks)
    verl_09 = sum(
        core_algos.agg_loss(
            loss_mat[i : i + micro],
            mask[i : i + micro],
            "seq-mean-token-sum-norm",
            dp_size=1,
            global_batch_size=mini,
            loss_scale_factor=length // micro,
        )
        for i in chunks
    )
    torch.testing.assert_close(verl_09, authors)


def test_an_infinite_clip_leaves_the_gradient_as_is_and_returns_its_norm():
    """What verl's optimizer step does with optim.clip_grad = inf (torch's clip_grad_norm_, as on one GPU)."""
    layer = torch.nn.Linear(3, 2)
    layer(torch.randn(4, 3)).pow(2).sum().mul(100).backward()
    grads = [p.grad.clone() for p in layer.parameters()]
    norm = torch.nn.utils.clip_grad_norm_(layer.parameters(), max_norm=float("inf"))
    assert norm > 1.0 and all(torch.equal(p.grad, g) for p, g in zip(layer.parameters(), grads, strict=True))


def _run(args, env_extra):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **env_extra}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)


def test_a_fresh_import_verl_registers_pacs_through_the_entry_point():
    """What every Ray worker does: `import verl` loads the verl.plugins entry point of pacs-rl."""
    code = "import verl.trainer.ppo.core_algos as c; print(sorted(set(c.ADV_ESTIMATOR_REGISTRY) & {'pacs'}), 'pacs' in c.POLICY_LOSS_REGISTRY)"
    out = _run([sys.executable, "-c", code], {"VERL_USE_EXTERNAL_PLUGINS": "auto"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("['pacs'] True"), out.stdout


def test_the_environment_variable_alternative_registers_pacs_without_plugins():
    code = "import verl.trainer.ppo.core_algos as c; print('pacs' in c.ADV_ESTIMATOR_REGISTRY, 'pacs' in c.POLICY_LOSS_REGISTRY)"
    env = {
        "VERL_USE_EXTERNAL_PLUGINS": "none",
        "VERL_USE_EXTERNAL_MODULES": "pacs_rl.integrations.verl.plugin",
    }
    out = _run([sys.executable, "-c", code], env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("True True"), out.stdout
    off = _run([sys.executable, "-c", code], {"VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert off.stdout.strip().endswith("False False"), off.stdout  # nothing else registers it


def test_runner_checks_the_config_before_verl_starts():
    base = [sys.executable, "-m", "pacs_rl.integrations.verl", *PACS_OVERRIDES]
    ok = _run(base, {"PACS_VERL_CHECK_ONLY": "1"})
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "pacs-rl verl config OK" in ok.stdout and "n=4" in ok.stdout
    bad = _run([*base, "actor_rollout_ref.actor.use_dynamic_bsz=True"], {"PACS_VERL_CHECK_ONLY": "1"})
    assert bad.returncode != 0
    assert "actor_rollout_ref.actor.use_dynamic_bsz=True" in bad.stderr
    example = [sys.executable, "-m", "pacs_rl.integrations.verl", f"--config-path={EXAMPLES}"]
    paper = _run([*example, "--config-name=pacs_qwen2.5_7b_deepscaler"], {"PACS_VERL_CHECK_ONLY": "1"})
    assert paper.returncode == 0, paper.stderr[-2000:]
    assert "n=8 dp=64 mini=256 micro_per_gpu=8" in paper.stdout
    # the example's former log-prob micro-batch: 1024 × 8 / 64 = 128 rows per GPU, which verl 0.9 asserts on
    old = _run(
        [
            *example,
            "--config-name=pacs_qwen2.5_7b_deepscaler",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=40",
        ],
        {"PACS_VERL_CHECK_ONLY": "1"},
    )
    assert old.returncode == 2, old.stderr[-2000:]
    assert "log_prob_micro_batch_size_per_gpu=40 does not divide the 128 rows" in old.stderr
    assert "Traceback" not in old.stderr  # a setting to change, said in one line per problem


# ---------------------------------------------------------------------------------------------------
# Data and reward for a verl run


def test_prepared_parquet_is_read_by_verls_rlhf_dataset(shared_data, tiny_tokenizer, tmp_path):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from pacs_rl.integrations.verl.data import write_verl_parquet

    out = tmp_path / "train.parquet"
    assert write_verl_parquet(shared_data / "train_deepscaler_subset.jsonl", out, limit=4) == 4
    config = verl_config("data.max_prompt_length=4096", f"++data.cache_dir={tmp_path / 'cache'}").data
    dataset = RLHFDataset(str(out), tiny_tokenizer, config)
    assert len(dataset) == 4
    row = dataset[0]
    assert row["raw_prompt"][-1]["content"].endswith(r"put your final answer within \boxed{}.")
    assert row["reward_model"]["ground_truth"] == r"\frac{3}{7}"


def test_reward_function_loads_through_verls_loader_and_returns_labels():
    from verl.utils.import_utils import load_extern_object

    score = load_extern_object("pkg://pacs_rl.integrations.verl.reward", "compute_score")
    assert score("pacs/x", r"so the answer is \boxed{\frac{3}{7}}", r"\frac{3}{7}") == 1.0
    assert score("pacs/x", r"so the answer is \boxed{0.5}", r"\frac{3}{7}") == 0.0
    assert score("pacs/x", "no boxed answer", r"\frac{3}{7}") == 0.0
    # the training grader: the question given back is no answer, whatever math-verify makes of it
    question = {"question": "What is 47 + 8?"}
    assert score("pacs/x", r"\boxed{55}", "55", question) == 1.0
    assert score("pacs/x", r"\boxed{8 + 47}", "55", question) == 0.0
    assert score("pacs/x", r"\boxed{8 + 47}", "55", question, grader="paper") == 1.0


def test_the_reward_manager_tells_the_sound_reward_which_responses_were_cut_off(
    tiny_model_dir, tiny_tokenizer
):
    """Through verl's own loader and config: PACSRewardManager decides from the token ids (a response that fills
    data.max_response_length without EOS is cut off) and the sound reward refuses those; a response that stopped
    earlier, or on EOS, is graded. The row's shared extra_info is left as it was."""
    from verl.trainer.ppo.reward import load_reward_manager

    width = 12
    config = verl_config(
        f"data.max_response_length={width}",
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        "reward.custom_reward_function.path=pkg://pacs_rl.integrations.verl.reward",
        "reward.custom_reward_function.name=compute_score",
        "reward.reward_manager.source=importlib",
        "reward.reward_manager.name=PACSRewardManager",
        "reward.reward_manager.module.path=pkg://pacs_rl.integrations.verl.reward_manager",
    )
    assert verl_config_problems(config) == []
    manager = load_reward_manager(config, tiny_tokenizer)
    assert type(manager).__name__ == "PACSRewardManager" and manager.max_response_length == width
    eos, pad = tiny_tokenizer.eos_token_id, tiny_tokenizer.pad_token_id
    responses = {  # text, whether EOS follows it, what the sound grader pays
        "stopped on EOS": (r"\boxed{97}", True, 1.0),
        "ran to the limit": (r"x \boxed{97}", False, 0.0),  # 12 tokens, no EOS: cut off
        "stopped short of the limit": (r"\boxed{97}", False, 1.0),  # a stop string, say
    }
    prompt = tiny_tokenizer("What is 90 + 7?", add_special_tokens=False)["input_ids"]
    info = {"question": "What is 90 + 7?"}  # one dict for every row, as verl repeats a prompt's row n times
    rows = []
    for text, ends, _ in responses.values():
        ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"] + ([eos] if ends else [])
        assert len(ids) <= width
        rows.append(
            (ids + [pad] * (width - len(ids)), [1] * len(prompt) + [1] * len(ids) + [0] * (width - len(ids)))
        )
    data = DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([prompt] * len(rows)),
            "responses": torch.tensor([r for r, _ in rows]),
            "attention_mask": torch.tensor([m for _, m in rows]),
        },
        non_tensors={
            "data_source": np.array(["arith"] * len(rows), dtype=object),
            "reward_model": np.array([{"ground_truth": "97"}] * len(rows), dtype=object),
            "extra_info": np.array([info] * len(rows), dtype=object),
        },
    )
    scores = [
        manager.loop.run_until_complete(manager.run_single(data[i : i + 1]))["reward_score"] for i in range(3)
    ]
    assert scores == [paid for _, _, paid in responses.values()]
    assert info == {"question": "What is 90 + 7?"}
