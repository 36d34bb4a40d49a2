"""``pacs-rl eval``: pass@k of one or more models on one or more benchmarks, or a merged table of finished runs.

The command parses its options, checks them (the output folder, the model names) before torch loads, builds an
:class:`EvalConfig`, calls the library and prints.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from pacs_rl.command import data_option, end_dry_run, fail, note, typed_command
from pacs_rl.data import DataError, hub_dataset, load_problems
from pacs_rl.data.procedural import ARITHMETIC_DIGITS, ARITHMETIC_OPS, parse_query
from pacs_rl.evaluation.report import (
    NOT_PLAIN_WARN,
    forms_text,
    load_metrics,
    paid_not_plain,
    results_table,
    write_report,
)
from pacs_rl.evaluation.samples import SAMPLES_FILE
from pacs_rl.models import ModelError, model_problem
from pacs_rl.run_folder import ProtocolUnknown, recorded_protocol, run_folder
from pacs_rl.settings import DATA_KEYS, output_dir_problem


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


# The options whose default depends on what is evaluated: a training run's own held-out protocol, else these.
DEFAULTS = {"benchmarks": ["math500"], "n": "32", "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 1024,
            "grader": "auto", "output_dir": "eval_runs"}  # fmt: skip
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
        folder / "eval" / f"{how}-n{own['n']}-{own['max_new_tokens']}tok"
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
    model: list[str] = typer.Option(
        None,
        "--model",
        "-m",
        help="Model: bundled alias smollm2-135m, tiny (a tiny random model), Hub id or local folder. Repeat for "
        "several.",
        metavar="NAME",
    ),
    benchmarks: list[str] = typer.Option(
        None,
        "--benchmarks",
        "-b",
        help="Comma-separated and/or repeated: math500, aime24, aime25, amc23, minerva, olympiadbench; a "
        ".jsonl/.json/.parquet file; a Hub dataset id; 'arithmetic?n=100&seed=0'; or "
        "'reasoning_gym:<task>?size=100&seed=0'. The model loads once for all of them.  [default: math500; for "
        "a `pacs-rl train` run's model (RUN/final, or RUN): the run's own held-out task and protocol]",
        metavar="SOURCE",
        show_default=False,
    ),
    n: str = typer.Option(
        None,
        "--n",
        help="Samples per problem: 32; per benchmark math500=32,aime24=512; or 'paper' (32 for MATH-500, 512 "
        "for AIME and AMC).  [default: 32; a run's own held-out task: its 1]",
        metavar="N",
        show_default=False,
    ),
    k: str = typer.Option(
        None, "--k", help="k values, comma-separated (default: powers of two up to n).", metavar="K,..."
    ),
    temperature: float = typer.Option(
        None,
        help="Sampling temperature (paper: 0.6; 0 = greedy).  [default: 0.6; a run's own held-out task: its own]",
        show_default=False,
    ),
    top_p: float = typer.Option(
        None,
        "--top-p",
        help="Nucleus top-p (paper: 0.95).  [default: 0.95; a run's own task: its own]",
        show_default=False,
    ),
    max_new_tokens: int = typer.Option(
        None,
        "--max-new-tokens",
        help="Generated tokens per sample at most.  [default: 1024; a run's own held-out task: its own]",
        show_default=False,
    ),
    grader: str = typer.Option(
        None,
        "--grader",
        help="auto: paper on the paper's benchmarks (its tables compare with the paper's), sound on other data. "
        "sound: one committed final answer, a number where the gold is one, never the question given back. paper: "
        "math-verify as the PACS authors call it. strict: a \\boxed{} answer. paper/strict take +rules: "
        "restatement, multiple_boxed, echo.  [default: auto; a run's own held-out task: the run's grader]",
        show_default=False,
    ),
    backend: str = typer.Option("transformers", help="Sampling engine: transformers or vllm."),
    dtype: str = typer.Option(
        "auto",
        help="auto (bfloat16 on a GPU with bf16, Ampere or newer; float32 otherwise), float32, bfloat16, float16.",
    ),
    batch_size: int = typer.Option(64, "--batch-size", help="Sequences per generate call."),
    threads: int = typer.Option(
        None, "--threads", help="torch CPU threads; 1 is much faster when other jobs share the CPU."
    ),
    device: str = typer.Option("auto", help="transformers device: auto (cuda when available), cpu, cuda:0."),
    tensor_parallel_size: int = typer.Option(
        1, "--tensor-parallel-size", help="vLLM: GPUs per model replica."
    ),
    data_parallel_size: int = typer.Option(
        1, "--data-parallel-size", help="vLLM: model replicas (passed to vllm.LLM as is)."
    ),
    gpu_memory_utilization: float = typer.Option(
        None, "--gpu-memory-utilization", help="vLLM: fraction of GPU memory to use (vLLM's default 0.9)."
    ),
    max_model_len: int = typer.Option(None, "--max-model-len", help="vLLM: context length per sequence."),
    vllm_engine_kwargs: str = typer.Option(
        None,
        "--vllm-engine-kwargs",
        help="vLLM: further vllm.LLM arguments as JSON: '{\"enforce_eager\": true}'.",
    ),
    limit: int = typer.Option(None, help="Only the first LIMIT problems (file order) of each benchmark."),
    seed: int = typer.Option(0, help="Sampling seed."),
    output_dir: str = typer.Option(
        None,
        "--output-dir",
        "-o",
        help="Output folder; rerunning the same command into it resumes it.  [default: eval_runs; a run's own "
        "held-out task: RUN/eval/<protocol>]",
        metavar="DIR",
        show_default=False,
    ),
    split: str = data_option("split"),
    problem_field: str = data_option("problem_field"),
    answer_field: str = data_option("answer_field"),
    prompt_field: str = data_option("prompt_field"),
    instruction: str = data_option("instruction"),
    system_prompt: str = data_option("system_prompt"),
    skip_bad_rows: bool = data_option("skip_bad_rows"),
    chat_template_kwargs: str = typer.Option(
        None,
        "--chat-template-kwargs",
        help="Chat-template variables as JSON: '{\"enable_thinking\": false}'.",
        metavar="JSON",
    ),
    verify_workers: int = typer.Option(1, "--verify-workers", help="Verifier processes (0 = in-process)."),
    plain_prompt: bool = typer.Option(
        False, "--plain-prompt", help="Plain prompt for models without chat template."
    ),
    label: list[str] = typer.Option(None, "--label", help="Row name in the table, one per --model."),
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
    console = Console(stderr=True)
    if merge:
        _merge(run_dirs, output_dir or DEFAULTS["output_dir"], console)
        return
    if run_dirs:
        fail(f"unexpected arguments {run_dirs}; to merge finished runs add --merge")
    if not model:
        fail("give --model (several allowed), or --merge with run folders")
    given = {"benchmarks": benchmarks, "n": n, "temperature": temperature, "top_p": top_p,
             "max_new_tokens": max_new_tokens, "grader": grader, "output_dir": output_dir}  # fmt: skip
    task = resolve_task(list(model), given)
    _announce(task, console)
    options = RunOptions(
        k=k, limit=limit, seed=seed, chat_template_kwargs=chat_template_kwargs, vllm_engine_kwargs=vllm_engine_kwargs,
        data=dict(zip(DATA_KEYS, (split, problem_field, answer_field, prompt_field, instruction, system_prompt,
                                  skip_bad_rows), strict=True)),
        engine={"backend": backend, "dtype": dtype, "batch_size": batch_size, "device": device,
                "num_threads": threads, "verify_workers": verify_workers, "plain_prompt": plain_prompt,
                "tensor_parallel_size": tensor_parallel_size, "data_parallel_size": data_parallel_size,
                "gpu_memory_utilization": gpu_memory_utilization, "max_model_len": max_model_len,
                "progress": not no_progress},
    )  # fmt: skip
    config, n_by_bench = eval_config(task, options, hub=not dry_run)  # a plan may be made away from the Hub
    labels = list(label) if label else None
    if dry_run:
        _dry_run(config, task.models, labels, task.sources, n_by_bench)
        return
    results = _run_evals(config, task, labels, n_by_bench, no_progress)
    typer.echo(results_table(results))
    for r in results:
        _print_run_summary(r, console)
    console.print(f"results in {task.output_dir}")


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
        models = [str(folder / "final") if Path(models[0]) == folder else models[0]]
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


@dataclass
class RunOptions:
    """The options of `pacs-rl eval` that the task does not resolve, as given: --k and the JSON options still to
    be parsed, the limit, seed and data settings (None where not given) and the EvalConfig fields that pass
    through unchanged (``engine``: engine, device, vLLM, verifier and progress settings)."""

    k: str | None
    limit: int | None
    seed: int
    chat_template_kwargs: str | None
    vllm_engine_kwargs: str | None
    data: dict[str, Any]
    engine: dict[str, Any]


def eval_config(task: EvalTask, options: RunOptions, hub: bool = True):
    """The EvalConfig of the call's first run (plan_evals derives one per model and benchmark) and the samples per
    benchmark, after checking every model name (on the Hub too when ``hub``) and --n. A training run's own prompt,
    fields, limit and seed apply where the call gives none. The runner is imported here, when a run is planned:
    it imports numpy and the data loaders, which `pacs-rl --help` need not pay for."""
    from pacs_rl.evaluation.runner import EvalConfig, parse_samples

    for name in task.models:
        problem = model_problem(name, hub=hub)
        if problem:
            fail(problem)
    try:
        n_default, n_by_bench = parse_samples(task.n, task.sources)
    except ValueError as e:
        fail(e)
    data = dict(options.data)
    for key, value in task.own.get("data", {}).items():  # the run's own prompt and fields, unless given here
        data[key] = value if data.get(key) is None else data[key]
    limit, seed = options.limit, options.seed
    if task.own.get("limit") is not None and limit is None:
        limit = task.own["limit"]
    if task.own and seed == 0:
        seed = task.own["seed"]
    config = EvalConfig(
        model=task.models[0], benchmark=task.sources[0], output_dir=task.output_dir, n=n_default,
        ks=_parse_ks(options.k), temperature=task.temperature, top_p=task.top_p,
        max_new_tokens=task.max_new_tokens, grader=task.grader, limit=limit, seed=seed,
        chat_template_kwargs=_parse_json(options.chat_template_kwargs, "--chat-template-kwargs"),
        vllm_engine_kwargs=_parse_json(options.vllm_engine_kwargs, "--vllm-engine-kwargs"),
        **options.engine, **{key: value for key, value in data.items() if value is not None},
    )  # fmt: skip
    return config, n_by_bench


def _run_evals(
    config, task: EvalTask, labels: list[str] | None, n: dict[str, int], no_progress: bool
) -> list:
    """Run every evaluation of the call and return their metrics; a setting or data the runner refuses fails with
    its message, and Ctrl-C says where the samples drawn so far are kept and how to go on."""
    from pacs_rl.evaluation.runner import ResumeMismatch, run_evals

    if no_progress:  # transformers' own bars too ("Loading weights")
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    try:
        return run_evals(config, task.models, labels=labels, benchmarks=task.sources, n=n)
    except (DataError, ModelError, ResumeMismatch, ValueError) as e:
        fail(e)
    except KeyboardInterrupt:
        typer.echo(
            f"interrupted: the samples drawn so far are kept in {task.output_dir} (samples.jsonl); go on with: "
            f"{typed_command(task.output_dir)}",
            err=True,
        )
        raise typer.Exit(130) from None


def _dry_run(config, models: list[str], labels, sources: list[str], n: dict[str, int]) -> None:
    """``--dry-run``: every run of the call, checked, without loading a model or reading the Hub; exit 1 with
    every refusal when something cannot run."""
    from pacs_rl.evaluation.runner import plan_evals

    refusals = []
    if config.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        refusals.append(
            "--backend vllm needs vLLM, which is not installed: pip install 'pacs-rl[vllm]' (on a CPU, vLLM's CPU build: docs/SCALING.md)"
        )
    try:
        per_model = plan_evals(config, models, labels, sources, n)
    except ValueError as e:
        fail(e)
    counts: dict[str, str] = {}
    for source in sources:
        hub = hub_dataset(source)
        if hub:
            counts[source] = f"from the Hub ({hub}) when the run starts"
            continue
        try:  # local: read now, as the run would
            problems = load_problems(source, split=config.split, limit=config.limit, problem_field=config.problem_field,
                                     answer_field=config.answer_field, prompt_field=config.prompt_field,
                                     on_error="skip" if config.skip_bad_rows else "raise")  # fmt: skip
            skipped = f", {problems.skipped} bad rows skipped" if problems.skipped else ""
            counts[source] = f"{len(problems)} problems{skipped}"
        except (DataError, ValueError) as e:
            refusals.append(f"{source}: {e}")
    typer.echo("dry run: nothing is loaded or written")
    top_p = config.top_p if config.temperature > 0 else 1.0
    how = "greedy" if config.temperature == 0 else f"T {config.temperature}, top-p {top_p}"
    typer.echo(f"  engine: {config.backend}, dtype {config.dtype}, device {config.device}; {how}, "
               f"<= {config.max_new_tokens} tokens, grader {config.resolved_grader()}, seed {config.seed}")  # fmt: skip
    for runs in per_model:
        where = (
            ""
            if Path(runs[0].model).is_dir() or "/" not in runs[0].model
            else " (from the Hub when the run starts)"
        )
        typer.echo(f"  model {runs[0].model}{where}" + (f" ({runs[0].label})" if runs[0].label else ""))
        for cfg in runs:
            samples = Path(cfg.output_dir) / SAMPLES_FILE
            done = sum(1 for _ in samples.open()) if samples.is_file() else 0
            state = f"resumes ({done} samples there)" if done else "new"
            typer.echo(f"    {cfg.benchmark}: {counts.get(cfg.benchmark, '?')}; n = {cfg.n}, k = "
                       f"{','.join(map(str, cfg.resolved_ks()))} -> {cfg.output_dir} ({state})")  # fmt: skip
    end_dry_run(refusals)


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
            f"warning: {share[0] / share[1]:.1%} of {run['label']}'s paid answers are not plain: the grader "
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
        fail(f"--json {target} is a folder; give a file path such as {target / 'audit.json'}")
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
