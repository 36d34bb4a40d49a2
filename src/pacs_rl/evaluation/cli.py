"""``pacs-rl eval``: pass@k of one or more models on a benchmark, or a merged table of finished runs.

The command parses its options, builds an :class:`EvalConfig`, calls the library and prints.
"""

from __future__ import annotations

import typer
from rich.console import Console

from pacs_rl.evaluation.report import load_metrics, results_table, write_report


def _parse_ks(text: str | None) -> list[int] | None:
    if text is None or not text.strip():
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise typer.BadParameter(
            f"--k takes comma-separated integers such as 1,2,4,8; got {text!r}"
        ) from None


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
    benchmark: str = typer.Option(
        "math500",
        "--benchmark",
        "-b",
        help="math500, aime24, aime25, amc23, minerva, olympiadbench; a .jsonl/.json/.parquet file; a Hub "
        "dataset id; 'arithmetic?n=100&seed=0'; or 'reasoning_gym:<task>?size=100&seed=0'.",
    ),
    n: int = typer.Option(32, "--n", help="Samples per problem (paper: 32 for MATH-500, 512 for AIME/AMC)."),
    k: str = typer.Option(None, "--k", help="k values, comma-separated (default: powers of two up to n)."),
    temperature: float = typer.Option(0.6, help="Sampling temperature (paper: 0.6)."),
    top_p: float = typer.Option(0.95, "--top-p", help="Nucleus top-p (paper: 0.95)."),
    max_new_tokens: int = typer.Option(1024, "--max-new-tokens", help="Generated tokens per sample at most."),
    backend: str = typer.Option("transformers", help="Sampling engine: transformers or vllm."),
    dtype: str = typer.Option("float32", help="Model dtype: float32 (CPU), bfloat16, float16."),
    batch_size: int = typer.Option(64, "--batch-size", help="Sequences per generate call."),
    threads: int = typer.Option(
        None, "--threads", help="torch CPU threads; 1 is much faster when other jobs share the CPU."
    ),
    device: str = typer.Option("auto", help="transformers device: auto (cuda when available), cpu, cuda:0."),
    limit: int = typer.Option(None, help="Only the first LIMIT problems (file order)."),
    seed: int = typer.Option(0, help="Sampling seed."),
    split: str = typer.Option(None, help="Dataset split (Hub datasets, procedural tasks)."),
    output: str = typer.Option("eval_runs", "--output", "-o", help="Output folder (resumed when it exists)."),
    problem_field: str = typer.Option(
        None, "--problem-field", help="Field with the problem text (default problem)."
    ),
    answer_field: str = typer.Option(None, "--answer-field", help="Field with the answer (default answer)."),
    strict: bool = typer.Option(False, "--strict", help="Only a final \\boxed{} answer counts."),
    on_error: str = typer.Option(
        "skip", "--on-error", help="Bad data rows: skip (counted, reported) or raise."
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
    """Sample N completions per problem with the paper's prompt, verify them, and report pass@k.

    Writes samples.jsonl, metrics.json, results.md and passk.png into --output; rerun the same command to resume after a crash. Several --model options evaluate each into --output/<model> and merge the table; --merge DIR... merges finished runs.
    """
    console = Console(stderr=True)
    if merge:
        _merge(run_dirs, output, console)
        return
    if run_dirs:
        raise typer.BadParameter(f"unexpected arguments {run_dirs}; to merge finished runs add --merge")
    if not model:
        raise typer.BadParameter("give --model (several allowed), or --merge with run folders")
    # The runner imports numpy and the data loaders (torch and the verifier load when sampling starts):
    # imported here, when a run starts, so that `pacs-rl --help` does not pay for them.
    from pacs_rl.data import DataError
    from pacs_rl.evaluation.runner import EvalConfig, ResumeMismatch, run_evals

    config = EvalConfig(
        model=model[0],
        benchmark=benchmark,
        output_dir=output,
        n=n,
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
        on_error=on_error,
        strict=strict,
        verify_workers=verify_workers,
        plain_prompt=plain_prompt,
        progress=not no_progress,
    )
    try:
        config.resolved_ks()
        results = run_evals(config, list(model), labels=list(label) if label else None)
    except (DataError, ResumeMismatch, ValueError) as e:
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
