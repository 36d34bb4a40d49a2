"""pacs_rl.training.vllm_colocate and the vLLM paths of PACSTrainer / the held-out evaluation, without vLLM.

vLLM itself runs in tests/test_vllm_cpu.py (marker `vllm`, its own environment: .ci/vllm.sh); here the pieces are
checked against fakes: the mismatch figure, the engine arguments, the weight sync's calls, the thread count.
"""

from __future__ import annotations

import types
from collections import defaultdict

import pytest
import torch

from pacs_rl.evaluation.runner import EvalConfig
from pacs_rl.training.config import PACSConfig
from pacs_rl.training.heldout import _evaluation_sampling, engine_name
from pacs_rl.training.trainer import PACSTrainer
from pacs_rl.training.vllm_colocate import (
    engine_arguments,
    engine_kwargs_problems,
    logprob_mismatch,
    repack_tied_weights,
    sync_weights_reloading,
    torch_threads_kept,
)


# ---------------------------------------------------------------------------------------------- the mismatch
def test_logprob_mismatch_over_masked_tokens_only():
    trainer = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 9.0]])
    sampler = torch.tensor([[-1.1, -2.0, -2.5], [-0.5, -0.2, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the 9.0 vs 0.0 is padding
    mean, largest = logprob_mismatch(trainer, sampler, mask)
    # |Δ| on the 5 response tokens: 0.1, 0, 0.5, 0, 0.3
    assert mean.item() == pytest.approx(0.9 / 5, abs=1e-6)
    assert largest.item() == pytest.approx(0.5, abs=1e-6)


def test_logprob_mismatch_leaves_out_unscored_tokens_and_empty_masks():
    trainer = torch.tensor([[-1.0, -1.0]])
    sampler = torch.tensor([[float("nan"), -1.25]])  # vLLM could not score the first token
    mean, largest = logprob_mismatch(trainer, sampler, torch.ones(1, 2))
    assert (mean.item(), largest.item()) == pytest.approx((0.25, 0.25))
    mean, largest = logprob_mismatch(trainer, sampler, torch.zeros(1, 2))
    assert (mean.item(), largest.item()) == (0.0, 0.0)


def _fake_trainer(old_logps, sampled, mask):
    """What PACSTrainer._log_sampler_mismatch reads, on one process."""
    return types.SimpleNamespace(
        accelerator=types.SimpleNamespace(gather=lambda t: t.reshape(1)),
        _metrics={"train": defaultdict(list)},
        args=types.SimpleNamespace(per_device_train_batch_size=2),
        model=object(),
        _get_per_token_logps_and_entropies=lambda *a, **k: (old_logps, None, None),
    ), {
        "prompt_ids": torch.ones(2, 1, dtype=torch.long),
        "prompt_mask": torch.ones(2, 1, dtype=torch.long),
        "completion_ids": torch.ones(2, 3, dtype=torch.long),
        "completion_mask": mask,
        "sampling_per_token_logps": sampled,
    }


@pytest.mark.parametrize("from_rollout", [True, False])
def test_trainer_logs_the_mismatch_under_trls_names(from_rollout):
    """The trainer's log-probs: the rollout's old ones when TRL computed them, else a forward (the fake)."""
    old = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    sampled = torch.tensor([[-1.0, -2.5, -3.0], [-1.2, -1.0, -7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    fake, output = _fake_trainer(old, sampled, mask)
    if from_rollout:
        output["old_per_token_logps"] = old
        fake._get_per_token_logps_and_entropies = None  # must not be called
    PACSTrainer._log_sampler_mismatch(fake, output, "train")
    logged = fake._metrics["train"]
    assert logged["sampling/sampling_logp_difference/mean"] == [pytest.approx(0.7 / 5)]
    assert logged["sampling/sampling_logp_difference/max"] == [pytest.approx(0.5)]


def test_trainer_logs_nothing_without_sampler_logprobs():
    fake, output = _fake_trainer(torch.zeros(2, 3), None, torch.ones(2, 3))
    PACSTrainer._log_sampler_mismatch(fake, output, "train")
    assert not fake._metrics["train"]


# ---------------------------------------------------------------------------------------------- engine arguments
def test_engine_kwargs_refusals():
    assert engine_kwargs_problems({}, False, "server") == []
    assert engine_kwargs_problems({"enforce_eager": True}, True, "colocate") == []
    (msg,) = engine_kwargs_problems({"enforce_eager": True}, False, "colocate")
    assert "use_vllm" in msg
    (msg,) = engine_kwargs_problems({"enforce_eager": True}, True, "server")
    assert "trl vllm-serve" in msg
    msgs = engine_kwargs_problems(
        {"gpu_memory_utilization": 0.5, "seed": 1, "dtype": "float32"}, True, "colocate"
    )
    assert len(msgs) == 2
    assert "vllm_gpu_memory_utilization" in msgs[0] and "'seed'" in msgs[1]


def test_config_parses_and_checks_engine_kwargs(tmp_path):
    config = PACSConfig(
        output_dir=str(tmp_path),
        use_vllm=True,
        vllm_engine_kwargs='{"enforce_eager": true, "kv_cache_memory_bytes": 1000}',
        report_to="none",
    )
    assert config.vllm_engine_kwargs == {"enforce_eager": True, "kv_cache_memory_bytes": 1000}
    with pytest.raises(ValueError, match="vllm_max_model_length"):
        PACSConfig(output_dir=str(tmp_path), use_vllm=True, vllm_engine_kwargs={"max_model_len": 512})
    with pytest.raises(ValueError, match="is not a JSON object"):
        PACSConfig(output_dir=str(tmp_path), use_vllm=True, vllm_engine_kwargs="{enforce_eager: true}")
    with pytest.raises(ValueError, match="without use_vllm"):
        PACSConfig(output_dir=str(tmp_path), vllm_engine_kwargs={"enforce_eager": True})


def test_engine_arguments_wrap_trls_constructor_and_restore_it(monkeypatch):
    from trl.generation import vllm_generation

    built = []

    def fake_llm(**kwargs):
        built.append(kwargs)
        return "engine"

    monkeypatch.setattr(vllm_generation, "LLM", fake_llm, raising=False)
    with engine_arguments({"enforce_eager": True}, lambda: torch.float32):
        assert vllm_generation.LLM(model="m", seed=0) == "engine"
    with engine_arguments({"dtype": "bfloat16"}, lambda: torch.float32):
        vllm_generation.LLM(model="m")
    with engine_arguments({}, lambda: None):
        vllm_generation.LLM(model="m")
    assert vllm_generation.LLM is fake_llm
    assert built == [
        {"model": "m", "seed": 0, "enforce_eager": True, "dtype": torch.float32},
        {"model": "m", "dtype": "bfloat16"},  # the user's dtype wins over the default
        {"model": "m"},  # no default (not vLLM's CPU build): vLLM chooses
    ]


def test_engine_arguments_without_vllm_wrap_nothing(monkeypatch):
    from trl.generation import vllm_generation

    monkeypatch.delattr(vllm_generation, "LLM", raising=False)
    with engine_arguments({"enforce_eager": True}, lambda: None):
        assert not hasattr(vllm_generation, "LLM")


def test_torch_threads_kept_across_a_worker_that_drops_them():
    before, setter = torch.get_num_threads(), torch.set_num_threads
    wanted = 2 if before != 2 else 3
    torch.set_num_threads(wanted)
    try:
        with torch_threads_kept():  # what vLLM's CPU worker does in the trainer's process
            torch.set_num_threads(1)
            torch.set_num_threads = lambda n: None
        assert torch.set_num_threads is setter
        assert torch.get_num_threads() == wanted
    finally:
        torch.set_num_threads = setter
        torch.set_num_threads(before)


# ---------------------------------------------------------------------------------------------- weight sync
class _Layer(torch.nn.Module):
    def __init__(self, weight, calls, name):
        super().__init__()
        self.weight = weight
        self.quant_method = types.SimpleNamespace(
            process_weights_after_loading=lambda module: calls.append(name)
        )


def test_repack_tied_weights_reprocesses_the_second_holder_only():
    calls = []
    shared = torch.nn.Parameter(torch.randn(4, 3))
    model = torch.nn.Module()
    model.embed = _Layer(shared, calls, "embed")
    model.proj = _Layer(torch.nn.Parameter(torch.empty(0)), calls, "proj")  # a packed linear: empty weight
    model.other = _Layer(torch.nn.Parameter(torch.empty(0)), calls, "other")  # empty too: not "tied" to proj
    model.head = _Layer(shared, calls, "head")  # tied to embed
    assert repack_tied_weights(model) == ["head"]
    assert calls == ["head"]


def test_sync_weights_reloading_calls():
    calls = []
    params = [("a", torch.ones(1)), ("b", torch.zeros(1))]

    def reload_weights(weights_iterator, is_checkpoint_format):
        calls.append(("reload", list(weights_iterator), is_checkpoint_format))

    runner = types.SimpleNamespace(reload_weights=reload_weights, model=torch.nn.Linear(2, 2))
    llm = types.SimpleNamespace(
        llm_engine=types.SimpleNamespace(
            model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(model_runner=runner))
        ),
        reset_prefix_cache=lambda: calls.append(("reset",)),
    )
    generation = types.SimpleNamespace(llm=llm, _iter_named_params=lambda: iter(params))
    sync_weights_reloading(generation)
    assert calls == [("reload", params, True), ("reset",)]


# ---------------------------------------------------------------------------------------------- held-out
def _engine_trainer(**extra):
    model = torch.nn.Linear(1, 1)
    return types.SimpleNamespace(
        temperature=1.0,
        top_p=0.9,
        max_completion_length=32,
        accelerator=types.SimpleNamespace(unwrap_model=lambda m: m),
        model=model,
        **extra,
    )


def test_evaluation_sampling_without_a_generation_config():
    """TRL builds no generation_config when vLLM generates: the held-out evaluation must not need one."""
    vllm = types.SimpleNamespace(temperature=1.0, top_p=0.9, max_completion_length=32)
    trainer = _engine_trainer(vllm_generation=vllm)
    with _evaluation_sampling(trainer, 0.0, 0.95, 8):
        assert (vllm.temperature, vllm.top_p, vllm.max_completion_length) == (0.0, 1.0, 8)
        assert trainer.temperature == 0.0 and not trainer.model.training
    assert (vllm.temperature, vllm.top_p, vllm.max_completion_length) == (1.0, 0.9, 32)
    assert trainer.model.training and not hasattr(trainer, "generation_config")


def test_engine_name():
    args = types.SimpleNamespace(fast_sampler=True)
    assert (
        engine_name(types.SimpleNamespace(use_vllm=True, vllm_mode="colocate", args=args)) == "vllm-colocate"
    )
    assert engine_name(types.SimpleNamespace(use_vllm=False, args=args)) == "fast-sampler"
    args.fast_sampler = False
    assert engine_name(types.SimpleNamespace(use_vllm=False, args=args)) == "transformers-generate"


# ---------------------------------------------------------------------------------------------- pacs-rl eval
def test_eval_engine_kwargs_checks():
    ok = EvalConfig(model="m", benchmark="b", backend="vllm", vllm_engine_kwargs={"enforce_eager": True})
    assert ok.problems() == []
    wrong_backend = EvalConfig(model="m", benchmark="b", vllm_engine_kwargs={"enforce_eager": True})
    assert any("--backend vllm" in p for p in wrong_backend.problems())
    taken = EvalConfig(model="m", benchmark="b", backend="vllm", vllm_engine_kwargs={"dtype": "float16"})
    assert any("--dtype" in p for p in taken.problems())
