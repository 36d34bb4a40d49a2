"""``pacs-rl eval``: pass@k of one or more models on one or more benchmarks, or a merged table of finished runs.

The command parses its options, builds an :class:`EvalConfig`, calls the library and prints.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console

from pacs_rl.data import benchmark_name
from pacs_rl.evaluation.report import load_metrics, results_table, write_report

# The paper's samples per problem (§4.1): 32 for MATH-500, 512 for the small AIME and AMC sets.
PAPER_N = {"math500": 32, "aime24": 512, "aime25": 512, "amc23": 512}


def _parse_ks(text: str | None) -> list[int] | None:
    if text is None or not text.strip():
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise typer.BadParameter(
            f"--k takes comma-separated integers such as 1,2,4,8; got {text!r}"
        ) from None


def split_benchmarks(values: list[str]) -> list[str]:
    """``--benchmark`` values (repeatable, each comma-separated) -> sources. A piece that starts with a digit
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


def parse_n(text: str, benchmarks: list[str]) -> tuple[int, dict[str, int]]:
    """``--n``: ``32``; ``math500=32,aime24=512``; ``paper`` (32 for MATH-500, 512 for AIME and AMC); or a
    mix (``16,aime24=512``). Returns (n for benchmarks not named, n by benchmark)."""
    default, by_bench = 32, {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        key, sep, value = item.rpartition("=")
        try:
            if item == "paper":
                names = {benchmark_name(b) for b in benchmarks}
                by_bench.update({k: v for k, v in PAPER_N.items() if k in names})
            elif sep:
                by_bench[key.strip()] = int(value)
            else:
                default = int(item)
        except ValueError:
            raise typer.BadParameter(
                f"--n takes a number (32), benchmark=number pairs (math500=32,aime24=512) or 'paper'; got {text!r}"
            ) from None
    return default, by_bench


def _parse_json(text: str | None, option: str) -> dict | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise typer.BadParameter(
            f"{option} takes a JSON object such as '{{\"enable_thinking\": false}}': {e}"
        ) from None
    if not isinstance(value, dict):
        raise typer.BadParameter(f"{option} takes a JSON object, got {type(value).__name__}")
    return value


def eval_command(
    run_dirs: list[str] = typer.Argument(
        None,
        help="With --merge: finished run folders (or folders of runs) to merge into one table.",
        show_default=False,
    ),
    model: list[str] = typer.Option(
        None,
        "--model",
        "-m",
        help="Model (bundled alias smollm2-135m, Hub id, local folder). Repeat for several.",
    ),
    benchmark: list[str] = typer.Option(
        ["math500"],
        "--benchmark",
        "-b",
        help="Comma-separated and/or repeated: math500, aime24, aime25, amc23, minerva, olympiadbench; a "
        ".jsonl/.json/.parquet file; a Hub dataset id; 'arithmetic?n=100&seed=0'; or "
        "'reasoning_gym:<task>?size=100&seed=0'. The model loads once for all of them.",
    ),
    n: str = typer.Option(
        "32",
        "--n",
        help="Samples per problem: 32; per benchmark math500=32,aime24=512; or 'paper' (32 for MATH-500, 512 "
        "for AIME and AMC).",
    ),
    k: str = typer.Option(None, "--k", help="k values, comma-separated (default: powers of two up to n)."),
    temperature: float = typer.Option(0.6, help="Sampling temperature (paper: 0.6)."),
    top_p: float = typer.Option(0.95, "--top-p", help="Nucleus top-p (paper: 0.95)."),
    max_new_tokens: int = typer.Option(1024, "--max-new-tokens", help="Generated tokens per sample at most."),
    grader: str = typer.Option(
        "paper",
        "--grader",
        help="paper (math-verify as the PACS authors call it), strict (a \\boxed{} answer), or either with "
        "+rules: restatement, multiple_boxed, echo (e.g. paper+restatement).",
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
    limit: int = typer.Option(None, help="Only the first LIMIT problems (file order) of each benchmark."),
    seed: int = typer.Option(0, help="Sampling seed."),
    split: str = typer.Option(None, help="Dataset split (Hub datasets, procedural tasks)."),
    output: str = typer.Option("eval_runs", "--output", "-o", help="Output folder (resumed when it exists)."),
    problem_field: str = typer.Option(
        None, "--problem-field", help="Field with the problem text (default problem)."
    ),
    answer_field: str = typer.Option(None, "--answer-field", help="Field with the answer (default answer)."),
    prompt_field: str = typer.Option(
        None, "--prompt-field", help="Field that already holds the prompt as chat messages (used as is)."
    ),
    instruction: str = typer.Option(
        None,
        "--instruction",
        help="Appended to each problem in the user turn (default: the paper's; '' = none).",
    ),
    system_prompt: str = typer.Option(None, "--system-prompt", help="A system turn (default: none)."),
    chat_template_kwargs: str = typer.Option(
        None,
        "--chat-template-kwargs",
        help="Chat-template variables as JSON: '{\"enable_thinking\": false}'.",
    ),
    on_error: str = typer.Option(
        "skip",
        "--on-error",
        help="Bad data rows: skip (the default, as in pacs-rl train: counted and reported) or raise.",
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

    Writes samples.jsonl, metrics.json, results.md and passk.png into --output; rerun the same command to resume after a crash. Several --benchmark values (math500,aime24,amc23) or --model options run into --output/<model>/<benchmark> with the model loaded once, and one table laid out like the paper's Tables 2 and 3; --merge DIR... merges finished runs.
    """
    console = Console(stderr=True)
    if merge:
        _merge(run_dirs, output, console)
        return
    if run_dirs:
        raise typer.BadParameter(f"unexpected arguments {run_dirs}; to merge finished runs add --merge")
    if not model:
        raise typer.BadParameter("give --model (several allowed), or --merge with run folders")
    benchmarks = split_benchmarks(benchmark)
    if not benchmarks:
        raise typer.BadParameter("give at least one --benchmark")
    n_default, n_by_bench = parse_n(n, benchmarks)
    # The runner imports numpy and the data loaders (torch and the verifier load when sampling starts):
    # imported here, when a run starts, so that `pacs-rl --help` does not pay for them.
    from pacs_rl.data import DataError
    from pacs_rl.evaluation.runner import EvalConfig, ResumeMismatch, run_evals
    from pacs_rl.models import ModelError

    config = EvalConfig(
        model=model[0],
        benchmark=benchmarks[0],
        output_dir=output,
        n=n_default,
        ks=_parse_ks(k),
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        backend=backend,
        dtype=dtype,
        batch_size=batch_size,
        device=device,
        num_threads=threads,
        limit=limit,
        seed=seed,
        split=split,
        problem_field=problem_field,
        answer_field=answer_field,
        prompt_field=prompt_field,
        on_error=on_error,
        grader=grader,
        verify_workers=verify_workers,
        plain_prompt=plain_prompt,
        system_prompt=system_prompt,
        chat_template_kwargs=_parse_json(chat_template_kwargs, "--chat-template-kwargs"),
        tensor_parallel_size=tensor_parallel_size,
        data_parallel_size=data_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        progress=not no_progress,
    )
    if instruction is not None:
        config.instruction = instruction
    try:
        results = run_evals(
            config, list(model), labels=list(label) if label else None, benchmarks=benchmarks, n=n_by_bench
        )
    except (DataError, ModelError, ResumeMismatch, ValueError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    typer.echo(results_table(results))
    for r in results:
        _print_run_summary(r, console)
    console.print(f"results in {output}")


def _merge(run_dirs: list[str] | None, output: str, console: Console) -> None:
    """``--merge``: one table and plot from the metrics of finished runs."""
    if not run_dirs:
        raise typer.BadParameter("--merge needs run folders: pacs-rl eval --merge DIR1 DIR2 --output OUT")
    try:
        runs = load_metrics(run_dirs)
    except FileNotFoundError as e:
        raise typer.BadParameter(str(e)) from None
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
