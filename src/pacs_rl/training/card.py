"""The model card of a training run: README.md in the run folder and in its ``final/`` folder.

TRL writes a generic card at every checkpoint ("a fine-tuned version of [None]", "trained with GRPO", a quick start
that loads ``model="None"``). A run of `pacs-rl train` or `pacs-rl compare` writes this one instead, from what the
run folder records (settings.json, heldout.json, answer_forms.json, metrics.jsonl, run_complete.json): the loss
that was trained and its paper, the base model, the data and task, the grader, the key settings, the held-out
accuracy before and after with its protocol, the answers it was paid for by form, the commands that reproduce,
evaluate and audit it, and a quick start that asks this model a question of its own task. A LoRA run's card says
how to load the adapter on its base and how to merge it.

Everything here reads files; nothing needs torch, so a card can be rewritten at any time (`write_model_card`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pacs_rl.algorithms.options import PACS_OPTIONS
from pacs_rl.data.procedural import parse_query
from pacs_rl.data.prompts import INSTRUCTION, user_turn
from pacs_rl.models import BUNDLED_MODELS, TINY_MODEL
from pacs_rl.run_folder import (
    BASE_MODEL_DIR,
    CARD_FILE,
    FINAL_DIR,
    FINISHED_FILE,
    FORMS_FILE,
    HELDOUT_FILE,
    SAMPLES_DIR,
    SETTINGS_FILE,
    TRAINING_SAMPLES_FILES,
    ProtocolUnknown,
    first_jsonl_row,
    read_json,
    recorded_protocol,
)
from pacs_rl.training.monitor import PAID_FORMS

ADAPTER_CONFIG = "adapter_config.json"

# loss_type -> (name, paper title, link)
LOSS_PAPERS: dict[str, tuple[str, str, str]] = {
    "pacs": (
        "PACS",
        "Implicit Actor Critic Coupling via a Supervised Learning Framework for RLVR",
        "https://arxiv.org/abs/2509.02522",
    ),
    "grpo": (
        "GRPO",
        "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
        "https://arxiv.org/abs/2402.03300",
    ),
    "dr_grpo": (
        "Dr. GRPO",
        "Understanding R1-Zero-Like Training: A Critical Perspective",
        "https://arxiv.org/abs/2503.20783",
    ),
    "rloo": (
        "RLOO",
        "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs",
        "https://arxiv.org/abs/2402.14740",
    ),
    "cw_grpo": (
        "CW-GRPO",
        "Taming Extreme Tokens: Covariance-Aware GRPO with Gaussian-Kernel Advantage Reweighting",
        "https://arxiv.org/abs/2605.11538",
    ),
    "ppo": ("PPO", "Proximal Policy Optimization Algorithms", "https://arxiv.org/abs/1707.06347"),
}

GRADERS = {
    "sound": "the final answer read as a reader reads it (the last commitment, correction or conclusion, else a "
    "plain last line), a number where the gold answer is one, never the question given back, never an answer cut "
    "at the token limit",
    "paper": "math-verify as the PACS authors call it (it also pays restated questions and unevaluated expressions)",
    "strict": "a \\boxed{} answer, checked by math-verify",
}

# config fields shown in the card's settings table, in this order (their values: settings.json's key_settings)
KEY_SETTINGS = (
    "loss_type", "max_steps", "learning_rate", "lr_scheduler_type", "num_generations", "per_device_train_batch_size",
    "gradient_accumulation_steps", "mini_batches_per_rollout", "generation_batch_size", "max_completion_length",
    "temperature", "top_p", "max_grad_norm", "weight_decay", "beta", *(o.name for o in PACS_OPTIONS), "reference",
    "bf16", "seed",
)  # fmt: skip


def base_model_text(model: str) -> tuple[str, str | None]:
    """(how the card names the base model, its Hub id for the card's metadata or None)."""
    if model in BUNDLED_MODELS:
        _, gguf, hub = BUNDLED_MODELS[model]
        return (
            f"[{hub}](https://huggingface.co/{hub}) as pacs-rl bundles it (`{model}`): the Q4_1 GGUF `{gguf}` "
            "de-quantized to fp32, so its weights are the quantized values, not the original bf16 ones",
            hub,
        )
    if model == TINY_MODEL or model.endswith(f"/{BASE_MODEL_DIR}"):
        return "a tiny random model built in code (`--model tiny`: a smoke run, not a language model)", None
    if Path(model).is_absolute() or model.startswith((".", "~")) or model.count("/") != 1:
        return f"the local model `{model}`", None
    return f"[{model}](https://huggingface.co/{model})", model


def arithmetic_task(run: dict[str, Any]) -> dict[str, str] | None:
    """ops and digits of the arithmetic task a run trained on (its source's own options win), None for another
    dataset."""
    source = str(run.get("dataset", ""))
    if source.split("?")[0] != "arithmetic":
        return None
    opts = parse_query(source.partition("?")[2])
    return {
        "ops": str(opts.get("ops", run.get("arithmetic_ops", "+-"))),
        "digits": str(opts.get("digits", run.get("arithmetic_digits", "2,1"))),
    }


def _task_text(run: dict[str, Any], data: dict[str, Any]) -> str:
    n = data.get("training_prompts")
    count = f"{n} training problems" if n is not None else "training problems"
    task = arithmetic_task(run)
    if task:
        names = {"+": "+", "-": "−", "*": "×"}
        ops = " ".join(names.get(o, o) for o in task["ops"])
        digits = task["digits"].replace(",", "-digit and ")
        return (
            f'pacs-rl\'s built-in arithmetic task (`{run["dataset"]}`): "What is a op b?" with op in {ops} and '
            f"{digits}-digit operands (`arithmetic_ops: {task['ops']}`, `arithmetic_digits: {task['digits']}`); "
            f"{count} from its training split"
        )
    fields = [
        f"`{k}: {run[k]}`" for k in ("split", "problem_field", "answer_field", "prompt_field") if run.get(k)
    ]
    skipped = data.get("skipped_rows")
    bad = f"; {skipped} bad rows skipped (settings.json: data.skipped_examples)" if skipped else ""
    return f"`{run.get('dataset')}`: {count}" + (f" ({', '.join(fields)})" if fields else "") + bad


def _heldout_text(protocol: dict[str, Any]) -> str:
    how = (
        "greedy"
        if not protocol.get("temperature")
        else (f"temperature {protocol['temperature']}, top-p {protocol.get('top_p', 1.0)}")
    )
    return (
        f"{protocol.get('n', '?')} problems of `{protocol.get('source', '?')}`, one answer each ({how}, at most "
        f"{protocol.get('max_new_tokens', '?')} new tokens), graded by `{protocol.get('grader', '?')}`"
    )


def _question(out: Path, run: dict[str, Any]) -> str:
    """A question of the run's own task for the quick start: the first held-out problem, else a training one."""
    for name in TRAINING_SAMPLES_FILES:
        first = first_jsonl_row(out / SAMPLES_DIR / name)
        if first.get("problem"):
            return str(first["problem"])
    return "What is 47 + 8?" if arithmetic_task(run) else "What is the sum of the first 10 positive integers?"


def _accuracy_lines(held: dict[str, Any], protocol: dict[str, Any]) -> list[str]:
    if "before" not in held:
        return ["No held-out evaluation was made during training (`eval_size: 0`, or no held-out set)."]
    lines = [f"Held-out accuracy: {_heldout_text(protocol)}.", "", "| | accuracy | mean length (tokens) | cut off at the limit |",
             "|---|---|---|---|"]  # fmt: skip
    for when in ("before", "after"):
        r = held.get(when)
        if not r:
            lines.append(f"| {when} training | not measured (the run has not finished) | | |")
            continue
        cut = r.get("truncated_frac")
        lines.append(
            f"| {when} training | {r['accuracy']:.1%} ({r.get('correct', '?')} of {r.get('n', '?')}) | "
            f"{r.get('mean_length', float('nan')):.1f} | {'' if cut is None else f'{cut:.0%}'} |"
        )
    after = held.get("after") or {}
    if (after.get("truncated_frac") or 0) > 0.5 or (
        (held.get("before") or {}).get("truncated_frac") or 0
    ) > 0.5:
        lines += ["", "Most held-out answers were cut off at the token limit: this accuracy measures the limit as "
                      "much as the model (raise `eval_max_new_tokens`, or `max_completion_length`)."]  # fmt: skip
    return lines


def _forms_lines(forms: dict[str, Any], out: Path) -> list[str]:
    if not forms:
        return []
    paid = forms.get("paid") or 0
    counts = forms.get("paid_forms") or {}
    parts = ", ".join(f"{f} {counts[f]}" for f in PAID_FORMS if counts.get(f)) or "none"
    lines = [
        f"Paid answers in training, by form (`answer_forms.json`): {parts} (of {paid} paid among "
        f"{forms.get('completions', '?')} completions, grader `{forms.get('grader', '?')}`). A policy learns what "
        "its grader pays: a form other than `plain` (a boxed or committed number) growing is the first sign of a "
        "grader paid for something else than the task.",
    ]
    held = forms.get("heldout_after")
    if held:
        lines[0] += (
            " Held-out answers paid after training: " + ", ".join(f"{k} {v}" for k, v in held.items()) + "."
        )
    lines += ["", f"`pacs-rl audit {out}` grades the kept completions (`{SAMPLES_DIR}/`) again with another grader "
                  "and prints what changes."]  # fmt: skip
    return lines


def _settings_table(key: dict[str, Any], run: dict[str, Any]) -> list[str]:
    rows = [(k, key[k]) for k in KEY_SETTINGS if k in key]
    if run.get("use_lora"):
        rows += [("use_lora", True), ("lora_r", run.get("lora_r")), ("lora_alpha", run.get("lora_alpha")),
                 ("lora_target_modules", run.get("lora_target_modules"))]  # fmt: skip
    rows += [("grader", run.get("grader")), ("reward_funcs", run.get("reward_funcs"))]
    return ["| setting | value |", "|---|---|", *(f"| `{k}` | `{v}` |" for k, v in rows)]


def _quick_start(
    model_dir: str, question: str, run: dict[str, Any], max_tokens: Any, lora: bool
) -> list[str]:
    instruction = run.get("instruction", INSTRUCTION)
    content = user_turn(question, instruction if instruction is not None else INSTRUCTION)
    system = run.get("system_prompt")
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": content}
    ]
    if lora:
        load = [
            "from peft import AutoPeftModelForCausalLM",
            "from transformers import AutoTokenizer",
            "",
            f"model_dir = {model_dir!r}  # or the Hub id you uploaded it to",
            "model = AutoPeftModelForCausalLM.from_pretrained(model_dir)  # the base model named in adapter_config.json",
        ]
    else:
        load = [
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f"model_dir = {model_dir!r}  # or the Hub id you uploaded it to",
            "model = AutoModelForCausalLM.from_pretrained(model_dir)",
        ]
    return [
        "```python",
        *load,
        "tokenizer = AutoTokenizer.from_pretrained(model_dir)",
        f"messages = {json.dumps(messages, ensure_ascii=False)}",
        'ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)',
        f"out = model.generate(**ids, max_new_tokens={max_tokens}, do_sample=False)",
        'print(tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))',
        "```",
    ]


def _lora_lines(model_dir: str, base: str, adapter: dict[str, Any]) -> list[str]:
    recorded = adapter.get("base_model_name_or_path") or base
    return [
        "## The LoRA adapter",
        "",
        f"This folder holds a LoRA adapter (peft), not whole weights. `adapter_config.json` names its base as "
        f"`{recorded}`; where that path does not exist (another machine), load the base yourself and put the "
        "adapter on it, then merge it into whole weights if you want a plain transformers model:",
        "",
        "```python",
        "from peft import PeftModel",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f"base = AutoModelForCausalLM.from_pretrained({base!r})"
        + (
            "  # pacs_rl.models.resolve_model('smollm2-135m') gives pacs-rl's bundled copy"
            if base in {h for _, _, h in BUNDLED_MODELS.values()}
            else ""
        ),
        f"model = PeftModel.from_pretrained(base, {model_dir!r})",
        "merged = model.merge_and_unload()            # whole weights, no peft needed to load them",
        'merged.save_pretrained("merged")',
        f'AutoTokenizer.from_pretrained({model_dir!r}).save_pretrained("merged")',
        "```",
    ]


UNFINISHED = (
    "**Unfinished.** This run has not finished training (or was interrupted); `final/` does not hold its weights "
    "yet. Rerunning the command below into this folder continues it from its last checkpoint, and rewrites this "
    "card when it finishes."
)


def _recorded_key_settings(recorded: dict[str, Any]) -> dict[str, Any]:
    """The run's key settings as settings.json records them; for a run recorded before key_settings, those of its
    recorded config fields (the ones that differ from their defaults), PACS unless it says otherwise."""
    config = recorded.get("config", {})
    return recorded.get("key_settings") or {
        "loss_type": "pacs",
        **{k: config[k] for k in KEY_SETTINGS if k in config},
    }


def _front_matter(hub: str | None, lora: bool, loss: str) -> list[str]:
    """The card's YAML metadata, which the Hub reads: the base model (when it is a Hub id), library and tags."""
    meta = ["---"]
    if hub:
        meta.append(f"base_model: {hub}")
    meta += [f"library_name: {'peft' if lora else 'transformers'}", "pipeline_tag: text-generation", "tags:",
             "- pacs-rl", "- rlvr", f"- {loss}", "---"]  # fmt: skip
    return meta


def took_no_step(steps: int | None, skipped: dict[str, int] | None) -> bool:
    """Whether a finished run of ``steps`` optimizer steps skipped every one (``skipped``: by cause, as
    run_complete.json records them): its final weights are the ones it started from."""
    return bool(steps) and sum((skipped or {}).values()) >= steps


NO_STEP = (
    "no optimizer step changed the weights: all {steps} were skipped, so `final/` holds the weights the run started "
    "from (a group teaches only when its rewards differ: data the model solves now and then, or a longer answer "
    "limit)"
)


def _steps_text(steps: int | None, max_steps: Any, skipped: dict[str, int]) -> str:
    """The card's line on the optimizer steps: how many, of how many, and those that moved no weight."""
    text = f"{steps if steps is not None else 'unfinished'} optimizer steps" + (
        f" of {max_steps}" if max_steps else ""
    )
    causes = [
        f"{skipped[k]} {why}"
        for k, why in (("no_signal", "without a signal: no group held two different rewards"),
                       ("nonfinite", "with a non-finite gradient norm"))
        if skipped.get(k)
    ]  # fmt: skip
    text += (f", skipped (weights left as they were): {'; '.join(causes)}" if causes else "") + "."
    return text + (f" **Untrained:** {NO_STEP.format(steps=steps)}." if took_no_step(steps, skipped) else "")


def _training_lines(
    run: dict[str, Any],
    data: dict[str, Any],
    key: dict[str, Any],
    steps: int | None,
    model_text: str,
    skipped: dict[str, int] | None = None,
) -> list[str]:
    """What was trained: one sentence (``model_text``, the loss and its paper), then the Training section: the
    loss, data, grader and steps, and the key settings' table."""
    loss = str(key.get("loss_type", "pacs"))
    name, title, link = LOSS_PAPERS.get(loss, (loss, "", ""))
    max_steps = key.get("max_steps")
    return [
        f"{model_text}, post-trained with **{name}**"
        + (f" ([{title}]({link}))" if link else "")
        + " by reinforcement learning from verifiable rewards (pacs-rl, on TRL).",
        "",
        "## Training",
        "",
        f"- **Loss:** `{loss}` ({name}); {'its' if loss == 'pacs' else 'the'} reward is 0/1 from the grader below.",
        f"- **Data:** {_task_text(run, data)}.",
        f"- **Grader (reward):** `{run.get('grader', '?')}`: {GRADERS.get(str(run.get('grader')).split('+')[0], '')}.",
        f"- **Steps:** {_steps_text(steps, max_steps, skipped or {})}",
        "- **Every setting:** `settings.json` in the run folder (run keys and the trainer config fields that differ"
        " from their defaults).",
        "",
        *_settings_table(key, run),
    ]


def _evaluation_section(
    out: Path, protocol: dict[str, Any], evaluations: list[dict[str, Any]] | None
) -> list[str]:
    """The Evaluation section: held-out accuracy before and after, `pacs-rl eval` results (``evaluations``) and
    the paid answers by form."""
    lines = ["## Evaluation", "", *_accuracy_lines(read_json(out / HELDOUT_FILE), protocol), ""]
    if evaluations:
        lines += _evaluation_lines(evaluations)
    return [*lines, *_forms_lines(read_json(out / FORMS_FILE), out)]


def _reproduce_lines(out: Path, command: str | None, protocol: dict[str, Any]) -> list[str]:
    """The commands that reproduce the run (``command``, as recorded), evaluate its final model (on its held-out
    task when ``protocol`` records one) and audit its kept answers, and why a rerun may differ."""
    final = out / FINAL_DIR
    eval_command = (
        f"pacs-rl eval --model {final}" if protocol else f"pacs-rl eval --model {final} --benchmarks SOURCE"
    )
    lines = ["## Reproduce, evaluate, audit", "", "```bash"]
    if command:
        lines.append(f"{command}   # the command that made this run (into another --output-dir to repeat it)")
    return [
        *lines,
        f"{eval_command}   # {'its held-out task and protocol, as above' if protocol else 'on a benchmark of yours'}",
        f"pacs-rl audit {out}   # its kept answers graded again by another grader",
        "```",
        "",
        "A run repeats itself bit for bit only with `--threads 1` on the same machine; with more threads the float "
        "sums differ and a run drifts after a few steps.",
    ]


def card_text(
    out: str | Path, in_final: bool = False, evaluations: list[dict[str, Any]] | None = None
) -> str:
    """The card of the run in ``out`` (its README.md; ``in_final``: the copy inside final/, whose quick start loads
    that folder). ``evaluations``: metrics.json contents of `pacs-rl eval` runs of the final model (a comparison's),
    shown as a table."""
    out = Path(out)
    recorded = read_json(out / SETTINGS_FILE)
    run = recorded.get("run", {})
    key = _recorded_key_settings(recorded)
    try:
        protocol = recorded_protocol(out) or {}
    except ProtocolUnknown:  # the card then leaves the protocol out
        protocol = {}
    loss = str(key.get("loss_type", "pacs"))
    name, title, link = LOSS_PAPERS.get(loss, (loss, "", ""))
    base_text, hub = base_model_text(str(run.get("model", "?")))
    lora = bool(run.get("use_lora"))
    model_dir = "." if in_final else str(out / FINAL_DIR)
    finished = read_json(out / FINISHED_FILE)
    steps = finished.get("global_step")
    lines = [*_front_matter(hub, lora, loss), "", f"# {out.name}: {name} on {run.get('dataset', '?')}", ""]
    if steps is None:
        lines += [UNFINISHED, ""]
    model_text = f"{'A LoRA adapter on ' if lora else ''}{base_text}"
    lines += [
        *_training_lines(
            run, recorded.get("data", {}), key, steps, model_text, finished.get("skipped_steps")
        ),
        "",
        *_evaluation_section(out, protocol, evaluations),
        "",
        *_reproduce_lines(out, recorded.get("command"), protocol),
        "",
        "## Quick start",
        "",
        "A question of the run's own task, in the prompt it was trained with:",
        "",
        *_quick_start(model_dir, _question(out, run), run, protocol.get("max_new_tokens", 256), lora),
        "",
    ]
    if lora:
        adapter = read_json(out / FINAL_DIR / ADAPTER_CONFIG)
        lines += [*_lora_lines(model_dir, hub or str(run.get("model")), adapter), ""]
    lines += ["## Citation", "", f"{name}: {title}, {link}." if link else f"{name}.", ""]
    return "\n".join(lines)


def _evaluation_lines(evaluations: list[dict[str, Any]]) -> list[str]:
    lines = [
        "`pacs-rl eval` of the final model:",
        "",
        "| benchmark | grader | n | pass@k | problems |",
        "|---|---|---|---|---|",
    ]
    for m in evaluations:
        passk = ", ".join(f"pass@{k} {float(v):.1%}" for k, v in (m.get("pass_at_k") or {}).items())
        s = m.get("sampling") or {}
        how = "greedy" if not s.get("temperature") else f"T {s.get('temperature')}, top-p {s.get('top_p')}"
        lines.append(
            f"| `{m.get('benchmark')}` | `{m.get('grader')}` | {m.get('n')} ({how}, <= {s.get('max_new_tokens')} "
            f"tokens) | {passk} | {m.get('num_problems')} |"
        )
    return [*lines, ""]


def write_model_card(out: str | Path, evaluations: list[dict[str, Any]] | None = None) -> list[Path]:
    """Write the card into ``out``/README.md and, when the run has its final weights, ``out``/final/README.md.
    Returns the paths written."""
    out = Path(out)
    written = []
    path = out / CARD_FILE
    path.write_text(card_text(out, evaluations=evaluations))
    written.append(path)
    final = out / FINAL_DIR
    if (out / FINISHED_FILE).is_file() and final.is_dir():
        (final / CARD_FILE).write_text(card_text(out, in_final=True, evaluations=evaluations))
        written.append(final / CARD_FILE)
    return written


__all__ = [
    "LOSS_PAPERS",
    "NO_STEP",
    "base_model_text",
    "card_text",
    "took_no_step",
    "write_model_card",
]
