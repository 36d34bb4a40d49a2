"""``pacs-rl compare``: the paper's experiments in miniature.

Trains each method (and each sweep value) from one base model on the same data, prompts, seeds and
rollout budget, evaluates every final model and the base model with one pass@k protocol, and writes a
paper-style report (tables with mean ± SE over seeds, curves, training dynamics, sweep heatmaps, the PACS
critic's accuracy/calibration, paired tests). Resumable; a manifest pins the settings of the folder.

    from pacs_rl.compare import resolve_settings, run_comparison
    run_comparison(resolve_settings(preset="smoke"), "runs/smoke")

Heavy libraries are imported inside functions so ``pacs-rl --help`` stays fast.
"""

from __future__ import annotations

import typer

from pacs_rl.compare.plan import (
    METHODS,
    PRESETS,
    CompareError,
    ManifestMismatch,
    RunSpec,
    build_plan,
    parse_sweep,
    resolve_settings,
)


def run_comparison(settings, out, **kwargs):
    """See :func:`pacs_rl.compare.execute.run_comparison`."""
    from pacs_rl.compare.execute import run_comparison as _run

    return _run(settings, out, **kwargs)


def compare_command(
    methods: str = typer.Option(
        None,
        "--methods",
        help=f"Comma-separated methods: {', '.join(METHODS)} (pacs_no_weight = PACS with pacs_weighted=False). "
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
    from rich.console import Console

    console = Console(stderr=True)
    try:
        from pacs_rl.compare.plan import load_settings_file

        file_settings = load_settings_file(config) if config else None
        cli: dict = {
            "methods": [m.strip() for m in methods.split(",") if m.strip()] if methods else None,
            "seeds": list(range(seeds)) if seeds else None,
            "model": model,
            "sweeps": dict(parse_sweep(s) for s in sweep) if sweep else None,
            "train": {"max_steps": steps} if steps else None,
            "eval": {
                **(
                    {"benchmarks": [b.strip() for b in benchmarks.split(",") if b.strip()]}
                    if benchmarks
                    else {}
                ),
                **({"n": n} if n else {}),
            }
            or None,
        }
        settings = resolve_settings(preset=preset, config=file_settings, cli=cli)
        if report_only:
            from pathlib import Path

            from pacs_rl.compare.report import write_comparison_report

            plan = build_plan(settings)
            from pacs_rl.compare.plan import write_or_check_manifest

            write_or_check_manifest(Path(output), settings, plan)
            console.print(f"report: {write_comparison_report(Path(output), settings, plan)}")
            return
        patterns = [p.strip() for p in only.split(",") if p.strip()] if only else None
        result = run_comparison(settings, output, only=patterns, console=console)
    except CompareError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    except Exception as e:  # the runner's refusal of an eval folder drawn with other settings, bad data
        if type(e).__name__ not in ("ResumeMismatch", "DataError"):
            raise
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    typer.echo((__import__("pathlib").Path(result["report"])).read_text())


__all__ = [
    "METHODS",
    "PRESETS",
    "CompareError",
    "ManifestMismatch",
    "RunSpec",
    "build_plan",
    "compare_command",
    "parse_sweep",
    "resolve_settings",
    "run_comparison",
]
