"""``pacs-rl eval``: pass@k of one or more models on one or more benchmarks, or a merged table of finished runs.

Its settings are EvalConfig's declarations (evaluation/runner.py): each option's help, ``--set KEY=VALUE`` (typed
from the declaration), ``--list-keys`` and the checks are read from them. The command parses its options, checks
them (the output folder, the model names, every declared check) before torch loads, builds an :class:`EvalConfig`,
calls the library and prints.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from pacs_rl.command import data_option, declared_option, end_dry_run, fail, note, typed_command
from pacs_rl.data import DataError, ProblemSet, hub_dataset
from pacs_rl.data.procedural import ARITHMETIC_DIGITS, ARITHMETIC_OPS, parse_query
from pacs_rl.evaluation.report import (
    NOT_PLAIN_WARN,
    forms_text,
    load_metrics,
    paid_not_plain,
    results_table,
    write_report,
)
from pacs_rl.evaluation.runner import (
    EvalConfig,
    ResumeMismatch,
    parse_samples,
    plan_evals,
    resume_problem,
    run_evals,
)
from pacs_rl.models import ModelError
from pacs_rl.preflight import Preflight
from pacs_rl.run_folder import (
    AUDIT_FILE,
    EVAL_DIR,
    EVAL_SAMPLES_FILE,
    FINAL_DIR,
    ProtocolUnknown,
    output_dir_problem,
    recorded_protocol,
    run_folder,
)
from pacs_rl.settings.data import DATA_KEYS
from pacs_rl.settings.errors import SettingsError
from pacs_rl.settings.reading import read_assignments, read_values


def _parse_ks(text: str | None) -> list[int] | None:
    if text is None or not text.strip():
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        fail(f"--k takes comma-separated integers such as 1,2,4,8; got {text!r}")


def split_benchmarks(values: list[str]) -> list[str]:
    """``--benchmarks`` values (repeatable, each comma-separated) -> sources. A piece that starts with a digit
    continues the previous source (``arithmetic?digits=2,1``)."""
    out: list[str] = []
    for value in values:
        for piece in value.split(","):
            piece = piece.strip()
            if out and piece[:1].isdigit() and "?" in out[-1]:
                out[-1] += "," + piece
            elif piece:
                out.append(piece)
    return out


EVAL_FIELDS = {
    f.name: f for f in dataclasses.fields(EvalConfig)
}  # every setting of `pacs-rl eval`, declared once
SET_KEYS = tuple(
    key for key in EVAL_FIELDS if key not in ("model", "benchmark")
)  # what --set takes (--list-keys)
# The settings whose default depends on what is evaluated: a training run's own held-out protocol, else these
# (the declared ones; --benchmarks: math500).
TASK_KEYS = ("n", "temperature", "top_p", "max_new_tokens", "grader", "output_dir")
DEFAULTS = {"benchmarks": ["math500"], **{key: EVAL_FIELDS[key].default for key in TASK_KEYS}}
DEFAULTS["n"] = str(DEFAULTS["n"])  # --n is text: 32, math500=32,aime24=512 or paper
OWN = "; a run's own held-out task: its own"
CUT_OFF_WARN = 0.5  # warn when more than this share of the samples hit the token limit


def arithmetic_note(sources: list[str]) -> str | None:
    """What an ``arithmetic`` source without ops= or digits= draws here, beside `pacs-rl train`'s default task (None
    when every arithmetic source names both)."""
    bare = [s for s in sources if s.split("?")[0] == "arithmetic" and not {"ops", "digits"} <= set(parse_query(s.partition("?")[2]))]  # fmt: skip
    if not bare:
        return None
    return (
        f"{bare[0]}: the arithmetic task without ops= or digits= draws ops={ARITHMETIC_OPS}, digits={ARITHMETIC_DIGITS} "
        'here, while `pacs-rl train`\'s default task is ops=+-, digits=2,1 ("What is 47 + 8?"): for that task add '
        "&ops=+-&digits=2,1; for a run's own held-out task give no --benchmarks: pacs-rl eval --model RUN/final"
    )


def _own_task(protocol: dict[str, Any], folder: Path, given: dict[str, Any]) -> dict[str, Any]:
    """The settings of evaluating run ``folder``'s model on its own held-out task: the run's ``protocol`` (n = 1,
    its sampling, token limit, grader, prompt and fields), each replaced by an option ``given`` here (by the keys of
    DEFAULTS, None where not given); the folder RUN/eval/<protocol>; and the line that says so."""
    temperature, top_p = given["temperature"], given["top_p"]
    t = protocol.get("temperature", 0.0) if temperature is None else temperature
    own = {
        "n": given["n"] or "1",
        "temperature": t,
        "top_p": (protocol.get("top_p", 1.0) if t > 0 else 1.0) if top_p is None else top_p,
        "max_new_tokens": given["max_new_tokens"] or protocol.get("max_new_tokens", 1024),
        "grader": given["grader"] or protocol.get("grader", "auto"),
        "limit": protocol.get("limit"),
        "seed": int(protocol.get("seed", 0)),
        "data": {
            **dict(protocol.get("fields") or {}),
            "instruction": protocol.get("instruction"),
            "system_prompt": protocol.get("system_prompt"),
        },
    }
    how = "greedy" if own["temperature"] == 0 else f"T{own['temperature']}"
    own["output_dir"] = given["output_dir"] or str(
        folder / EVAL_DIR / f"{how}-n{own['n']}-{own['max_new_tokens']}tok"
    )
    own["data"] = {k: v for k, v in own["data"].items() if v is not None}
    sampling = "greedy" if own["temperature"] == 0 else f"T {own['temperature']}, top-p {own['top_p']}"
    own["line"] = (
        f"{folder}: the run's own held-out task (settings.json): {protocol['source']}"
        + (f" (first {own['limit']})" if own["limit"] else "")
        + f", n = {own['n']}, {sampling}, <= {own['max_new_tokens']} tokens, grader {own['grader']} -> {own['output_dir']}"
    )
    return own


def _parse_json(text: str | None, option: str) -> dict | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"{option} takes a JSON object such as '{{\"enable_thinking\": false}}': {e}")
    if not isinstance(value, dict):
        fail(f"{option} takes a JSON object, got {type(value).__name__}")
    return value


def _option(key: str, *flags: str, shown: Any = None, extra: str = "", metavar: str | None = None) -> Any:
    """The option of EvalConfig setting ``key``: its help from the declaration (runner.py), default None (not
    given: the declared default, or a training run's own protocol)."""
    return declared_option(EVAL_FIELDS[key], *flags, shown=shown, extra=extra, metavar=metavar)


def eval_command(
    run_dirs: list[str] = typer.Argument(
        None,
        help="With --merge: finished run folders (or folders of runs) to merge into one table.",
        show_default=False,
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Check every setting and print each run (model, benchmark, problems, n, k, sampling, folder) "
        "without loading a model, reading the Hub or writing anything.",
    ),
    model: list[str] = _option(
        "model", "--model", "-m", shown=False, extra="Repeat for several.", metavar="NAME"
    ),
    benchmarks: list[str] = _option(
        "benchmark",
        "--benchmarks",
        "-b",
        shown="math500; for a `pacs-rl train` run's model (RUN/final, or RUN): the run's own held-out task and "
        "protocol",
        extra="Comma-separated and/or repeated: math500, aime24, aime25, amc23, minerva, olympiadbench; a file; a "
        "Hub dataset id; 'arithmetic?n=100&seed=0'; or 'reasoning_gym:<task>?size=100&seed=0'. The model loads once "
        "for all of them.",
        metavar="SOURCE",
    ),
    n: str = _option(
        "n",
        "--n",
        shown=f"{EVAL_FIELDS['n'].default}; a run's own held-out task: its 1",
        extra="Per benchmark: math500=32,aime24=512; or 'paper' (32 for MATH-500, 512 for AIME and AMC).",
        metavar="N",
    ),
    k: str = _option("ks", "--k", shown=False, metavar="K,..."),
    temperature: float = _option(
        "temperature", "--temperature", shown=f"{EVAL_FIELDS['temperature'].default}{OWN}"
    ),
    top_p: float = _option("top_p", "--top-p", shown=f"{EVAL_FIELDS['top_p'].default}{OWN}"),
    max_new_tokens: int = _option(
        "max_new_tokens", "--max-new-tokens", shown=f"{EVAL_FIELDS['max_new_tokens'].default}{OWN}"
    ),
    grader: str = _option(
        "grader", "--grader", shown=f"{EVAL_FIELDS['grader'].default}; a run's own held-out task: its grader"
    ),
    backend: str = _option("backend", "--backend"),
    dtype: str = _option("dtype", "--dtype"),
    batch_size: int = _option("batch_size", "--batch-size"),
    threads: int = _option("num_threads", "--threads", shown="torch's own"),
    device: str = _option("device", "--device"),
    tensor_parallel_size: int = _option("tensor_parallel_size", "--tensor-parallel-size"),
    data_parallel_size: int = _option("data_parallel_size", "--data-parallel-size"),
    gpu_memory_utilization: float = _option(
        "gpu_memory_utilization", "--gpu-memory-utilization", shown=False
    ),
    max_model_len: int = _option("max_model_len", "--max-model-len", shown=False),
    vllm_engine_kwargs: str = _option(
        "vllm_engine_kwargs", "--vllm-engine-kwargs", shown=False, extra="As JSON.", metavar="JSON"
    ),
    limit: int = _option("limit", "--limit", shown=False, extra="Per benchmark.", metavar="N"),
    seed: int = _option("seed", "--seed", shown=f"{EVAL_FIELDS['seed'].default}{OWN}"),
    output_dir: str = _option(
        "output_dir",
        "--output-dir",
        "-o",
        shown=f"{EVAL_FIELDS['output_dir'].default}; a run's own held-out task: RUN/eval/<protocol>",
        extra="Rerunning the same command into it resumes it.",
        metavar="DIR",
    ),
    split: str = data_option("split"),
    problem_field: str = data_option("problem_field"),
    answer_field: str = data_option("answer_field"),
    prompt_field: str = data_option("prompt_field"),
    instruction: str = data_option("instruction"),
    system_prompt: str = data_option("system_prompt"),
    skip_bad_rows: bool = data_option("skip_bad_rows"),
    chat_template_kwargs: str = _option(
        "chat_template_kwargs", "--chat-template-kwargs", shown=False, extra="As JSON.", metavar="JSON"
    ),
    verify_workers: int = _option("verify_workers", "--verify-workers"),
    plain_prompt: bool = typer.Option(
        False, "--plain-prompt", help=EVAL_FIELDS["plain_prompt"].metadata["help"]
    ),
    label: list[str] = _option("label", "--label", shown=False, extra="One per --model.", metavar="NAME"),
    set_: list[str] = typer.Option(
        [],
        "--set",
        "-s",
        help="Any setting of --list-keys: --set temperature=0.7 (repeatable; wins over the options).",
        metavar="KEY=VALUE",
        show_default=False,
    ),
    list_keys: bool = typer.Option(False, "--list-keys", help="List the settings --set takes and exit."),
    merge: bool = typer.Option(
        False, "--merge", help="Merge finished runs (RUN_DIRS) into one table and plot."
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
) -> None:
    """Sample N completions per problem with the paper's prompt, grade them, and report pass@k.

    Writes samples.jsonl, metrics.json, results.md and passk.png into --output-dir; rerun the same command to
    resume after a crash. Several --benchmarks (math500,aime24,amc23) or --model options run into
    --output-dir/<model>/<benchmark> with the model loaded once, and one table laid out like the paper's Tables 2
    and 3; --merge DIR... merges finished runs. A `pacs-rl train` run's model (RUN/final) without --benchmarks is
    evaluated on the run's own held-out task and protocol. Older spellings still work: --output, --benchmark,
    --on-error.
    """
    if list_keys:
        typer.echo("\n".join(sorted(SET_KEYS)))
        raise typer.Exit()
    console = Console(stderr=True)
    if merge:
        _merge(run_dirs, output_dir or DEFAULTS["output_dir"], console)
        return
    if run_dirs:
        fail(f"unexpected arguments {run_dirs}; to merge finished runs add --merge")
    if not model:
        fail("give --model (several allowed), or --merge with run folders")
    sets = read_sets(set_)
    given = {"benchmarks": benchmarks, "n": n, "temperature": temperature, "top_p": top_p,
             "max_new_tokens": max_new_tokens, "grader": grader, "output_dir": output_dir}  # fmt: skip
    given |= {key: str(v) if key == "n" else v for key, v in sets.items() if key in TASK_KEYS}
    task = resolve_task(list(model), given)
    _announce(task, console)
    values = {
        "ks": _parse_ks(k), "limit": limit, "seed": seed, "backend": backend, "dtype": dtype,
        "batch_size": batch_size, "device": device, "num_threads": threads, "verify_workers": verify_workers,
        "plain_prompt": plain_prompt or None, "tensor_parallel_size": tensor_parallel_size,
        "data_parallel_size": data_parallel_size, "gpu_memory_utilization": gpu_memory_utilization,
        "max_model_len": max_model_len, "progress": False if no_progress else None,
        "chat_template_kwargs": _parse_json(chat_template_kwargs, "--chat-template-kwargs"),
        "vllm_engine_kwargs": _parse_json(vllm_engine_kwargs, "--vllm-engine-kwargs"),
        **dict(zip(DATA_KEYS, (split, problem_field, answer_field, prompt_field, instruction, system_prompt,
                               skip_bad_rows), strict=True)),
    }  # fmt: skip
    values |= {key: v for key, v in sets.items() if key not in TASK_KEYS}
    config, n_by_bench = eval_config(task, values)
    labels = list(label) if label else None
    checked = eval_preflight(
        config, task, labels, n_by_bench, network=not dry_run
    )  # a plan: away from the Hub
    if dry_run:
        _dry_run(config, checked)
        return
    if checked.refusals:
        fail("; ".join(checked.refusals))
    results = _run_evals(config, task, labels, n_by_bench, checked.problems)
    typer.echo(results_table(results))
    for r in results:
        _print_run_summary(r, console)
    console.print(f"results in {task.output_dir}")


def read_sets(items: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` of `pacs-rl eval`: EvalConfig settings, each value's text read as YAML, then under its
    current name (an older one with a note), known and typed from its declaration
    (`pacs_rl.settings.reading.read_values`)."""
    notes: list[str] = []
    try:
        values = read_assignments(items, "--set")
        for key in ("model", "benchmark"):
            if key in values:
                raise SettingsError(
                    f"{key} in --set: give it as an option (--model, --benchmarks; several allowed)"
                )
        kinds = {key: str(EVAL_FIELDS[key].type) for key in SET_KEYS}
        typed = read_values(values, "--set", kinds, "See `pacs-rl eval --list-keys`.", notes)
    except SettingsError as e:
        fail(e)
    for message in notes:
        note(message)
    return typed


@dataclass
class EvalTask:
    """What one `pacs-rl eval` call evaluates and how: its models and benchmark sources, and the options whose
    default depends on what is evaluated (DEFAULTS, or a training run's own held-out protocol), resolved."""

    models: list[str]
    sources: list[str]
    n: str
    temperature: float
    top_p: float
    max_new_tokens: int
    grader: str
    output_dir: str
    own: dict[str, Any]  # the run's own protocol (prompt and fields, limit, seed, line); {} for other models


def resolve_task(models: list[str], given: dict[str, Any]) -> EvalTask:
    """The task of ``models`` under the options ``given`` (by the keys of DEFAULTS, None where not given): a
    `pacs-rl train` run's model without --benchmarks is evaluated on the run's own held-out task and protocol,
    anything else on DEFAULTS where an option is not given. Fails on a run without a held-out set, an output
    folder that cannot be used, or no benchmark."""
    own: dict[str, Any] = {}
    folder = run_folder(models[0]) if len(models) == 1 and not given["benchmarks"] else None
    if folder is not None:
        try:
            protocol = recorded_protocol(folder)
        except ProtocolUnknown as e:
            fail(f"{e}: give --benchmarks SOURCE")
        if protocol is None:
            fail(f"{folder} is a training run without a held-out set (eval_size 0): give --benchmarks SOURCE")
        models = [str(folder / FINAL_DIR) if Path(models[0]) == folder else models[0]]
        own = _own_task(protocol, folder, given)
        given = {
            "benchmarks": [protocol["source"]],
            **{key: own[key] for key in given if key != "benchmarks"},
        }
    values = {key: DEFAULTS[key] if value is None else value for key, value in given.items()}
    problem = output_dir_problem(values["output_dir"])
    if problem:
        fail(problem)
    sources = split_benchmarks(values.pop("benchmarks"))
    if not sources:
        fail("give at least one --benchmarks source")
    return EvalTask(models=models, sources=sources, own=own, **values)


def _announce(task: EvalTask, console: Console) -> None:
    """Say what is evaluated where the call does not name it: a training run's own held-out task and protocol, or
    what a bare ``arithmetic`` source draws."""
    if task.own:
        console.print(task.own["line"], soft_wrap=True, markup=False, highlight=False)
        return
    bare = arithmetic_note(task.sources)
    if bare:
        note(bare)


def eval_config(task: EvalTask, values: dict[str, Any]):
    """The EvalConfig of the call's first run (plan_evals derives one per model and benchmark) and the samples per
    benchmark, after checking --n and every declared check (before torch loads). ``values``: the EvalConfig
    settings the call gives beyond the task (None: not given: a training run's own prompt, fields, limit and seed
    where it has them, else the declared default)."""
    try:
        n_default, n_by_bench = parse_samples(task.n, task.sources)
    except ValueError as e:
        fail(e)
    own = {**task.own.get("data", {}), **{k: task.own.get(k) for k in ("limit", "seed")}}
    values = {key: own.get(key) if values.get(key) is None else values[key] for key in {*values, *own}}
    config = EvalConfig(
        model=task.models[0], benchmark=task.sources[0], output_dir=task.output_dir, n=n_default,
        temperature=task.temperature, top_p=task.top_p, max_new_tokens=task.max_new_tokens, grader=task.grader,
        **{key: value for key, value in values.items() if value is not None},
    )  # fmt: skip
    problems = config.problems()
    if problems:
        fail("; ".join(problems))
    return config, n_by_bench


@dataclass
class EvalChecked:
    """What `eval_preflight` found: the refusals in the order it made them, every run of the call, and the
    benchmarks it read (by source; a Hub one is read when the run starts)."""

    refusals: list[str]
    per_model: list[list[EvalConfig]]
    problems: dict[str, ProblemSet]


def eval_preflight(
    config: EvalConfig, task: EvalTask, labels: list[str] | None, n: dict[str, int], network: bool = True
) -> EvalChecked:
    """Everything about an evaluation that can be checked before torch loads, in this order (the run and its
    --dry-run both make them, `pacs_rl.preflight`): every model name (a Hub name in the local cache when offline),
    the sampling engine's library, every run's folder and settings (plan_evals), each benchmark (a local one is read:
    it exists and its rows parse; a Hub one is in the local datasets cache when offline), and the samples a folder
    already holds (drawn with these settings, or a rerun cannot resume them). ``network``: the run's (True), not a
    dry run's."""
    check = Preflight(network)
    for name in task.models:
        check.model(name)
    if config.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        check.add(
            "--backend vllm needs vLLM, which is not installed: pip install 'pacs-rl[vllm]' (on a CPU, vLLM's CPU "
            "build: docs/SCALING.md)"
        )
    try:
        per_model = plan_evals(config, task.models, labels, task.sources, n)
    except ValueError as e:
        fail(e)
    problems: dict[str, ProblemSet] = {}
    for source in task.sources:  # read as the run reads it (runner.eval_problems)
        read = check.data(source, limit=config.limit, **config.loader_kwargs())
        if read is not None:
            check.add(None if read else f"no problems to evaluate in {source!r}")
            problems[source] = read
    for cfg in (c for runs in per_model for c in runs):
        check.add(resume_problem(cfg, Path(cfg.output_dir)))
    return EvalChecked(check.refusals, per_model, problems)


def _run_evals(config, task: EvalTask, labels: list[str] | None, n: dict[str, int], problems=None) -> list:
    """Run every evaluation of the call and return their metrics; a setting or data the runner refuses fails with
    its message, and Ctrl-C says where the samples drawn so far are kept and how to go on. ``problems``: the
    benchmarks the checks read already, by source."""
    if not config.progress:  # transformers' own bars too ("Loading weights")
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    try:
        return run_evals(config, task.models, labels=labels, benchmarks=task.sources, n=n, problems=problems)
    except (DataError, ModelError, ResumeMismatch, ValueError) as e:
        fail(e)
    except KeyboardInterrupt:
        typer.echo(
            f"interrupted: the samples drawn so far are kept in {task.output_dir} (samples.jsonl); go on with: "
            f"{typed_command(task.output_dir)}",
            err=True,
        )
        raise typer.Exit(130) from None


def _dry_run(config: EvalConfig, checked: EvalChecked) -> None:
    """``--dry-run``: every run of the call, checked as the run checks it (`eval_preflight`), without loading a
    model, reading the Hub or writing anything; exit 1 with every refusal when something cannot run."""
    counts: dict[str, str] = {}
    for source, problems in checked.problems.items():
        skipped = f", {problems.skipped} bad rows skipped" if problems.skipped else ""
        counts[source] = f"{len(problems)} problems{skipped}"
    typer.echo("dry run: nothing is loaded or written")
    top_p = config.top_p if config.temperature > 0 else 1.0
    how = "greedy" if config.temperature == 0 else f"T {config.temperature}, top-p {top_p}"
    typer.echo(f"  engine: {config.backend}, dtype {config.dtype}, device {config.device}; {how}, "
               f"<= {config.max_new_tokens} tokens, grader {config.resolved_grader()}, seed {config.seed}")  # fmt: skip
    for runs in checked.per_model:
        where = (
            ""
            if Path(runs[0].model).is_dir() or "/" not in runs[0].model
            else " (from the Hub when the run starts)"
        )
        typer.echo(f"  model {runs[0].model}{where}" + (f" ({runs[0].label})" if runs[0].label else ""))
        for cfg in runs:
            hub = hub_dataset(cfg.benchmark)
            count = counts.get(cfg.benchmark) or (f"from the Hub ({hub}) when the run starts" if hub else "?")
            samples = Path(cfg.output_dir) / EVAL_SAMPLES_FILE
            done = sum(1 for _ in samples.open()) if samples.is_file() else 0
            state = f"resumes ({done} samples there)" if done else "new"
            typer.echo(f"    {cfg.benchmark}: {count}; n = {cfg.n}, k = "
                       f"{','.join(map(str, cfg.resolved_ks()))} -> {cfg.output_dir} ({state})")  # fmt: skip
    end_dry_run(checked.refusals)


def _merge(run_dirs: list[str] | None, output: str, console: Console) -> None:
    """``--merge``: one table and plot from the metrics of finished runs."""
    problem = output_dir_problem(output)
    if problem:
        fail(problem)
    if not run_dirs:
        fail("--merge needs run folders: pacs-rl eval --merge DIR1 DIR2 --output-dir OUT")
    try:
        runs = load_metrics(run_dirs)
    except FileNotFoundError as e:
        fail(e)
    md, png = write_report(runs, output)
    typer.echo(results_table(runs))
    console.print(f"wrote {md} and {png}")


def _print_run_summary(run: dict, console: Console) -> None:
    """Skipped data rows, verdict reasons and where the time went, from one run's metrics."""
    t = run["timing"]
    if run["skipped_rows"]:
        console.print(
            f"[yellow]{run['label']}: skipped {run['skipped_rows']} bad data row(s)[/yellow], "
            f"e.g. {run['skipped_examples'][0]}"
        )
    frac = t["harness_overhead_fraction"]
    console.print(
        f"{run['label']}: {run['num_problems']} problems x n={run['n']}; reasons {run['reasons']}; "
        f"generated {t['samples_generated_this_run']} samples in {t['generation_seconds']:.1f}s "
        f"(reused {t['samples_reused_from_earlier_runs']}); verification {t['verification_seconds']:.2f}s; "
        f"harness overhead {'n/a' if frac is None else f'{100 * frac:.2f}%'} of generation time"
    )
    _print_forms(run, console)
    if run.get("paid_cut_off"):  # the paper's grader pays some cut-off answers: counted beside its verdicts
        console.print(
            f"{run['label']}: {run['paid_cut_off']} of its paid answers were cut off at the token limit (the "
            f"{run.get('grader', '?')} grader pays them; the training grader, sound, would not)",
            soft_wrap=True, markup=False, highlight=False,
        )  # fmt: skip
    reasons = run.get("finish_reasons") or {}
    cut = reasons.get("length", 0) / max(sum(reasons.values()), 1)
    if cut > CUT_OFF_WARN:
        limit = (run.get("sampling") or {}).get("max_new_tokens", "the")
        console.print(
            f"warning: {cut:.0%} of {run['label']}'s samples were cut off at the {limit}-token limit, so its pass@k "
            "measures the limit as much as the model: raise --max-new-tokens",
            style="yellow", soft_wrap=True, markup=False, highlight=False,
        )  # fmt: skip


def _print_forms(run: dict, console: Console) -> None:
    """The paid answers by form, and a warning when more than NOT_PLAIN_WARN of them are not plain."""
    paid = run.get("paid_forms")
    if not paid:
        return
    plain = {"soft_wrap": True, "markup": False, "highlight": False}  # one line, as written
    console.print(f"{run['label']}: paid answers by form: {forms_text(paid)}", **plain)
    share = paid_not_plain(paid)
    if share and share[0] / share[1] > NOT_PLAIN_WARN:
        folder = run.get("_path") or (run.get("settings") or {}).get("output_dir") or "RUN_DIR"
        console.print(
            f"warning: {share[0] / share[1]:.1%} of {run['label']}'s paid answers are neither boxed nor in prose: the grader "
            f"({run.get('grader', '?')}) may pay something other than the task; `pacs-rl audit {folder}` grades "
            "them again with another",
            style="yellow",
            **plain,
        )


def audit_command(
    run_dirs: list[str] = typer.Argument(
        ...,
        help="pacs-rl eval folders (samples.jsonl), pacs-rl train run folders (samples/*.jsonl), or folders holding "
        "them at any depth.",
        metavar="RUN_DIR",
        show_default=False,
    ),
    grader: str = typer.Option(
        None,
        "--grader",
        help="Grader to score the samples with again: sound, paper, strict, paper/strict+rules. Default: sound, or "
        "paper for samples scored by sound.",
        metavar="GRADER",
        show_default=False,
    ),
    questions: str = typer.Option(
        None,
        "--questions",
        help="Data source holding the questions (by problem id) of rows that lack them, when an eval folder's "
        "benchmark cannot be reloaded: a benchmark name, a .jsonl file, 'arithmetic?n=100&seed=0'.",
        metavar="SOURCE",
        show_default=False,
    ),
    json_path: str = typer.Option(
        None,
        "--json",
        help="Where to write the whole result as JSON. Default: audit.json in the first RUN_DIR.",
        metavar="PATH",
        show_default=False,
    ),
    examples: int = typer.Option(3, "--examples", help="Completions shown per change and file.", metavar="N"),
    workers: int = typer.Option(
        0, "--workers", help="Grading processes (0 = in this process; more for many rows).", metavar="N"
    ),
    timeout: float = typer.Option(
        3.0, "--timeout", help="Seconds per answer check at most.", metavar="SECONDS"
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="List the samples files it would read and the graders, without grading or writing.",
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
) -> None:
    """Grade saved samples again with another grader and print what changes.

    For each samples file: its rows, paid as recorded and under --grader, the answers that went paid -> refused
    (by the new reason) and refused -> paid, the recorded paid answers by form (plain, no_box, truncated, several,
    expression, restated), a few completions of each change, and for eval folders pass@k under --grader. The whole
    result goes to --json.
    """
    # the graders' answer tables load with it: kept out of every other command's start
    from pacs_rl.evaluation.audit import (
        AuditError,
        audit,
        default_json_path,
        dry_run_lines,
        plan,
        report_lines,
        write_json,
    )

    if examples < 0 or workers < 0 or timeout <= 0:
        fail(
            f"--examples {examples}, --workers {workers}, --timeout {timeout}: give numbers >= 0 (timeout > 0)"
        )
    target = Path(json_path) if json_path else default_json_path(run_dirs)
    if target.is_dir():
        fail(f"--json {target} is a folder; give a file path such as {target / AUDIT_FILE}")
    try:
        planned = plan(run_dirs, grader)
    except AuditError as e:
        fail(e)
    if dry_run:
        typer.echo("dry run: nothing is graded or written")
        for line in dry_run_lines(planned, questions, target):
            typer.echo(line)
        end_dry_run([])
        return
    try:
        result = audit(
            run_dirs, grader, questions, workers=workers, timeout=timeout, examples=examples,
            progress=not no_progress,
        )  # fmt: skip
    except AuditError as e:
        fail(e)
    for line in report_lines(result):
        typer.echo(line)
    try:
        written = write_json(result, target)
    except OSError as e:
        fail(f"--json {target}: cannot write it ({e.strerror}); give another path")
    typer.echo(f"wrote {written}")
