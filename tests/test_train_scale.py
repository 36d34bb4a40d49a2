"""The scale path on one CPU process: the dry run (the paper config on 8 processes), model loading through TRL,
--model tiny, a finished run resumed to a no-op, resume on another number of processes, the periodic
evaluation, the DeepSpeed file check and the GPU check's skip. The multi-process runs are in
tests/test_train_ddp.py (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from pacs_rl.cli import app
from pacs_rl.preflight import missing_packages
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training import cli, engine, run, schema
from pacs_rl.training.checks import deepspeed_problems
from pacs_rl.training.plan import dry_run, model_shape, training_state_bytes
from pacs_rl.training.run import build_config, run_training
from pacs_rl.training.schema import RunSettings
from train_helpers import load_script, resolve

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "configs" / "paper_qwen2.5-7b_8gpu_vllm.yaml"


def _tiny_sets(model: str, **extra) -> list[str]:
    sets = {
        "model": model,
        "max_steps": 2,
        "save_steps": 1,
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "max_completion_length": 6,
        "train_size": 40,
        "eval_size": 4,
        "eval_batch_size": 4,
        "learning_rate": 1e-3,
        "bf16": False,
        **extra,
    }
    return [f"{k}={v}" for k, v in sets.items()]


# ---------------------------------------------------------------------------------------------------- dry run
def test_paper_config_dry_runs_cleanly_on_8_processes(shared_data, monkeypatch, tmp_path):
    """Every check passes; the engine and tracker the config names are refused where they are not installed on a
    machine with CUDA (the one that trains), listed as needed on the training machine on one without."""
    monkeypatch.setenv("PACS_RL_DATA_DIR", str(shared_data))  # math500 held-out set read locally
    args = ["train", "--config", str(PAPER), "--dataset", str(shared_data / "train_deepscaler_subset.jsonl")]
    args += ["--dry-run", "--num-processes", "8", "--output-dir", str(tmp_path / "paper")]
    result = CliRunner().invoke(app, args)
    out = result.output
    # what this environment lacks of what the config names
    missing = missing_packages({"use_vllm": True, "report_to": "wandb", "deepspeed": "zero3.json"})
    if not torch.cuda.is_available():  # a plan for another machine
        assert result.exit_code == 0 and ("needed on the training machine" in out) == bool(missing), out
        missing = []
    assert result.exit_code == (1 if missing else 0), out
    if missing:
        assert f"refused ({len(missing)})" in out and all(f"  - {m}" in out for m in missing), out
    assert "trained weights: all of them (use_lora false)" in out
    assert "sequences per optimizer step: 2048 (256 prompts)" in out
    assert "prompts per rollout batch: 1024 (8192 sequences) = the paper's batch" in out
    assert "optimizer steps per rollout batch: 4" in out
    assert "DeepSpeed ZeRO-3, 8 processes" in out and "weights loaded in bfloat16" in out
    assert "vLLM colocated" in out and "500 problems of math500, T=0.6, top-p 0.95" in out
    assert "every 20 optimizer steps (5 rollout batches), pass@k with 32 samples per problem" in out
    assert "training prompts over 512 tokens after the chat template are dropped" in out
    assert "memory per GPU for 7.62 B parameters" in out and "GiB to spare" in out
    assert ("every check passed" in out) == (not missing) and "batch differs" not in out
    # on CUDA the CPU default's CPU-only settings are off, and the plan says so
    assert "CPU-only settings are off (fast_sampler, old_logprobs_from_sampler, update_token_budget)" in out
    assert "backward in pieces" not in out and "update_token_budget=128" not in out
    assert not (tmp_path / "paper").exists()  # nothing written


def test_dry_run_says_whether_the_update_runs_in_pieces(tmp_path):
    values = schema.default_settings() | {"model": "tiny"}
    lines, refusals = dry_run(values, tmp_path / "x", num_processes=1)
    assert refusals == [] and any("backward in pieces of at most 128 completion tokens" in x for x in lines)
    lines, _ = dry_run(values, tmp_path / "x", num_processes=2)
    assert any("update_token_budget=128 is ignored here" in x for x in lines), lines


def test_dry_run_reports_every_refusal_at_once(tmp_path):
    values = schema.default_settings() | {
        "scale_rewards": "none",  # a GRPOConfig field PACSTrainer ignores
        "eval_size": -1,  # a run key
        "eval_strategy": "steps",  # TRL's evaluate() is not run by the command
        "deepspeed": {"train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 3}},
        "model": "tiny",
    }
    _lines, refusals = dry_run(values, tmp_path / "x", num_processes=2)
    text = "\n".join(refusals)
    for needle in ("scale_rewards=", "eval_size=-1", "eval_strategy=", "train_micro_batch_size_per_gpu=3"):
        assert needle in text, text
    assert not (tmp_path / "x").exists()


def test_dry_run_plan_for_deepspeed_zero3_and_the_memory_estimate(tmp_path):
    values = schema.default_settings() | {
        "model": "tiny",
        "deepspeed": str(REPO / "configs" / "deepspeed" / "zero3.json"),
        "bf16": True,
        "use_cpu": False,
    }
    no_deepspeed = missing_packages({"deepspeed": True})  # refused where DeepSpeed is not installed
    _lines, refusals = dry_run(values, tmp_path / "x", num_processes=4)  # fast_sampler from the CPU layer
    refusals = [r for r in refusals if r not in no_deepspeed]
    assert len(refusals) == 1 and "fast_sampler=True samples with each process's local model" in refusals[0]
    lines, refusals = dry_run({**values, "fast_sampler": False}, tmp_path / "x", num_processes=4)
    # without CUDA here the plan is for another machine: DeepSpeed is listed as needed there, not refused
    assert refusals == (no_deepspeed if torch.cuda.is_available() else [])
    text = "\n".join(lines)
    assert "DeepSpeed ZeRO-3, 4 processes" in text and "weights loaded in bfloat16" in text
    # 16 bytes per parameter, sharded over 4 processes; DDP holds all of them on each
    assert training_state_bytes(1000, 2, "deepspeed", 3, 4, False, 0) == 16 * 1000 / 4
    assert training_state_bytes(1000, 4, "ddp", 0, 4, False, 0) == 16 * 1000
    assert training_state_bytes(1000, 4, "fsdp", 0, 4, False, 0) == 4 * 1000
    # the frozen reference copies the whole policy, which ZeRO-3 shards: refused before any weights load
    frozen = {**values, "fast_sampler": False, "reference": "frozen", "ref_reset_steps": 10}
    _lines, refusals = dry_run(frozen, tmp_path / "x", num_processes=4)
    refusals = [r for r in refusals if r not in no_deepspeed]
    assert len(refusals) == 1 and refusals[0].startswith("reference='frozen' under DeepSpeed ZeRO-3"), (
        refusals
    )


def test_dry_run_refuses_a_folder_with_checkpoints_unless_resumed(tmp_path):
    (tmp_path / "x" / "checkpoint-2").mkdir(parents=True)
    values = schema.default_settings() | {"model": "tiny"}
    _lines, refusals = dry_run(values, tmp_path / "x")
    assert refusals == [
        f"{tmp_path / 'x'} already holds checkpoints: pass --resume to continue it, or another --output-dir"
    ]
    _lines, refusals = dry_run(
        values, tmp_path / "x", resume=True
    )  # no complete checkpoint (no trainer_state.json)
    assert len(refusals) == 1 and refusals[0].startswith("--resume: no complete checkpoint-* folder")


def test_shipped_deepspeed_configs_agree_with_the_paper_settings():
    _settings, cfg = resolve(str(PAPER), {}, [])
    for name in ("zero2.json", "zero3.json"):
        ds = json.loads((REPO / "configs" / "deepspeed" / name).read_text())
        assert deepspeed_problems(ds, cfg, 8) == []
    wrong = {"gradient_accumulation_steps": 4, "bf16": {"enabled": False}}
    problems = deepspeed_problems(wrong, cfg, 8)
    assert len(problems) == 2 and "gradient_accumulation_steps=4" in problems[0]


def parameter_count(model: str):
    """(parameters, where the figure comes from), from the plan's model shape."""
    shape, source = model_shape(model)
    return (shape.params if shape else None), source


def test_parameter_count_without_loading(tiny_model_dir):
    count, source = parameter_count(str(tiny_model_dir))
    from pacs_rl.models import tiny_random_model

    tied = sum(p.numel() for p in tiny_random_model().parameters())
    assert count == tied and "config.json" in source  # the formula, from config.json alone
    assert parameter_count("org/Some-Model-3B") == (
        3_000_000_000,
        "the size in the model's name (approximate)",
    )
    assert parameter_count("some/model")[0] is None


# ---------------------------------------------------------------------------------------------------- loading
def test_load_dtype_follows_the_engine():
    config = build_config({"use_cpu": True}, "unused")
    auto = RunSettings()
    assert engine.load_dtype(auto, config, "single") == "float32"  # the CPU default keeps its fp32 weights
    config.bf16 = True
    assert engine.load_dtype(auto, config, "ddp") == "float32"  # DDP trains the loaded weights: fp32 masters
    assert (
        engine.load_dtype(auto, config, "deepspeed") == "bfloat16"
    )  # DeepSpeed / FSDP keep their own fp32 copy
    assert engine.load_dtype(auto, config, "fsdp") == "bfloat16"
    assert engine.load_dtype(RunSettings(model_dtype="float16"), config, "ddp") == "float16"
    config.model_init_kwargs = {"dtype": "bfloat16"}
    assert engine.load_dtype(auto, config, "single") == "bfloat16"
    kwargs = engine.model_init_kwargs(auto, config, "deepspeed")
    assert kwargs["device_map"] is None and kwargs["dtype"] == "bfloat16"
    assert engine.run_problems(RunSettings(model_dtype="float32"), config)  # two dtypes that disagree


def test_ppo_critic_loads_from_the_policy_name(tiny_model_dir):
    """run_training hands TRL the model's name, so PPO builds its critic from that folder too (transformers 5's
    generic token-classification heads refuse a classifier_dropout argument: it goes on the config)."""
    from pacs_rl.training.ppo import build_critic

    critic = build_critic(str(tiny_model_dir), dtype=torch.float32)
    head = critic.score if hasattr(critic, "score") else critic.classifier
    assert head.out_features == 1 and not bool(head.weight.any())  # a fresh head starts at zero


def test_tiny_cli_run_honours_model_init_kwargs_and_resumes_to_a_no_op(tmp_path, monkeypatch):
    """--model tiny trains through TRL's loading (attn_implementation reaches the model); a resume of the finished
    run says it is complete, exits 0, and trains nothing (no step 3, no new checkpoint or metrics row)."""
    seen = {}
    original = run.PACSTrainer.__init__

    def spy(self, model, *args, **kwargs):
        seen["model"] = model
        original(self, model, *args, **kwargs)
        seen["attn"] = self.model.config._attn_implementation
        seen["dtype"] = next(self.model.parameters()).dtype

    monkeypatch.setattr(run.PACSTrainer, "__init__", spy)
    out = tmp_path / "run"
    sets = _tiny_sets("tiny", model_init_kwargs='{"attn_implementation": "eager"}')
    args = ["train", "--output-dir", str(out), *[a for s in sets for a in ("--set", s)]]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert seen["model"] == str(out / "base_model")  # a name for TRL to load, not a loaded model
    assert seen["attn"] == "eager" and seen["dtype"] == torch.float32
    assert first.output.count("held-out accuracy (4 problems, greedy)") == 1
    # quiet without a terminal: one plain line per step, no bar, no library progress bars
    assert "step 1/2" in first.output and "step 2/2" in first.output and "━" not in first.output
    assert "Writing model shards" not in first.output and "Loading weights" not in first.output
    rows = (out / "metrics.jsonl").read_text()
    again = CliRunner().invoke(app, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    assert "is finished (step 2 of 2): nothing to train" in again.output
    assert (out / "metrics.jsonl").read_text() == rows
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]


def test_a_run_killed_after_its_last_checkpoint_finishes_without_another_step(tmp_path, tiny_model_dir):
    settings, cfg = resolve(None, {}, _tiny_sets(str(tiny_model_dir)))
    out = tmp_path / "run"
    whole = run_training(settings, build_config(cfg, out))
    final = (out / "final" / "model.safetensors").read_bytes()
    for name in ("final", "run_complete.json", "heldout.json"):  # as if killed while writing final/
        path = out / name
        if path.is_dir():
            import shutil

            shutil.rmtree(path)
        else:
            held = json.loads(path.read_text()) if name == "heldout.json" else None
            path.unlink()
            if held:
                path.write_text(json.dumps({"before": held["before"]}))
    resumed = run_training(settings, build_config(cfg, out), resume=True)
    assert resumed.global_step == whole.global_step == 2 and not (out / "checkpoint-3").exists()
    assert (out / "final" / "model.safetensors").read_bytes() == final
    assert resumed.heldout["after"] == whole.heldout["after"]


def test_resume_on_another_number_of_processes_is_refused(tmp_path):
    ckpt = tmp_path / "checkpoint-4"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 4, "max_steps": 8}))
    for rank in (0, 1):
        (ckpt / f"pacs_trainer_state_rank{rank}.pt").write_bytes(b"")
    config = build_config({"use_cpu": True, "max_steps": 8}, tmp_path)
    with pytest.raises(SettingsError, match="written by 2 processes and this run has 1"):
        run.resume_point(tmp_path, True, config, 1)
    assert run.resume_point(tmp_path, True, config, 2) == (str(ckpt), False)


def test_command_fields_in_set_are_refused_and_output_dir_is_a_setting():
    with pytest.raises(SettingsError, match="disable_tqdm in --set: the command shows its own progress bar"):
        cli.merge_settings(cli.user_settings(None, {}, ["disable_tqdm=false"]))
    # TRL's output_dir is the run folder, a layer like any setting: --set beats --output-dir beats the file
    assert (
        cli.merge_settings(cli.user_settings(None, {"output_dir": "a"}, ["output_dir=b"]))["output_dir"]
        == "b"
    )
    assert cli.merge_settings(cli.user_settings(None, {"output_dir": "a"}, []))["output_dir"] == "a"


# ---------------------------------------------------------------------------------------------------- periodic eval
def test_periodic_evaluation_logs_pass_at_k(tmp_path, tiny_model_dir):
    extra = {"eval_steps": 1, "num_generations_eval": 2, "eval_temperature": 1.0}
    settings, cfg = resolve(None, {}, _tiny_sets(str(tiny_model_dir), **extra))
    out = tmp_path / "run"
    run_training(settings, build_config(cfg, out))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "eval/pass@1" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert 0.0 <= r["eval/pass@1"] <= r["eval/pass@2"] <= 1.0 and r["eval/mean_length"] > 0
    greedy = engine.run_problems(
        RunSettings(eval_temperature=0.0), build_config({**cfg, "use_cpu": True}, out)
    )
    assert any("identical answers" in p for p in greedy)


def test_engine_evaluation_grades_each_problem(tmp_path, tiny_model, tiny_tokenizer):
    """One process through the trainer's own generation: every sample graded, counts in problem order."""
    from datasets import Dataset

    from pacs_rl.data import Problem
    from pacs_rl.training import PACSConfig, PACSTrainer
    from pacs_rl.training.heldout import sample_and_grade

    args = PACSConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], per_device_train_batch_size=4,
                      num_generations=2, max_completion_length=4)  # fmt: skip
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": "1"}], "answer": "1"}] * 4)
    trainer = PACSTrainer(tiny_model, lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=ds, processing_class=tiny_tokenizer)  # fmt: skip
    problems = [Problem(id=str(i), problem=f"{i} + 1", answer=str(i)) for i in range(5)]

    def second_is_right(completions, answer, **kw):  # problem 1's samples are all right, the rest wrong
        return [1.0 if a == "1" else 0.0 for a in answer]

    state = torch.get_rng_state()
    correct, lengths = sample_and_grade(
        trainer, problems, 3, 1.0, 1.0, 4, second_is_right, batch_size=2, seed=0
    )
    assert correct == [0, 3, 0, 0, 0] and len(lengths) == 5 and all(0 < x <= 4 for x in lengths)
    assert torch.equal(torch.get_rng_state(), state)  # the training run's random stream is untouched
    assert trainer.temperature == 1.0 and trainer.max_completion_length == 4  # sampling settings restored

    # as process 1 of 2: problems 3 and 4, then one padding batch that keeps the collectives in step
    trainer.accelerator = _SecondOfTwo(trainer.accelerator)
    calls = []
    generate = trainer._generate_single_turn
    trainer._generate_single_turn = lambda prompts, *a: calls.append(len(prompts)) or generate(prompts, *a)
    correct, _ = sample_and_grade(trainer, problems, 3, 1.0, 1.0, 4, second_is_right, batch_size=2, seed=0)
    assert correct == [0, 0] and calls == [2 * 3, 1 * 3]  # rank 0 generates 2 + 1 rows as well


def test_greedy_engine_evaluation_through_the_fast_sampler_that_keeps_old_logprobs(
    tmp_path, tiny_model, tiny_tokenizer
):
    """The CPU default's engine (fast sampler returning the rollout's old log-probs) evaluates greedily: no
    log-probs are asked for at temperature 0, and the next rollout still gets its own."""
    from datasets import Dataset

    from pacs_rl.data import Problem
    from pacs_rl.training import PACSConfig, PACSTrainer
    from pacs_rl.training.heldout import engine_accuracy

    args = PACSConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], bf16=False, per_device_train_batch_size=4,
                      num_generations=2, max_completion_length=4, fast_sampler=True,
                      old_logprobs_from_sampler=True)  # fmt: skip
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": "1"}], "answer": "1"}] * 4)
    trainer = PACSTrainer(tiny_model.float(), lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=ds, processing_class=tiny_tokenizer)  # fmt: skip
    problems = [Problem(id=str(i), problem=f"{i} + 1", answer=str(i)) for i in range(3)]
    result = engine_accuracy(trainer, problems, 0.0, 1.0, 4, lambda c, answer, **kw: [1.0] * len(c), 2, 0)
    assert result["n"] == 3 and result["correct"] == 3
    assert trainer.fast_sampler.old_logps is None  # greedy: nothing kept for a rollout to take
    # a rollout at the training temperature keeps them
    trainer._generate_single_turn([[1, 2], [1, 2]], None, {}, 2)
    completions, logps, entropies = trainer.fast_sampler.old_logps
    assert len(completions) == 2 and all(len(lp) == len(c) for lp, c in zip(logps, completions, strict=True))
    assert [len(h) for h in entropies] == [len(c) for c in completions]


class _SecondOfTwo:
    """The trainer's accelerator, seen as process 1 of 2 (gather_object returns the local list in one process)."""

    num_processes, process_index = 2, 1

    def __init__(self, accelerator):
        self._accelerator = accelerator

    def __getattr__(self, name):
        return getattr(self._accelerator, name)


# ---------------------------------------------------------------------------------------------------- GPU check
def _gpu_check_module():
    return load_script("benchmarks/gpu_check.py")


def test_gpu_check_skips_without_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA present: the GPU check runs for real")
    record = tmp_path / "gpu_check.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--json", str(record)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("SKIP: no CUDA device")
    written = json.loads(record.read_text())
    gpu_check = _gpu_check_module()
    assert written["cuda_devices"] == 0 and written["checks"] == []
    every = gpu_check.CORE_CHECKS + gpu_check.PAIRED_CHECKS + gpu_check.VLLM_CHECKS + gpu_check.DDP_CHECKS
    assert [c["check"] for c in written["skipped"]] == every
    assert {c["why"] for c in written["skipped"]} == {"no CUDA device"}
    from importlib.metadata import version

    assert written["packages"]["trl"] == version("trl") and written["python"] == sys.version.split()[0]


def test_the_recorded_gpu_check_passed_what_the_docs_say_it_passed():
    """docs/benchmarks/gpu_check.json is the one run on a GPU; SCALING.md quotes its memory ratios."""
    record = json.loads((REPO / "docs" / "benchmarks" / "gpu_check.json").read_text())
    gpu_check = _gpu_check_module()
    assert record["cuda_devices"] >= 1 and all(c["ok"] for c in record["checks"])
    names = [c["check"] for c in record["checks"]]
    assert names[: len(gpu_check.CORE_CHECKS)] == gpu_check.CORE_CHECKS
    assert set(names) <= {*gpu_check.CORE_CHECKS, *gpu_check.PAIRED_CHECKS}
    scaling = (REPO / "docs" / "SCALING.md").read_text()
    for measured in record["memory"]:
        assert abs(measured["ratio"] - 1) <= gpu_check.MEMORY_TOLERANCE
        assert f"{measured['ratio']:.3f}" in scaling, measured


def test_gpu_check_records_the_groups_only_leaves_out_as_skipped():
    gpu_check = _gpu_check_module()
    run, skipped = gpu_check.plan(1, None, "ModuleNotFoundError: No module named 'vllm'", True)
    run, skipped = gpu_check.only(run, skipped, {"paired"}, "paired")
    assert run == gpu_check.PAIRED_CHECKS
    every = gpu_check.CORE_CHECKS + gpu_check.PAIRED_CHECKS + gpu_check.VLLM_CHECKS + gpu_check.DDP_CHECKS
    assert sorted(c["check"] for c in skipped) == sorted(c for c in every if c not in run)
    assert {c["why"] for c in skipped if c["check"] in gpu_check.CORE_CHECKS} == {"not in --only paired"}


def test_gpu_check_plans_vllm_and_ddp_by_what_the_machine_has():
    gpu_check = _gpu_check_module()
    core, vllm, ddp = (
        gpu_check.CORE_CHECKS + gpu_check.PAIRED_CHECKS,
        gpu_check.VLLM_CHECKS,
        gpu_check.DDP_CHECKS,
    )
    run, skipped = gpu_check.plan(1, "0.11.0", "", True)
    assert run == core + vllm
    assert skipped == [{"check": ddp[0], "why": "1 CUDA device, DDP needs 2"}]
    run, skipped = gpu_check.plan(2, None, "ModuleNotFoundError: No module named 'vllm'", True)
    assert run == core + ddp
    assert [s["check"] for s in skipped] == vllm
    assert all("No module named 'vllm'" in s["why"] for s in skipped)
    run, skipped = gpu_check.plan(8, "0.11.0", "", False)
    assert run == core + ddp and all("bundled model" in s["why"] for s in skipped)
