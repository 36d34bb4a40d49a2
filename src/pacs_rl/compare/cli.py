"""``pacs-rl compare``: parse the options, call :func:`pacs_rl.compare.execute.run_comparison`, print the
report. The comparison library (torch, TRL) is imported when the command runs, so ``pacs-rl --help`` stays
fast; the method list in the help is filled in from the loss registry only when the help is shown."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from pacs_rl.compare.plan import (
    PRESETS,
    CompareError,
    build_plan,
    load_settings_file,
    parse_sweep,
    resolve_settings,
    write_or_check_manifest,
)
from pacs_rl.compare.report import write_comparison_report
from pacs_rl.data import DataError
from pacs_rl.evaluation.runner import ResumeMismatch


def _split(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def compare_command(
    methods: str = typer.Option(
        None,
        "--methods",
        help="Comma-separated methods: {methods} (pacs_no_weight = PACS with pacs_weighted=False). "
        "Default: from --config / --preset, else pacs,grpo.",
    ),
    seeds: int = typer.Option(None, "--seeds", help="Number of seeds per method (seeds 0..N-1)."),
    config: str = typer.Option(
        None, "--config", help="YAML/JSON settings file (model, methods, seeds, sweeps, train, eval)."
    ),
    preset: str = typer.Option(None, "--preset", help=f"Named settings: {', '.join(PRESETS)}."),
    sweep: list[str] = typer.Option(
        None,
        "--sweep",
        help="FIELD=V1,V2,...: one variant per value of a PACSConfig field, e.g. pacs_beta=0.1,0.5,1,2,10 or "
        "pacs_score=rloo,grpo,dr_grpo. Repeatable (each sweep is one-at-a-time, as in the paper).",
    ),
    benchmarks: str = typer.Option(
        None,
        "--benchmarks",
        help="Comma-separated evaluation benchmarks (math500, aime24, a .jsonl file, "
        "'arithmetic?n=40&split=test&seed=1', ...). Default: from the settings.",
    ),
    model: str = typer.Option(None, "--model", help="Base model (bundled alias, Hub id, folder, or 'tiny')."),
    output: str = typer.Option(
        "compare_runs", "--output", "-o", help="Comparison folder (resumed if it exists)."
    ),
    steps: int = typer.Option(None, "--steps", help="Optimizer steps per run (train.max_steps)."),
    n: int = typer.Option(None, "--n", help="Samples per problem in evaluation (eval.n)."),
    only: str = typer.Option(
        None,
        "--only",
        help="Run only these phases: comma-separated glob patterns over run keys (grpo/seed0, 'pacs*/*') and "
        "'base'. Several processes with different --only can share one --output folder.",
    ),
    report_only: bool = typer.Option(
        False, "--report-only", help="Only rewrite report.md and the PNGs from what is finished."
    ),
) -> None:
    """Train several methods from one base model under one budget, evaluate all with one pass@k protocol,
    and write report.md + PNGs into --output. Rerun the same command to resume after an interruption."""
    console = Console(stderr=True)
    try:
        cli: dict = {
            "methods": _split(methods),
            "seeds": list(range(seeds)) if seeds else None,
            "model": model,
            "sweeps": dict(parse_sweep(s) for s in sweep) if sweep else None,
            "train": {"max_steps": steps} if steps else None,
            "eval": {
                **({"benchmarks": _split(benchmarks)} if benchmarks else {}),
                **({"n": n} if n else {}),
            }
            or None,
        }
        path = _compare(config, preset, cli, Path(output), _split(only), report_only, console)
    except CompareError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    typer.echo(path.read_text())


def _compare(config, preset, cli, output: Path, only, report_only: bool, console) -> Path:
    """Resolve the settings and run (or only report) the comparison; return the report's path."""
    from pacs_rl.compare import execute  # torch, TRL

    settings = resolve_settings(preset=preset, config=load_settings_file(config) if config else None, cli=cli)
    if report_only:
        specs = build_plan(settings)
        write_or_check_manifest(output, settings, specs)
        path = write_comparison_report(output, settings, specs)
        console.print(f"report: {path}")
        return path
    try:
        result = execute.run_comparison(settings, output, only=only, console=console)
    except (ResumeMismatch, DataError) as e:  # an eval folder drawn with other settings, bad data
        raise CompareError(str(e)) from None
    return Path(result["report"])
