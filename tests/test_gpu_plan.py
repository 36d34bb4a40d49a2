"""The GPU path on first contact: the device and precision `pacs-rl train` picks (CUDA faked present or absent),
the memory plan of the dry run (model size from config.json, vLLM's share, activations, the refusal of a plan
over the GPU), the batch on another number of processes, the paper's evaluation protocol and prompt filter."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from pacs_rl import device as device_module
from pacs_rl.cli import app
from pacs_rl.device import CPU_BF16, CPU_ONLY, CudaInfo, choose_device
from pacs_rl.models import model_problem
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training import cli, heldout, memory, run, schema
from pacs_rl.training.config import PACSConfig
from pacs_rl.training.data import filter_prompts, load_run_data, prompt_lengths
from pacs_rl.training.plan import dry_run, model_shape
from train_helpers import resolve

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "configs" / "paper_qwen2.5-7b_8gpu_vllm.yaml"
H100 = CudaInfo(True, bf16=True, name="NVIDIA H100 80GB HBM3", memory_gib=79.2, count=8, torch_cuda="12.8")
T4 = CudaInfo(True, bf16=False, name="Tesla T4", memory_gib=14.6, count=1, torch_cuda="12.8")
NO_CUDA = CudaInfo(False, torch_cuda=None)


class _Props:
    name, total_memory = "Faked GPU", 80 * 1024**3


def _fake_cuda(monkeypatch, present: bool, bf16: bool = True, cpu_bf16: bool = False) -> None:
    """torch.cuda as a machine with (or without) one GPU would answer, nothing else of CUDA is used; and whether
    its CPU computes bf16 natively (default: not, whatever this host's CPU does)."""
    monkeypatch.setattr(device_module, "cpu_bf16_native", lambda: cpu_bf16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: present)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: _Props())
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(present))
    monkeypatch.setattr("pacs_rl.evaluation.runner.no_cuda_here", lambda: not present)  # asked before torch


# ---------------------------------------------------------------------------------------------------- device
def test_the_device_follows_the_hardware_unless_the_user_says_otherwise():
    cpu = choose_device({}, NO_CUDA, cpu_bf16=False)
    assert (cpu.device, cpu.bf16, cpu.settings) == ("cpu", False, {}) and "no CUDA device" in cpu.why
    assert "this CPU has no bf16 instructions" in cpu.line()
    gpu = choose_device({}, H100)
    assert gpu.device == "cuda" and gpu.bf16
    assert gpu.settings == {"use_cpu": False, "bf16": True, **CPU_ONLY}
    assert "a CUDA device is present (NVIDIA H100 80GB HBM3" in gpu.line() and "bf16 autocast" in gpu.line()
    old = choose_device({}, T4)  # no bf16 before Ampere: fp32
    assert old.device == "cuda" and old.settings["bf16"] is False and "fp32" in old.line()
    # the user's use_cpu and bf16 always win; so do the CPU-only settings they set themselves
    assert choose_device({"use_cpu": True}, H100).device == "cpu"
    assert choose_device({"use_cpu": "true"}, H100, cpu_bf16=False).settings == {}  # text from a command line
    mine = choose_device({"bf16": False, "fast_sampler": True}, H100)
    assert mine.device == "cuda" and not mine.bf16 and "bf16" not in mine.settings
    assert "fast_sampler" not in mine.settings and "fast_sampler" not in mine.turned_off
    assert choose_device({"fp16": True}, H100).settings["bf16"] is False
    # a GPU config planned on a machine without one: CUDA, bf16 assumed
    planned = choose_device({"use_cpu": False}, NO_CUDA)
    assert planned.device == "cuda" and planned.bf16 and "no CUDA device here" in planned.why


def test_a_bf16_cpu_stays_fp32_until_bf16_learns_as_well_and_says_why():
    """bf16 has not passed the paired check: a CPU that computes bf16 trains in fp32 unless told,
    and says why; `bf16: true` brings the CPU's bf16 settings (the user's own values win)."""
    assert device_module.CPU_BF16_DEFAULT is False
    cpu = choose_device({}, NO_CUDA, cpu_bf16=True)
    assert (cpu.device, cpu.bf16, cpu.settings) == ("cpu", False, {})
    assert (
        "this CPU computes bf16" in cpu.line() and "cpu_bf16.md" in cpu.line() and "bf16: true" in cpu.line()
    )
    asked = choose_device({"bf16": True}, NO_CUDA, cpu_bf16=True)
    assert asked.bf16 and asked.settings == CPU_BF16 and "bf16: true in your settings" in asked.line()
    assert (
        asked.settings["old_logprobs_from_sampler"] is False
    )  # the bf16 sampler's log-probs are not the update's
    kept = choose_device({"bf16": "true", "fast_sampler_dtype": None}, NO_CUDA, cpu_bf16=True)
    assert kept.bf16 and "fast_sampler_dtype" not in kept.settings  # the user's own value stays
    emulated = choose_device(
        {"bf16": True}, NO_CUDA, cpu_bf16=False
    )  # asked where bf16 is emulated: still theirs
    assert emulated.bf16 and emulated.settings == CPU_BF16
    for user in ({"bf16": False}, {"bf16": "false"}, {"fp16": True}):
        mine = choose_device(user, NO_CUDA, cpu_bf16=True)
        assert (mine.bf16, mine.settings) == (False, {}), user
        assert "in your settings" in mine.line()


def test_with_bf16_as_the_default_a_bf16_cpu_trains_in_bf16(monkeypatch, tmp_path):
    """The switch the record waits for: the hardware's choice, the dry run and `pacs-rl info` on a bf16 CPU."""
    monkeypatch.setattr(device_module, "CPU_BF16_DEFAULT", True)
    cpu = choose_device({}, NO_CUDA, cpu_bf16=True)
    assert (cpu.device, cpu.bf16, cpu.settings) == ("cpu", True, {"bf16": True, **CPU_BF16})
    assert "CPU, bf16 autocast: no CUDA device" in cpu.line() and "set bf16: false for fp32" in cpu.line()
    assert choose_device({"use_cpu": True}, H100, cpu_bf16=True).bf16  # the CPU asked for beside a GPU
    assert not choose_device({}, NO_CUDA, cpu_bf16=False).bf16  # emulated bf16: fp32 still
    _fake_cuda(monkeypatch, present=False, cpu_bf16=True)
    values, device = device_module.with_device(cli.user_settings(None, {}, []), schema.default_settings())
    assert device.bf16 and values == schema.default_settings() | {"bf16": True, **CPU_BF16}
    assert (
        device_module.with_device(cli.user_settings(None, {}, ["bf16=false"]), schema.default_settings())[0][
            "bf16"
        ]
        is False
    )
    out = CliRunner().invoke(app, ["train", "--dry-run", "-o", str(tmp_path / "x")])
    assert out.exit_code == 0, out.output
    assert "device: CPU, bf16 autocast: no CUDA device on this machine" in out.output
    assert "pacs-rl train runs on: CPU, bf16 autocast" in CliRunner().invoke(app, ["info"]).output


def test_the_cpu_only_settings_go_back_to_the_config_defaults_on_cuda():
    defaults = {f.name: f.default for f in dataclasses.fields(PACSConfig)}
    for key, value in CPU_ONLY.items():
        assert defaults[key] == value, key
        assert schema.CPU_DEFAULTS[key] != value, f"{key}: the CPU default does not change it"


def test_a_plain_train_on_a_cpu_machine_is_exactly_the_cpu_default(monkeypatch):
    _fake_cuda(monkeypatch, present=False)
    assert cli.merge_settings(cli.user_settings(None, {}, [])) == schema.default_settings()
    options = {"model": "Qwen/Qwen2.5-0.5B-Instruct", "dataset": "x.jsonl", "max_steps": None}
    values, device = device_module.with_device(
        cli.user_settings(None, options, []), schema.default_settings()
    )
    assert values == schema.default_settings() | {"model": options["model"], "dataset": "x.jsonl"}
    assert device.device == "cpu"


def test_a_plain_train_chooses_cuda_when_it_is_there(monkeypatch, tmp_path):
    _fake_cuda(monkeypatch, present=True, bf16=True)
    values, device = device_module.with_device(
        cli.user_settings(None, {"model": "tiny", "dataset": "arithmetic"}, []), schema.default_settings()
    )
    assert device.device == "cuda"
    assert values["use_cpu"] is False and values["bf16"] is True
    assert values["fast_sampler"] is False and values["update_token_budget"] is None
    # every other setting is the CPU default's
    changed = {k for k in values if values[k] != schema.default_settings().get(k)}
    assert changed == {"use_cpu", "bf16", "model", *CPU_ONLY}
    # an explicit use_cpu: true keeps the CPU default, as it is
    assert cli.merge_settings(cli.user_settings(None, {}, ["use_cpu=true"])) == schema.default_settings()
    # the dry run says where and why
    out = CliRunner().invoke(app, ["train", "--model", "tiny", "--dry-run", "-o", str(tmp_path / "x")])
    assert out.exit_code == 0, out.output
    assert "device: CUDA, bf16 autocast: a CUDA device is present (Faked GPU, 80.0 GiB)" in out.output
    assert "memory per GPU for" in out.output and "of 80.0 GiB: fits" in out.output  # this GPU's memory


def test_info_says_which_device_train_uses(monkeypatch):
    _fake_cuda(monkeypatch, present=False)
    out = CliRunner().invoke(app, ["info"]).output
    assert "pacs-rl train runs on: CPU, fp32: no CUDA device on this machine" in out
    assert "this CPU has no bf16 instructions" in out
    _fake_cuda(monkeypatch, present=True, bf16=False)
    out = CliRunner().invoke(app, ["info"]).output
    assert "CUDA: Faked GPU, 80.0 GiB" in out
    assert "pacs-rl train runs on: CUDA, fp32: a CUDA device is present" in out and "no bf16" in out


def test_eval_dtype_auto_follows_the_same_rule(monkeypatch):
    from pacs_rl.evaluation.runner import EvalConfig

    config = EvalConfig(model="tiny", benchmark="math500")
    for present, bf16, want in [
        (False, False, "float32"),
        (True, True, "bfloat16"),
        (True, False, "float32"),
    ]:
        _fake_cuda(monkeypatch, present, bf16)
        assert config.resolved_dtype() == want, (present, bf16)


# ---------------------------------------------------------------------------------------------------- model size
FAMILY_CONFIGS = [
    {"model_type": "qwen2", "num_key_value_heads": 2, "tie_word_embeddings": True},
    {"model_type": "qwen2", "num_key_value_heads": 2},
    {"model_type": "llama", "num_key_value_heads": 1, "attention_bias": True, "mlp_bias": True},
    {"model_type": "llama", "head_dim": 32},
    {"model_type": "mistral", "num_key_value_heads": 2},
    {"model_type": "qwen3", "num_key_value_heads": 2, "head_dim": 24},
]


@pytest.mark.parametrize("extra", FAMILY_CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_parameter_count_from_config_json_is_the_models(extra):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4}
    cfg |= {"vocab_size": 300, **extra}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
    assert memory.shape_from_config(cfg).params == sum(p.numel() for p in model.parameters())


def test_qwen2_5_7b_reads_7_62_b_parameters_from_its_config():
    from transformers import AutoConfig, AutoModelForCausalLM

    published = memory.PUBLISHED_CONFIGS["Qwen/Qwen2.5-7B"]
    with torch.device("meta"):  # the real architecture, without memory
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**published))
    shape, source = model_shape("Qwen/Qwen2.5-7B")
    assert shape.params == sum(p.numel() for p in model.parameters())
    assert round(shape.params / 1e9, 2) == 7.62 and "published config.json" in source


def test_a_local_config_json_wins_and_unknown_architectures_fall_back(tmp_path):
    folder = tmp_path / "Qwen2.5-7B"
    folder.mkdir()
    small = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2}
    small |= {"num_attention_heads": 4, "vocab_size": 300}
    (folder / "config.json").write_text(json.dumps(small))
    shape, source = model_shape(str(folder))
    assert shape.params == memory.shape_from_config(small).params and str(folder) in source
    (folder / "config.json").write_text(json.dumps({**small, "model_type": "some_moe"}))
    shape, source = model_shape(str(folder))  # no formula, no weights: the size in the name
    assert shape.params == 7_000_000_000 and not shape.has_dims and "name" in source


# ---------------------------------------------------------------------------------------------------- memory plan
def engines_installed(monkeypatch) -> None:
    """Plan as where the configs' engines are installed (vLLM, DeepSpeed, wandb): on a machine with CUDA their
    absence is refused by its own check (tests/test_train_scale.py), which would hide the memory plan's verdict."""
    monkeypatch.setattr("pacs_rl.training.plan.missing_requirements", lambda values: ([], []))


def _paper(shared_data, monkeypatch, *extra: str, processes: int = 8) -> tuple[int, str]:
    monkeypatch.setenv("PACS_RL_DATA_DIR", str(shared_data))
    engines_installed(monkeypatch)
    args = ["train", "--config", str(PAPER), "--dataset", str(shared_data / "train_deepscaler_subset.jsonl")]
    args += ["--dry-run", "--num-processes", str(processes), "--output-dir", "unused", *extra]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


def test_the_paper_config_fits_8_gpus_of_80_gb_and_ddp_is_refused(shared_data, monkeypatch):
    _fake_cuda(monkeypatch, present=False)  # planned on a laptop: 79 GiB GPUs unless told
    code, out = _paper(shared_data, monkeypatch)
    assert code == 0, out
    assert "7.62 B parameters (Qwen/Qwen2.5-7B's published config.json)" in out
    assert "14.2 training state + 31.6 vLLM (0.4 of the GPU)" in out and "of 79.0 GiB: fits" in out
    code, out = _paper(shared_data, monkeypatch, "--set", "deepspeed=null")
    assert code == 1, out
    assert "DDP, 8 processes" in out and "113.5 training state" in out
    refusal = out.split("refused (1):")[1]
    assert (
        "more than the GPU's 79.0 GiB" in refusal
        and "--set deepspeed=configs/deepspeed/zero3.json" in refusal
    )


def test_a_plan_over_the_gpu_names_what_to_change(shared_data, monkeypatch):
    code, out = _paper(shared_data, monkeypatch, "--gpu-memory-gib", "40")
    assert code == 1 and "of 40.0 GiB: over by" in out
    assert "lower vllm_gpu_memory_utilization" in out and "lower per_device_train_batch_size" in out
    # vLLM's share must hold vLLM itself: its 14.2 GiB of weights do not fit 0.1 of a GPU
    code, out = _paper(shared_data, monkeypatch, "--set", "vllm_gpu_memory_utilization=0.1")
    assert code == 1 and "vllm_gpu_memory_utilization=0.1 gives vLLM 7.9 GiB" in out and "at least 0.2" in out


def test_another_process_count_says_how_the_batch_differs_first(shared_data, monkeypatch):
    _, out = _paper(shared_data, monkeypatch, processes=4)
    lines = out.splitlines()
    assert (
        lines[2]
        .strip()
        .startswith("batch differs from the paper's (Appendix B.2): 128 prompts per optimizer")
    )
    assert (
        "0.5x the 256 and 1024" in lines[2]
        and "--set gradient_accumulation_steps=64 gives it on 4" in lines[2]
    )
    _, out = _paper(shared_data, monkeypatch, "--set", "gradient_accumulation_steps=64", processes=4)
    assert "batch differs" not in out and "= the paper's batch (Appendix B.2)" in out
    _, out = _paper(shared_data, monkeypatch, processes=3)
    assert "no whole gradient_accumulation_steps gives it with 8 sequences per device on 3 processes" in out


def test_memory_parts_follow_their_formulas():
    shape = memory.shape_from_config(memory.PUBLISHED_CONFIGS["Qwen/Qwen2.5-7B"])
    base = {"shape": shape, "rows": 8, "tokens": 4608, "residual_bytes": 2, "compute_bytes": 2}
    full = memory.activation_bytes(**base, checkpointing=False)
    kept = memory.activation_bytes(**base, checkpointing=True)
    assert kept < full / 10  # checkpointing keeps each layer's input and one layer
    assert memory.activation_bytes(**{**base, "rows": 16}, checkpointing=True) == 2 * kept
    # TRL's tiled head holds no (tokens, vocab) logits; the plain head does
    assert memory.lm_head_bytes(shape, 32768, "trl", 2) < 4 * memory.GIB
    assert memory.lm_head_bytes(shape, 32768, "logits", 2) == 32768 * 152064 * 10
    step = memory.Step(8, "deepspeed", 3, 2, 2, False, 0, 8, 512, 4096, True, "trl", vllm_share=0.4)
    awake = memory.gpu_memory_plan(shape, step, 79.0)
    asleep = memory.gpu_memory_plan(shape, dataclasses.replace(step, vllm_sleep=True), 79.0)
    parts = dict(awake.parts)
    assert awake.peak == pytest.approx(sum(parts.values()))
    update = parts["activations (8 rows x 4608 tokens)"] + parts["LM head"]
    vllm = parts["vLLM (0.4 of the GPU)"]
    assert awake.peak - asleep.peak == pytest.approx(min(vllm, update))  # sleeping: the larger phase only


def _gpu_training_configs() -> list[str]:
    """The shipped `pacs-rl train` configs for GPUs (the `pacs-rl compare` ones have a `methods` list)."""
    configs = {p.name: yaml.safe_load(p.read_text()) for p in sorted((REPO / "configs").glob("*.yaml"))}
    return [name for name, data in configs.items() if data.get("use_cpu") is False and "methods" not in data]


def test_a_model_known_by_its_size_only_is_still_checked(tmp_path):
    """No config.json on the machine: the training state and vLLM's share alone, a lower bound, still refuse."""
    values = schema.default_settings() | {"model": "org/Some-Model-70B", "use_cpu": False, "bf16": True}
    values |= {"fast_sampler": False, "update_token_budget": None, "old_logprobs_from_sampler": False}
    lines, refusals = dry_run(values, tmp_path / "x", 8, gpu_memory_gib=79.0)
    assert any("at least 1045.1 GiB of 79.0 GiB" in x and "activations not estimated" in x for x in lines), (
        lines
    )
    assert len(refusals) == 1 and refusals[0].startswith("memory per GPU: at least 1045.1 GiB planned")


@pytest.mark.parametrize("name", _gpu_training_configs())
def test_every_shipped_gpu_training_config_fits_as_shipped(name, shared_data, monkeypatch):
    engines_installed(monkeypatch)
    monkeypatch.setenv("PACS_RL_DATA_DIR", str(shared_data))
    monkeypatch.chdir(REPO)  # the config as the docs name it, from the root of a clone
    args = [
        "train",
        "--config",
        f"configs/{name}",
        "--dataset",
        str(shared_data / "train_deepscaler_subset.jsonl"),
    ]
    result = CliRunner().invoke(app, [*args, "--dry-run", "--num-processes", "8", "--gpu-memory-gib", "79"])
    assert result.exit_code == 0, result.output
    assert "fits" in result.output


def test_the_compare_paper_config_is_planned_as_it_says(tmp_path, monkeypatch):
    """Its header says one process cannot hold the 7B policy's training state on an 80 GB GPU: the plan agrees."""
    engines_installed(monkeypatch)
    from pacs_rl.compare.job import run_values
    from pacs_rl.compare.plan import comparison_protocol, load_settings_file, resolve_settings

    settings = resolve_settings(config=load_settings_file(REPO / "configs" / "compare_paper_7b.yaml"))
    values, _ = run_values(comparison_protocol(settings), "pacs", 0)  # a run as the comparison's job lays it
    assert values["dataset"].startswith("/path/to/")  # the config's placeholder: a missing file is refused
    values["dataset"] = "arithmetic"
    _lines, refusals = dry_run(values, tmp_path / "x", 1, gpu_memory_gib=79.0)
    assert len(refusals) == 1 and "more than the GPU's 79.0 GiB" in refusals[0]


# ---------------------------------------------------------------------------------------------------- protocol
def test_the_prompt_filter_drops_and_counts_long_prompts(tmp_path, caplog, tiny_tokenizer):
    problems, _ = load_run_data(schema.RunSettings(train_size=30, eval_size=0), seed=0)
    problems[3] = dataclasses.replace(problems[3], problem=problems[3].problem + " and so on" * 40)
    lengths = prompt_lengths(problems, tiny_tokenizer, schema.RunSettings().prompt_kwargs())
    bound = max(lengths[:3] + lengths[4:])
    assert lengths[3] > bound
    settings = schema.RunSettings(max_prompt_tokens=bound)
    with caplog.at_level("INFO", logger="pacs_rl"):
        kept = filter_prompts(problems, tiny_tokenizer, settings, None)
    assert len(kept) == 29 and problems[3] not in kept
    assert f"dropped 1 of 30 training prompts longer than {bound} tokens (max_prompt_tokens)" in caplog.text
    with pytest.raises(SettingsError, match="max_prompt_tokens=5: every one of the 30 training prompts"):
        filter_prompts(problems, tiny_tokenizer, dataclasses.replace(settings, max_prompt_tokens=5), None)
    # the dry run counts them when the tokenizer is on this machine (the tiny model's is built in code)
    values = schema.default_settings() | {"model": "tiny", "max_prompt_tokens": min(lengths)}
    lines, refusals = dry_run(values, tmp_path / "x")
    assert refusals == [] and any("training prompts over" in x and "dropped here" in x for x in lines), lines


def test_held_out_and_periodic_evaluation_sample_with_eval_top_p(monkeypatch):
    """The paper's protocol (T = 0.6, top-p 0.95) reaches both evaluations, not the training top_p."""
    seen = []
    monkeypatch.setattr(heldout, "engine_pass_at_k", lambda *a, **k: seen.append(("periodic", a[4])) or {})
    monkeypatch.setattr(heldout, "engine_accuracy", lambda *a, **k: seen.append(("held-out", a[3])) or {})
    monkeypatch.setattr(heldout, "needs_engine", lambda trainer: True)
    settings = schema.RunSettings(eval_temperature=0.6, eval_top_p=0.95)
    config = run.build_config({"use_cpu": True, "top_p": 0.5, "eval_steps": 5}, "unused")
    heldout.periodic_eval(object(), settings, config, ["p"], None).evaluate()
    held = heldout.HeldOut(settings, config, ["p"], None, Path("unused-dir"))
    monkeypatch.setattr(held, "record", lambda **k: None)
    held.measure(object(), "before")
    assert seen == [("periodic", 0.95), ("held-out", 0.95)]
    with pytest.raises(SettingsError, match="eval_top_p=0"):
        schema.RunSettings(eval_top_p=0)


def test_a_run_drops_long_prompts_and_says_its_batch_is_not_the_planned_one(tmp_path, tiny_model_dir, caplog):
    rows = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(12)]
    rows += [
        {"problem": f"What is {i} + {i}?" + " Think hard." * 30, "answer": str(2 * i)} for i in range(12, 16)
    ]
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    sets = [f"model={tiny_model_dir}", f"dataset={data}", "max_steps=1", "per_device_train_batch_size=4"]
    sets += ["num_generations=2", "max_completion_length=4", "eval_size=0", "save_steps=1", "plot=false"]
    sets += [
        "max_prompt_tokens=150",
        "mini_batch_prompts=8",
    ]  # the short prompts have < 150 tokens, the long > 150
    settings, cfg = resolve(None, {}, sets)
    with caplog.at_level("INFO", logger="pacs_rl"):
        run.run_training(settings, run.build_config(cfg, tmp_path / "run"))
    assert "dropped 4 of 16 training prompts longer than 150 tokens (max_prompt_tokens)" in caplog.text
    assert "batch differs from the planned one: 4 prompts per optimizer step" in caplog.text
    recorded = json.loads((tmp_path / "run" / "settings.json").read_text())
    assert recorded["data"] | {"training_prompts": 12, "dropped_long_prompts": 4} == recorded["data"]


@pytest.mark.parametrize(
    ("model", "params"),
    [
        ("Qwen/Qwen2.5-1.5B-Instruct", 1_543_714_304),
        ("Qwen/Qwen2.5-0.5B-Instruct", 494_032_768),
        # Qwen3's model cards: 8.2 B, 4.0 B and 1.7 B parameters
        ("Qwen/Qwen3-8B", 8_190_735_360),
        ("Qwen/Qwen3-4B", 4_022_468_096),
        ("Qwen/Qwen3-1.7B", 1_720_574_976),
    ],
)
def test_the_published_configs_give_the_published_sizes(model, params):
    assert memory.shape_from_config(memory.PUBLISHED_CONFIGS[model]).params == params


@pytest.mark.parametrize("model", [m for m in memory.PUBLISHED_CONFIGS if "Qwen3" in m])
def test_qwen3_counts_are_the_real_architectures(model):
    """Built on the meta device by transformers' own Qwen3 (q/k norms, head_dim apart from hidden / heads)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    published = memory.PUBLISHED_CONFIGS[model]
    with torch.device("meta"):
        real = AutoModelForCausalLM.from_config(AutoConfig.for_model(**published))
    assert type(real).__name__ == "Qwen3ForCausalLM"
    shape, source = model_shape(model)
    assert shape.params == sum(p.numel() for p in real.parameters()) and "published config.json" in source
    assert shape.q_dim == published["num_attention_heads"] * 128 and shape.kv_dim == 8 * 128


QWEN3_PLANS = [
    # config, processes, the memory line's end; each with its own process count, planned on a laptop
    ("qwen3-8b_8gpu_vllm.yaml", 8, "8.19 B parameters", "15.3 training state + 31.6 vLLM", "69.7 GiB of 79.0 GiB: fits"),
    ("qwen3-1.7b_1gpu.yaml", 1, "1.72 B parameters", "25.6 training state + 23.7 vLLM", "56.8 GiB of 79.0 GiB: fits"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "processes", "size", "parts", "verdict"), QWEN3_PLANS)
def test_the_qwen3_configs_are_planned(
    name, processes, size, parts, verdict, shared_data, monkeypatch, tmp_path
):
    _fake_cuda(monkeypatch, present=False)
    engines_installed(monkeypatch)
    monkeypatch.setenv("PACS_RL_DATA_DIR", str(shared_data))
    monkeypatch.chdir(tmp_path)
    args = [
        "train",
        "--config",
        str(REPO / "configs" / name),
        "--dataset",
        str(shared_data / "train_deepscaler_subset.jsonl"),
    ]
    args += ["--dry-run", "--num-processes", str(processes), "--output-dir", str(tmp_path / "x")]
    result = CliRunner().invoke(app, args)
    out = result.output
    assert result.exit_code == 0, out
    assert f"{size} (Qwen/Qwen3-" in out and parts in out and verdict in out
    assert "batch differs" not in out  # each config's batch is the one it is written for
    if processes == 1:  # Qwen3-4B's training state alone nearly fills the GPU: refused, with what to change
        result = CliRunner().invoke(app, [*args, "--set", "model=Qwen/Qwen3-4B"])
        assert result.exit_code == 1 and "59.9 training state" in result.output
        assert "train a LoRA adapter (use_lora=true)" in result.output
    else:  # the paper's other Qwen3 on the same 8 GPUs
        result = CliRunner().invoke(app, [*args, "--set", "model=Qwen/Qwen3-4B"])
        assert result.exit_code == 0 and "4.02 B parameters" in result.output and "fits" in result.output


# ---------------------------------------------------------------------------------------------------- another machine
def _paper_from(folder: Path, shared_data, monkeypatch, *extra: str) -> tuple[int, str]:
    """The paper config's dry run as a user would type it from ``folder``, this machine's packages as they are."""
    monkeypatch.setenv("PACS_RL_DATA_DIR", str(shared_data))
    monkeypatch.chdir(folder)
    args = ["train", "--config", str(PAPER), "--dataset", str(shared_data / "train_deepscaler_subset.jsonl")]
    out = shared_data.parent / "never-written"  # the same absolute folder from every working folder
    result = CliRunner().invoke(
        app, [*args, "--dry-run", "--num-processes", "8", "--output-dir", str(out), *extra]
    )
    return result.exit_code, result.output


def test_the_paper_config_plans_the_same_from_any_folder(shared_data, monkeypatch, tmp_path):
    """Its deepspeed file is read from the config's own folder: from elsewhere the plan is still ZeRO-3 (before, the
    path was read from the current folder: "no such file", then ZeRO-0 and 164 GiB per GPU)."""
    _fake_cuda(monkeypatch, present=False)
    code, here = _paper_from(REPO, shared_data, monkeypatch)
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    code_elsewhere, there = _paper_from(elsewhere, shared_data, monkeypatch)
    assert (code, here) == (code_elsewhere, there)
    assert code == 0 and "DeepSpeed ZeRO-3, 8 processes" in there and "66.5 GiB of 79.0 GiB: fits" in there
    assert "no such file" not in there and "every check passed" in there


def test_a_plan_for_another_machine_lists_what_it_needs_there(shared_data, monkeypatch, tmp_path):
    """No CUDA here and CUDA settings: vLLM, DeepSpeed and wandb missing here are needed there, not refused."""
    _fake_cuda(monkeypatch, present=False)
    monkeypatch.setattr("pacs_rl.preflight._installed", lambda module: False)  # none of them installed
    code, out = _paper_from(tmp_path, shared_data, monkeypatch)
    assert code == 0, out
    needed = next(line for line in out.splitlines() if "needed on the training machine" in line)
    assert "vLLM (use_vllm=true), DeepSpeed (deepspeed), wandb (report_to='wandb')" in needed
    assert needed.endswith('pip install -e ".[vllm,deepspeed]" wandb')
    assert "refused" not in out and "every check passed" in out
    # a plan that does not fit is still refused (the memory verdict is the plan's, wherever it is made)
    code, out = _paper_from(tmp_path, shared_data, monkeypatch, "--gpu-memory-gib", "40")
    assert code == 1 and "refused (1):" in out and "more than the GPU's 40.0 GiB" in out
    # an unknown tracker is no missing package: refused everywhere
    code, out = _paper_from(tmp_path, shared_data, monkeypatch, "--set", "report_to=wandbb")
    assert code == 1 and "report_to='wandbb' is no tracker transformers knows" in out


def test_on_the_machine_that_trains_missing_packages_stay_refusals(shared_data, monkeypatch, tmp_path):
    monkeypatch.setattr("pacs_rl.preflight._installed", lambda module: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _fake_cuda(monkeypatch, present=True)  # this machine has the GPU: it is the one that trains
    code, out = _paper_from(tmp_path, shared_data, monkeypatch, "--gpu-memory-gib", "79")
    uncached = model_problem("Qwen/Qwen2.5-7B")  # this machine's Hub cache must hold the model too, offline
    assert (
        code == 1
        and f"refused ({3 + bool(uncached)}):" in out
        and "needed on the training machine" not in out
    )
    assert uncached is None or uncached in out
    assert "use_vllm=true needs vLLM, which is not installed: pip install 'pacs-rl[vllm]'" in out
    assert "deepspeed needs DeepSpeed, which is not installed: pip install 'pacs-rl[deepspeed]'" in out
    # a CPU plan on a CPU machine is for this machine too
    _fake_cuda(monkeypatch, present=False)
    values = schema.default_settings() | {"model": "tiny", "use_vllm": True}
    lines, refusals = dry_run(values, tmp_path / "x")
    assert [r for r in refusals if "needs vLLM" in r] and not any(
        "needed on the training" in x for x in lines
    )


def test_the_device_layer_sets_trainer_config_fields_only():
    """`pacs-rl train` lays the device choice over the trainer config it has already typed (training/cli.py's
    _train): every setting the choice can make must be a config field, none a run key."""
    from pacs_rl.device import CPU_BF16, CPU_ONLY

    keys = {"use_cpu", "bf16", *CPU_BF16, *CPU_ONLY}
    assert keys <= set(schema.known_keys()) and not keys & set(schema.RUN_FIELDS)
