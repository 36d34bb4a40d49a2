"""DeepSpeed ZeRO-3 on 2 CPU processes (slow; skipped without deepspeed): the frozen reference refused, the held-out
evaluation gathered across the processes, and a `pacs-rl train` job killed with SIGKILL and resumed, ending
bit-identical to a run never interrupted.

DeepSpeed runs on a machine without an accelerator through its CPU accelerator (`DS_ACCELERATOR=cpu`), whose
communication falls back to torch's gloo when Intel's oneCCL bindings are absent: `pip install deepspeed` is all it
needs (its first start compiles a small shared-memory op with the system's C++ compiler, once per machine). The
test launches this file as the per-process script of its own checks (`__main__` is the child).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pacs_rl.settings.errors import SettingsError
from pacs_rl.training.engine import zero_stage
from pacs_rl.training.run import _consolidated_weights, end_processes
from train_helpers import child_output, gloo_threads, kill_when

REPO = Path(__file__).resolve().parents[1]
ZERO3 = str(REPO / "configs" / "deepspeed" / "zero3.json")
ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "OMP_NUM_THREADS": "1",
    "DS_ACCELERATOR": "cpu",  # DeepSpeed's CPU accelerator, also where a GPU is present
}
TINY = [
    "--model", "tiny", "--set", "save_steps=1", "--set", "per_device_train_batch_size=4", "--set", "num_generations=2",
    "--set", "max_completion_length=6", "--set", "train_size=40", "--set", "eval_batch_size=2", "--set", "bf16=false",
    "--set", "fast_sampler=false", "--eval-size", "5",
    "--set", "dynamic_sampling=false",  # what these check is ZeRO-3 (dynamic sampling under it is not tested)
]  # fmt: skip
FROZEN_REFUSAL = "reference='frozen' under DeepSpeed ZeRO-3"
needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None, reason="deepspeed not installed (pip install deepspeed)"
)


def _accelerate(*how: str) -> list[str]:
    """`accelerate launch` on 2 processes; ``how``: --multi_gpu (with the `deepspeed` setting) or accelerate's own
    DeepSpeed options."""
    launcher = Path(sys.executable).parent / "accelerate"
    if not launcher.exists():
        pytest.skip("accelerate launcher not installed")
    return [str(launcher), "launch", *how, "--num_processes", "2", "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no"]  # fmt: skip


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=900)


# ---------------------------------------------------------------------------------------------------- fast
def test_zero_stage_read_from_accelerates_config_file(tmp_path, monkeypatch):
    """`accelerate launch --use_deepspeed --deepspeed_config_file F` sets no stage variable: the stage is F's."""
    from pacs_rl.training import PACSConfig

    config = PACSConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", raising=False)
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", raising=False)
    assert zero_stage(config) == 0
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", ZERO3)
    assert zero_stage(config) == 3


def test_a_finished_zero3_run_needs_whole_weights_in_its_last_checkpoint(tmp_path):
    (tmp_path / "global_step4").mkdir()  # ZeRO-3 shards only: stage3_gather_16bit_weights_on_model_save false
    with pytest.raises(SettingsError, match=r"holds only DeepSpeed ZeRO-3 shards.*zero_to_fp32\.py"):
        _consolidated_weights(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert _consolidated_weights(str(tmp_path)) == str(tmp_path)


# ---------------------------------------------------------------------------------------------------- slow
@needs_deepspeed
@pytest.mark.slow
def test_frozen_reference_is_refused_under_zero3(tmp_path):
    """Before any weights load, from the `deepspeed` setting and from accelerate's config-file option; and by the
    trainer itself, from the DeepSpeed plugin accelerate set up (a script that builds PACSTrainer directly)."""
    for name, how, extra in [
        ("setting", ["--multi_gpu"], ["--set", f"deepspeed={ZERO3}"]),
        ("launcher", ["--use_deepspeed", "--deepspeed_config_file", ZERO3], []),
    ]:
        out = tmp_path / name
        cmd = [*_accelerate(*how), "-m", "pacs_rl.cli", "train", "--output-dir", str(out), *TINY, *extra]
        result = _run([*cmd, "--max-steps", "1", "--set", "reference=frozen"])
        assert result.returncode != 0, name
        assert FROZEN_REFUSAL in result.stdout + result.stderr, f"{name}: {child_output(result)}"
        assert not (out / "base_model").exists(), name  # refused before the model was written or loaded
    child = [*_accelerate("--use_deepspeed", "--zero_stage", "3"), __file__, str(tmp_path), "frozen"]
    result = _run(child)
    assert result.returncode == 0, child_output(result)
    for rank in (0, 1):
        error = json.loads((tmp_path / f"frozen-rank{rank}.json").read_text())
        assert error["type"] == "ValueError" and FROZEN_REFUSAL in error["message"]


@needs_deepspeed
@pytest.mark.slow
def test_heldout_evaluation_under_zero3_gathers_what_ddp_gets(tmp_path):
    """5 held-out problems on 2 processes (3 + 2 and a padding row), 2 samples each at temperature 1, through
    transformers' generate with the ZeRO-3 gather, at the start of training as `pacs-rl train` evaluates: the same
    correct count and length per problem, in problem order, on both processes, as 2 DDP processes (whole weights on
    each) get. Each process samples from its own seed (seed + rank), so the comparison is with 2 processes, not one;
    greedy would not do: the tiny model repeats its last prompt token. The reward reads each completion's text, so a
    completion paired with another problem, lost, or counted twice (the padding row) shows."""
    for how in (["--use_deepspeed", "--zero_stage", "3"], ["--multi_gpu"]):
        result = _run([*_accelerate(*how), __file__, str(tmp_path), "eval"])
        assert result.returncode == 0, f"{how}: {child_output(result)}"
        # the groups were freed before the interpreter ended: no gloo thread outlived them
        for rank in (0, 1):
            left = json.loads((tmp_path / f"threads-eval-rank{rank}.json").read_text())
            assert left == [], f"{how}: rank {rank} ended with gloo threads running: {left}"
    zero3 = [json.loads((tmp_path / f"eval-DEEPSPEED-rank{r}.json").read_text()) for r in (0, 1)]
    ddp = [json.loads((tmp_path / f"eval-MULTI_CPU-rank{r}.json").read_text()) for r in (0, 1)]
    assert all(z["zero_stage"] == 3 for z in zero3) and all(d["zero_stage"] is None for d in ddp)
    correct, lengths = ddp[0]["correct"], ddp[0]["lengths"]
    assert len(correct) == 5 and 0 < sum(correct) < 10  # both outcomes occur: the comparison can fail
    for got in [*zero3, ddp[1]]:  # gathered on every process
        assert got["correct"] == correct and got["lengths"] == lengths


def _final_weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run / "final" / "model.safetensors"))


@needs_deepspeed
@pytest.mark.slow
def test_zero3_run_killed_with_sigkill_and_resumed_ends_bit_identical(tmp_path):
    """`--set deepspeed=configs/deepspeed/zero3.json` on 2 processes, 4 steps, a checkpoint per step. Each process
    saves its ZeRO-3 partition of the weights and Adam moments (DeepSpeed), its rollout batch and its random state:
    killed inside step 2, the resumed run ends with the uninterrupted run's weights, bit for bit, and the same
    held-out result. Killed after its last checkpoint (final/ not written), the run finishes from that checkpoint's
    whole weights without another step. The reward (a completion's length is odd) gives both labels, so the
    weights move."""
    reward = tmp_path / "odd_length.py"
    reward.write_text(
        "def odd_length(completions, **kw):\n"
        "    return [float(len(c[0]['content']) % 2) for c in completions]\n"
    )
    train = [
        *_accelerate("--multi_gpu"), "-m", "pacs_rl.cli", "train", *TINY, "--max-steps", "4",
        "--set", f"deepspeed={ZERO3}", "--set", f"reward_funcs={reward}:odd_length", "--set", "learning_rate=0.01",
    ]  # fmt: skip
    whole = tmp_path / "whole"
    first = _run([*train, "--output-dir", str(whole)])
    assert first.returncode == 0, child_output(first)
    text = first.stdout + first.stderr
    assert text.count("held-out accuracy (5 problems, greedy): before") == 1
    assert json.loads((whole / "heldout.json").read_text())["before"]["n"] == 5
    ckpt = whole / "checkpoint-4"
    assert (ckpt / "model.safetensors").is_file()  # whole weights, gathered at each save (zero3.json)
    assert sorted(p.name for p in ckpt.glob("global_step4/*model_states.pt")) == [
        "zero_pp_rank_0_mp_rank_00_model_states.pt",
        "zero_pp_rank_1_mp_rank_00_model_states.pt",
    ]
    want = _final_weights(whole)
    base = json.loads((whole / "metrics.jsonl").read_text().splitlines()[0])
    assert base["grad_norm"] > 0  # the weights moved: equal weights below are not the untrained ones
    moments = {
        # checkpoint-1 is complete, the run is inside step 2 (its rollout buffered in checkpoint-1)
        "mid-step": lambda run: (run / "checkpoint-1" / "trainer_state.json").is_file(),
        # every step is saved, final/ is being written
        "final": lambda run: (run / "final").is_dir(),
    }
    for name, ready in moments.items():
        run = tmp_path / name
        kill_when([*train, "--output-dir", str(run)], lambda run=run, ready=ready: ready(run), ENV)
        assert not (run / "run_complete.json").exists(), name
        if name == "final":
            shutil.rmtree(run / "final")  # however far it got: the resumed run writes it from checkpoint-4
        resumed = _run([*train, "--output-dir", str(run), "--resume"])
        assert resumed.returncode == 0, f"{name}: {child_output(resumed)}"
        got = _final_weights(run)
        assert got.keys() == want.keys(), name
        assert all(torch.equal(got[k], want[k]) for k in want), name
        assert (
            json.loads((run / "heldout.json").read_text())["after"]
            == json.loads((whole / "heldout.json").read_text())["after"]
        ), name


# ---------------------------------------------------------------------------------------------------- child
def _child(out: str, mode: str) -> None:
    """One process of the checks above: ``frozen`` builds PACSTrainer with reference='frozen' and records the
    error; ``eval`` grades 5 held-out problems at the start of training (one step) and records the result under the
    engine's name (DEEPSPEED, MULTI_CPU)."""
    from accelerate import PartialState
    from datasets import Dataset

    from pacs_rl.data import arithmetic_problems
    from pacs_rl.models import tiny_model_folder, tiny_tokenizer
    from pacs_rl.training import PACSConfig, PACSTrainer
    from pacs_rl.training.heldout import sample_and_grade

    # the config first: it sets up accelerate's state for the CPU (a PartialState made before it, without cpu=True,
    # sees no distributed backend on a machine without CUDA, and every process takes itself for the main one)
    args = PACSConfig(
        output_dir=str(Path(out, mode)), use_cpu=True, report_to=[], per_device_train_batch_size=4,
        num_generations=2, max_completion_length=6, max_steps=1, save_strategy="no", fast_sampler=False,
        reference="frozen" if mode == "frozen" else "old", disable_tqdm=True, seed=0,
    )  # fmt: skip
    state = PartialState()
    with state.main_process_first():  # the first process writes the tiny model, whole (renamed into place)
        model = tiny_model_folder(Path(out, "model"))
    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"{i} + {i}"}], "answer": str(2 * i)} for i in range(16)]
    )

    def odd_length(completions, **kw):
        return [float(len(c[0]["content"]) % 2) for c in completions]

    def odd_sum(completions, **kw):  # depends on each completion's text only
        return [float(sum(map(ord, c[0]["content"])) % 2) for c in completions]

    record = Path(out, f"{mode}-rank{state.process_index}.json")
    if mode == "frozen":
        try:
            PACSTrainer(
                str(model), odd_length, args=args, train_dataset=data, processing_class=tiny_tokenizer()
            )
        except ValueError as e:
            record.write_text(json.dumps({"type": "ValueError", "message": str(e)}))
        else:
            record.write_text(json.dumps({"type": None, "message": ""}))
        return

    from transformers import TrainerCallback

    trainer = PACSTrainer(
        str(model), odd_length, args=args, train_dataset=data, processing_class=tiny_tokenizer()
    )
    problems = arithmetic_problems(5, seed=0, split="test")

    class AtTrainBegin(TrainerCallback):  # where `pacs-rl train` evaluates "before": the engine is built
        def on_train_begin(self, *a, **kw):
            correct, lengths = sample_and_grade(trainer, problems, 2, 1.0, 1.0, 16, odd_sum, 2, seed=0)
            engine = trainer.accelerator.distributed_type.value
            Path(out, f"eval-{engine}-rank{state.process_index}.json").write_text(
                json.dumps({"correct": correct, "lengths": lengths, "zero_stage": trainer._sharding()[0]})
            )

    trainer.add_callback(AtTrainBegin())
    trainer.train()


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
    end_processes()  # free the process groups before the interpreter ends (a gloo thread left running can abort)
    left = Path(sys.argv[1], f"threads-{sys.argv[2]}-rank{os.environ['RANK']}.json")
    left.write_text(json.dumps(gloo_threads()))
    sys.exit(0)
