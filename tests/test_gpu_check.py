"""benchmarks/gpu_check.py's memory check and scripts/wheelhouse.py, everything but the CUDA calls, on the CPU:
the models built from the shipped configs, the settings and plan of each memory run, a memory run in-process,
the comparison's arithmetic; the wheelhouse's choice of what a bare CUDA machine lacks."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from pacs_rl.training import memory
from pacs_rl.training.plan import memory_plan

REPO = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gpu_check = _load(REPO / "benchmarks" / "gpu_check.py", "gpu_check")
wheelhouse = _load(REPO / "scripts" / "wheelhouse.py", "wheelhouse")

SMALL_QWEN3 = {  # the published Qwen3 fields, at a size a test builds in a second
    "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 512,
    "tie_word_embeddings": True, "max_position_embeddings": 1024, "torch_dtype": "bfloat16",
}  # fmt: skip


def test_the_memory_check_covers_a_1_5b_model_and_qwen3_from_shipped_configs():
    assert set(gpu_check.MEMORY_MODELS) <= set(memory.PUBLISHED_CONFIGS)
    sizes = [memory.shape_from_config(memory.PUBLISHED_CONFIGS[m]).params for m in gpu_check.MEMORY_MODELS]
    assert 1.4e9 < sizes[0] < 1.6e9  # the 1.5B class
    assert all(c in gpu_check.CORE_CHECKS for c in gpu_check.MEMORY_CHECKS)  # any CUDA machine runs them
    assert len(gpu_check.MEMORY_CHECKS) == len(gpu_check.MEMORY_MODELS) * 2  # PACS and GRPO each


def test_the_padded_tokenizer_knows_every_id_of_the_model():
    tok = gpu_check.padded_tokenizer(600)
    assert len(tok) == 600 and tok.eos_token_id == 2 and tok.pad_token_id == 0
    assert tok.decode([599]) == "<extra_499>"  # 4 specials, 95 printable characters and a newline first
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], tokenize=False,
                                   add_generation_prompt=True)  # fmt: skip
    assert text.endswith("<|im_start|>assistant\n") and tok.decode(tok(text)["input_ids"]) == text


def test_a_model_built_from_a_config_is_that_shape_and_loads(tmp_path):
    from transformers import AutoModelForCausalLM

    folder = gpu_check.build_model_folder(SMALL_QWEN3, tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == memory.shape_from_config(SMALL_QWEN3).params
    assert json.loads((folder / "config.json").read_text())["eos_token_id"] == 2


def test_each_memory_run_is_planned_as_the_dry_run_plans_it(tmp_path):
    """The 1.5B run's plan from the shipped config, on the CPU: the numbers the GPU will be held to."""
    folder = tmp_path / "Qwen2.5-1.5B-Instruct"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(memory.PUBLISHED_CONFIGS["Qwen/Qwen2.5-1.5B-Instruct"]))
    gpu_check.padded_tokenizer(151936).save_pretrained(folder)
    values = gpu_check.memory_values(folder, "pacs")
    assert 20 < values["max_prompt_tokens"] < 400  # the character-level prompts of the arithmetic task
    plan = memory_plan(values, 1, 79.0)
    parts = dict(plan.parts)
    params = 1_543_714_304
    assert parts["training state"] == 16 * params  # fp32 weights, gradients and AdamW moments: one process
    assert "generation KV cache (16 rows)" in parts  # TRL generates the rollout's 2 x 8 rows at once
    assert plan.peak < 40 * memory.GIB and not plan.problems
    # what the record holds, from a measurement of exactly the plan (less its allowance)
    exact = gpu_check.compare(plan, {"max_allocated": plan.peak - memory.ALLOWANCE, "max_reserved": 0})
    assert exact["ratio"] == 1.0 and exact["within_tolerance"] and exact["planned_parts_gib"]
    over = gpu_check.compare(plan, {"max_allocated": 1.2 * (plan.peak - memory.ALLOWANCE)})
    assert over["ratio"] == 1.2 and not over["within_tolerance"]


def test_a_memory_run_trains_in_process_and_reports_the_peak(tmp_path):
    """The child process's work, on the CPU with a small model (the peak is CUDA's there)."""
    folder = gpu_check.build_model_folder(SMALL_QWEN3, tmp_path / "m")
    values = gpu_check.memory_values(folder, "grpo")
    values |= {"use_cpu": True, "bf16": False, "max_completion_length": 8, "train_size": 16}
    peak = gpu_check.measure_in_process(values, tmp_path / "run", lambda: {"max_allocated": 7})
    assert peak == {"max_allocated": 7}
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]


# ---------------------------------------------------------------------------------------------------- wheelhouse
def _report(packages: dict[str, list[str]]) -> dict:
    return {
        "install": [
            {"metadata": {"name": n, "version": "1.0", "requires_dist": r}} for n, r in packages.items()
        ]
    }


def test_the_wheelhouse_leaves_out_what_a_bare_cuda_machine_holds():
    report = _report({
        "pacs-rl": ["torch>=2.4", "transformers", "trl", "math-verify", "datasets"],
        "torch": ["sympy", "nvidia-cublas; python_version >= '3'", "filelock"],
        "sympy": ["mpmath"], "mpmath": [], "filelock": [], "nvidia-cublas": [],
        "transformers": ["numpy", "huggingface-hub"], "numpy": [], "huggingface-hub": ["filelock"],
        "trl": ["accelerate", "datasets"], "accelerate": ["psutil"], "psutil": [],
        "datasets": ["pyarrow", "numpy"], "pyarrow": [],
        "math-verify": ["latex2sympy2-extended"], "latex2sympy2-extended": ["sympy", "antlr4-python3-runtime"],
        "antlr4-python3-runtime": [], "pytest": [],  # pytest: only through an extra not asked for
    })  # fmt: skip
    report["install"][0]["metadata"]["requires_dist"].append('pytest; extra == "dev"')
    missing = wheelhouse.missing_on_bare_machine(report)
    assert sorted(missing) == ["antlr4-python3-runtime", "datasets", "latex2sympy2-extended", "math-verify",
                               "pyarrow", "pytest", "trl"]  # fmt: skip
    # pytest is in the install set only if asked for (--with); sympy comes with torch, numpy with transformers
    assert wheelhouse.closure(["torch"], wheelhouse.graph(report)) == {"torch", "sympy", "mpmath", "filelock",
                                                                       "nvidia-cublas"}  # fmt: skip


def test_the_wheelhouse_script_says_how_to_install_offline():
    text = (REPO / "scripts" / "wheelhouse.py").read_text()
    assert "pip install --no-index --find-links wheelhouse pacs-rl" in text
    assert wheelhouse.PRESENT == ("torch", "transformers", "accelerate", "peft")


@pytest.mark.parametrize("model", gpu_check.MEMORY_MODELS)
def test_the_memory_models_plan_to_fit_an_80_gb_gpu(model, tmp_path):
    folder = tmp_path / model.split("/")[-1]
    folder.mkdir()
    published = memory.PUBLISHED_CONFIGS[model]
    (folder / "config.json").write_text(json.dumps(published))
    values = {**gpu_check.MEMORY_RUN, "model": str(folder), "loss_type": "grpo", "max_prompt_tokens": 256}
    plan = memory_plan(values, 1, 79.0)
    assert plan is not None and not plan.problems and plan.peak < 79 * memory.GIB
