"""`pacs-rl train`: PACS (or a baseline) on TRL, from one YAML file and command-line overrides.

With no arguments it runs the CPU default (configs/cpu_default.yaml, embedded below): the bundled
SmolLM2-135M-Instruct on adding and subtracting a one-digit number to or from a two-digit one, then
prints held-out accuracy before and after, the output folder and a PNG of the training curves.

Settings are one flat namespace: every `PACSConfig` field (TRL's GRPOConfig + PACS) plus the run keys
in `RUN_DEFAULTS` (model, dataset, held-out set, LoRA, ...). Later sources win:
CPU defaults < --config FILE.yaml < typer options (--model, --dataset, ...) < --set key=value.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import time
from pathlib import Path
from typing import Any

import typer

# Run keys: what to train on and what to report, beside the trainer's own fields.
RUN_DEFAULTS: dict[str, Any] = {
    "model": "smollm2-135m",  # bundled alias, Hub id or local folder
    "dataset": "arithmetic",  # arithmetic | reasoning_gym:<task> | file | Hub id | benchmark name
    "dataset_split": None,
    "problem_field": None,
    "answer_field": None,
    "skip_bad_rows": False,
    "arithmetic_ops": "+-",  # operators of the built-in arithmetic task (train and held-out); "+-*" adds ×
    "arithmetic_digits": "2,1",  # operand lengths: "2,1" (47 + 8; the default, docs/TRAINING.md), "2" (47 + 38)
    "train_size": 2000,  # problems drawn for procedural datasets / row limit for others (0 = all)
    "eval_dataset": None,  # default: the held-out arithmetic split when training on arithmetic
    "eval_size": 200,  # 0 disables the before/after evaluation
    "eval_temperature": 0.0,  # 0 = greedy
    "eval_max_new_tokens": None,  # default: max_completion_length
    "eval_batch_size": 50,
    "reward": "math",  # math (lenient) | math_strict (only a \boxed{} answer counts)
    "model_dtype": "float32",  # float32 | bfloat16 (weights; AMX CPUs run bf16 matmuls natively)
    "use_lora": False,
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.0,
    "lora_target_modules": "all-linear",
    "plot": True,
}

# The CPU default. configs/cpu_default.yaml mirrors it (a test keeps them equal).
CPU_DEFAULTS: dict[str, Any] = {
    "use_cpu": True,
    "bf16": True,  # bf16 autocast, fp32 master weights: fwd+bwd 2.35x faster here (AVX512-BF16); docs
    "loss_type": "pacs",
    "num_generations": 8,
    "per_device_train_batch_size": 16,  # 2 groups of 8 per mini-batch
    "gradient_accumulation_steps": 1,
    "mini_batches_per_rollout": 2,  # 4 prompts x 8 completions per rollout, 2 optimizer steps on it
    "max_steps": 24,
    "learning_rate": 2.0e-5,
    "lr_scheduler_type": "constant",
    "warmup_steps": 0,
    "max_grad_norm": 1.0,
    "temperature": 0.7,  # at 1.0 the 135M model rambles: 3x fewer correct samples on this task (docs)
    "top_p": 1.0,
    "max_completion_length": 96,  # at 48 nearly every completion is cut off and nothing was learned (docs)
    "fast_sampler": True,  # pacs_rl.sampling: one prefill per prompt shared by its 8 samples
    "fast_sampler_dtype": "bfloat16",
    "logging_steps": 1,
    "save_strategy": "steps",
    "save_steps": 10,
    "save_total_limit": 2,
    "report_to": "none",
    "seed": 0,
    "dataloader_num_workers": 0,
}


def _config_fields(loss_type: str | None = None) -> dict[str, dataclasses.Field]:
    """Fields of the config class serving ``loss_type``; None: every field of any of them (PPO's is a superset)."""
    from pacs_rl.training.config import PACSConfig

    classes = [PACSConfig]
    try:
        from pacs_rl.training.ppo import PPOConfig, config_and_trainer_classes
    except ImportError:
        PPOConfig = config_and_trainer_classes = None
    if loss_type is not None and config_and_trainer_classes is not None:
        classes = [config_and_trainer_classes(loss_type)[0]]
    elif PPOConfig is not None:
        classes.append(PPOConfig)
    return {f.name: f for cls in classes for f in dataclasses.fields(cls) if f.init}


def config_and_trainer_classes(loss_type: str) -> tuple[type, type]:
    """(config class, trainer class) for ``loss_type``: PPO's for 'ppo', PACSConfig/PACSTrainer otherwise."""
    from pacs_rl.training.ppo import config_and_trainer_classes as pick

    return pick(loss_type)


def _parse_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _coerce(key: str, value: Any, field: dataclasses.Field | None) -> Any:
    """Turn YAML/CLI text into the field's type (YAML reads 1e-5 as a string, for instance)."""
    if not isinstance(value, str):
        return value
    if field is not None:
        kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    else:
        default = RUN_DEFAULTS.get(key)
        kind = type(default).__name__ if default is not None else "str"
    low = value.strip().lower()
    if low == "null" or (low == "none" and "str" not in kind):
        return None
    try:
        if "bool" in kind and low in ("true", "yes", "1", "on", "false", "no", "0", "off"):
            return low in ("true", "yes", "1", "on")
        if "float" in kind:
            return float(value)
        if "int" in kind:
            return int(value)
    except ValueError:
        if "str" not in kind:
            raise typer.BadParameter(f"{key}={value!r}: expected {kind}") from None
    return value


def known_keys() -> list[str]:
    return sorted(set(_config_fields()) | set(RUN_DEFAULTS))


def check_keys(settings: dict[str, Any], where: str) -> None:
    """Refuse unknown keys, naming the close matches."""
    keys = known_keys()
    for key in settings:
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=4, cutoff=0.6)
            hint = f" Did you mean: {', '.join(close)}?" if close else " See `pacs-rl train --list-keys`."
            raise typer.BadParameter(f"unknown setting {key!r} in {where}.{hint}")


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise typer.BadParameter(f"config file {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{path}: expected a mapping of setting: value, got {type(data).__name__}")
    check_keys(data, str(path))
    return data


def parse_sets(items: list[str]) -> dict[str, Any]:
    out = {}
    for item in items:
        if "=" not in item:
            raise typer.BadParameter(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = _parse_value(value)
    check_keys(out, "--set")
    return out


def resolve_settings(config: str | None, options: dict[str, Any], sets: list[str]) -> tuple[dict, dict]:
    """Merge the layers; return (run settings, PACSConfig kwargs)."""
    merged: dict[str, Any] = {**RUN_DEFAULTS, **CPU_DEFAULTS}
    if config:
        merged.update(load_yaml(config))
    merged.update({k: v for k, v in options.items() if v is not None})
    merged.update(parse_sets(sets))
    fields = _config_fields()
    merged = {k: _coerce(k, v, fields.get(k)) for k, v in merged.items()}
    run = {k: merged[k] for k in RUN_DEFAULTS}
    cfg = {k: v for k, v in merged.items() if k in fields}
    return run, cfg


# --------------------------------------------------------------------------------------------------
def _load_data(run: dict[str, Any], seed: int):
    """Training problems and the held-out problems (disjoint from training)."""
    from pacs_rl.data import arithmetic_pool_size, arithmetic_problems, load_problems, split_disjoint
    from pacs_rl.data.procedural import parse_query

    source = str(run["dataset"])
    n = int(run["train_size"] or 0)
    arithmetic = source == "arithmetic" or source.startswith("arithmetic?")
    if arithmetic:  # the source string's own options win; ops and digits fall back to the run keys
        opts = parse_query(source.partition("?")[2])
        if str(opts.pop("split", "train")) != "train":
            raise ValueError(
                f"{source!r}: a training set is drawn from the train split (the held-out set from test)"
            )
        unknown = set(opts) - {"n", "seed", "ops", "digits"}
        if unknown:
            raise ValueError(
                f"{source!r}: unknown option(s) {', '.join(sorted(unknown))}; known: n, seed, ops, digits"
            )
        ops = str(opts.get("ops", run["arithmetic_ops"]))
        digits = opts.get("digits", run["arithmetic_digits"])
        want = int(opts.get("n", n or 2000))
        pool = arithmetic_pool_size(ops=ops, digits=digits, split="train")
        if want > pool and "n" not in opts:  # train_size is a ceiling here; an explicit n= is a demand
            typer.echo(
                f"training on all {pool} problems of arithmetic ops={ops} digits={digits} (train_size={want} is more)"
            )
            want = pool
        train = arithmetic_problems(
            want, seed=int(opts.get("seed", seed)), split="train", ops=ops, digits=digits
        )
    else:
        train = load_problems(
            source,
            problem_field=run["problem_field"],
            answer_field=run["answer_field"],
            split=run["dataset_split"],
            limit=n or None,
            on_error="skip" if run["skip_bad_rows"] else "raise",
        )
        skipped = getattr(train, "skipped", 0)
        if skipped:
            typer.echo(f"skipped {skipped} bad rows of {source}:")
            for msg in getattr(train, "skip_messages", [])[:5]:
                typer.echo(f"  {msg}")
    held = []
    eval_n = int(run["eval_size"] or 0)
    if eval_n:
        eval_source = run["eval_dataset"]
        if eval_source is None and arithmetic:
            eval_n = min(eval_n, arithmetic_pool_size(ops=ops, digits=digits, split="test"))
            held = arithmetic_problems(eval_n, seed=10_000 + seed, split="test", ops=ops, digits=digits)
        elif eval_source is not None:
            held = list(load_problems(eval_source, limit=eval_n, on_error="skip"))
        if held:
            train, dropped = split_disjoint(list(train), held)
            if dropped:
                typer.echo(f"dropped {dropped} training problems that also appear in the held-out set")
    if not train:
        raise typer.BadParameter(f"dataset {source!r} gave no usable training problems")
    return list(train), held


def _build_dataset(problems):
    from datasets import Dataset

    from pacs_rl.data import build_messages

    return Dataset.from_list(
        [{"prompt": build_messages(p.problem), "answer": p.answer, "problem_id": p.id} for p in problems]
    )


def train_command(
    config: str = typer.Option(
        None, "--config", "-c", help="YAML file of settings (PACSConfig fields + run keys)."
    ),
    set_: list[str] = typer.Option(
        [], "--set", "-s", help="Override any setting: --set learning_rate=1e-5 (repeatable)."
    ),
    output_dir: str = typer.Option(
        None, "--output-dir", "-o", help="Run folder (default runs/<loss>-<time>)."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in --output-dir from its last checkpoint."
    ),
    model: str = typer.Option(None, "--model", "-m", help="Bundled alias, Hub id or local folder."),
    dataset: str = typer.Option(
        None,
        "--dataset",
        "-d",
        help="arithmetic | reasoning_gym:<task> | file.jsonl | Hub id | benchmark name.",
    ),
    loss_type: str = typer.Option(
        None, "--loss-type", "-l", help="pacs | grpo | dr_grpo | rloo | cw_grpo | ppo."
    ),
    max_steps: int = typer.Option(None, "--max-steps", help="Optimizer steps."),
    learning_rate: float = typer.Option(None, "--learning-rate", "--lr", help="Peak learning rate."),
    seed: int = typer.Option(None, "--seed", help="Random seed (data order, sampling, init)."),
    problem_field: str = typer.Option(None, "--problem-field", help="Column holding the problem text."),
    answer_field: str = typer.Option(None, "--answer-field", help="Column holding the reference answer."),
    skip_bad_rows: bool = typer.Option(
        None, "--skip-bad-rows/--no-skip-bad-rows", help="Skip and count bad rows."
    ),
    eval_size: int = typer.Option(
        None, "--eval-size", help="Held-out problems for before/after accuracy (0 = off)."
    ),
    list_keys: bool = typer.Option(False, "--list-keys", help="List every setting name and exit."),
) -> None:
    """Train with PACS (default) or a baseline on TRL. No arguments: the CPU default on arithmetic."""
    if list_keys:
        for key in known_keys():
            typer.echo(key)
        raise typer.Exit()
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    options = {
        "model": model,
        "dataset": dataset,
        "loss_type": loss_type,
        "max_steps": max_steps,
        "learning_rate": learning_rate,
        "seed": seed,
        "problem_field": problem_field,
        "answer_field": answer_field,
        "skip_bad_rows": skip_bad_rows,
        "eval_size": eval_size,
    }
    run, cfg_kwargs = resolve_settings(config, options, set_)
    if resume and not output_dir:
        raise typer.BadParameter("--resume needs --output-dir: the folder of the run to continue")
    output_dir = output_dir or os.path.join(
        "runs", f"{cfg_kwargs.get('loss_type', 'pacs')}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    summary = run_training(run, cfg_kwargs, output_dir, resume=resume)
    typer.echo("")
    for line in summary["lines"]:
        typer.echo(line)


def run_training(
    run: dict[str, Any], cfg_kwargs: dict[str, Any], output_dir: str, resume: bool = False
) -> dict:
    """Build model, data, config and trainer; train; evaluate before/after; plot. Returns a summary."""
    import json

    import torch
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from pacs_rl.models import load_model_and_tokenizer
    from pacs_rl.rewards import make_math_reward_func
    from pacs_rl.training.callbacks import METRICS_FILE, MetricsJsonlCallback, RichProgressCallback
    from pacs_rl.training.heldout import heldout_accuracy, plot_curves
    from pacs_rl.training.trainer import last_complete_checkpoint

    out = Path(output_dir)
    checkpoint = None
    if resume:
        checkpoint = last_complete_checkpoint(out)
        if checkpoint is None:
            raise typer.BadParameter(f"--resume: no complete checkpoint-* folder in {out}")
    elif out.exists() and any(out.glob("checkpoint-*")):
        raise typer.BadParameter(
            f"{out} already holds checkpoints: pass --resume to continue it, or another --output-dir"
        )
    out.mkdir(parents=True, exist_ok=True)
    cfg_kwargs = {**cfg_kwargs, "output_dir": str(out), "disable_tqdm": True}
    loss_type = cfg_kwargs.get("loss_type", "pacs")
    config_cls, trainer_cls = config_and_trainer_classes(loss_type)
    misplaced = sorted(set(cfg_kwargs) - set(_config_fields(loss_type)))
    if misplaced:
        raise typer.BadParameter(
            f"setting(s) {misplaced} do not apply to loss_type={loss_type!r} ({config_cls.__name__})"
        )
    args = config_cls(**cfg_kwargs)
    torch.manual_seed(args.seed)
    (out / "settings.json").write_text(json.dumps({"run": run, "config": cfg_kwargs}, indent=2, default=str))

    try:  # before the model loads, so a bad setting fails at once
        train_problems, held = _load_data(run, args.seed)
    except ValueError as e:  # DataError included: a bad file row, source string or arithmetic_ops
        raise typer.BadParameter(
            f"{e} (settings: dataset={run['dataset']!r}, arithmetic_ops={run['arithmetic_ops']!r}, "
            f"arithmetic_digits={run['arithmetic_digits']!r}, "
            f"eval_dataset={run['eval_dataset']!r})"
        ) from None
    model, tokenizer = load_model_and_tokenizer(str(run["model"]), dtype=str(run["model_dtype"]))
    reward = make_math_reward_func(strict=run["reward"] == "math_strict")
    eval_tokens = int(run["eval_max_new_tokens"] or args.max_completion_length)

    lines = []
    results_path = out / "heldout.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}

    def measure_heldout(policy, when: str) -> dict:
        return heldout_accuracy(
            policy,
            tokenizer,
            held,
            eval_tokens,
            int(run["eval_batch_size"]),
            float(run["eval_temperature"]),
            seed=args.seed,
            reward_func=reward,
            description=f"held-out, {when}",
        )

    if held and "before" not in results:
        results["before"] = measure_heldout(model, "before")
        results_path.write_text(json.dumps(results, indent=2))

    peft_config = None
    if run["use_lora"]:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=int(run["lora_r"]),
            lora_alpha=int(run["lora_alpha"]),
            lora_dropout=float(run["lora_dropout"]),
            target_modules=run["lora_target_modules"],
            task_type="CAUSAL_LM",
        )
    trainer = trainer_cls(
        model,
        reward,
        args=args,
        train_dataset=_build_dataset(train_problems),
        processing_class=tokenizer,
        callbacks=[MetricsJsonlCallback(), RichProgressCallback(f"{args.loss_type}")],
        peft_config=peft_config,
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    t0 = time.time()
    trainer.train(resume_from_checkpoint=checkpoint)
    train_seconds = time.time() - t0
    trainer.save_model(str(out / "final"))
    tokenizer.save_pretrained(str(out / "final"))

    policy = trainer.accelerator.unwrap_model(trainer.model)
    if held:
        results["after"] = measure_heldout(policy, "after")
        results["train_seconds_this_session"] = train_seconds
        results_path.write_text(json.dumps(results, indent=2))
        b, a = results["before"], results["after"]
        how = "greedy" if float(run["eval_temperature"]) == 0 else f"T={run['eval_temperature']}"
        lines.append(
            f"held-out accuracy ({a['n']} problems, {how}): before {b['accuracy']:.1%} -> after {a['accuracy']:.1%}"
        )
    png = (
        plot_curves(
            out / METRICS_FILE, out / "training_curves.png", title=f"{args.loss_type} on {run['dataset']}"
        )
        if run["plot"]
        else None
    )
    lines.append(f"training: {trainer.state.global_step} steps, {train_seconds / 60:.1f} min this session")
    lines.append(f"output folder: {out}")
    lines.append(f"metrics: {out / METRICS_FILE}")
    if png:
        lines.append(f"curves: {png}")
    lines.append(f"final weights: {out / 'final'}")
    return {"lines": lines, "heldout": results, "output_dir": str(out), "trainer": trainer}
