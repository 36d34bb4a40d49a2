"""``pacs-rl compare``: parse the options, check the settings (names, types, the output folder, the model, the
training data) before torch loads, call :func:`pacs_rl.compare.execute.run_comparison`, print the report. The
method list in the help is filled in from names that need no torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console

from pacs_rl.command import Command, CommandGroup, end_dry_run, fail, note, show_library_notes, typed_command
from pacs_rl.compare.methods import method_label, method_names
from pacs_rl.compare.paired.cli import paired_command
from pacs_rl.compare.plan import (
    EVAL_FIELDS,
    PRESETS,
    TOP_FIELDS,
    TRAIN_DONE_FILE,
    CompareError,
    build_plan,
    check_training_data,
    eval_data_settings,
    eval_dir_of,
    grader_note,
    load_settings_file,
    parse_sweep,
    resolve_settings,
    write_or_check_manifest,
)
from pacs_rl.data import DataError
from pacs_rl.evaluation.runner import ResumeMismatch, parse_samples
from pacs_rl.preflight import Preflight, missing_packages
from pacs_rl.run_folder import EVAL_METRICS_FILE
from pacs_rl.settings.data import DataSettings
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training.schema import loss_type_names


def _help(fields: dict, name: str, more: str = "") -> str:
    """An option's help: its setting's declaration's (compare/plan.py), and what the option adds."""
    return f"{fields[name].metadata['help']} {more}".strip()


def _split(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _seeds(text: str | None) -> list[int] | None:
    try:
        return [int(s) for s in _split(text)] if text else None
    except ValueError:
        fail(f"--seed {text!r}: give whole numbers, comma-separated (--seed 0,1,2)")


def compare_command(
    ctx: typer.Context,
    methods: str = typer.Option(
        None,
        "--methods",
        help="Comma-separated methods: {methods} (each as the PACS authors ran it: pacs unclipped, grpo as verl "
        "ran it; pacs_clip = PACS with gradient clip 1.0; compare/methods.py). Default: from --config / --preset, "
        "else pacs,grpo.",
        metavar="NAME,...",
    ),
    seed: str = typer.Option(
        None,
        "--seed",
        help=_help(TOP_FIELDS, "seeds", "Comma-separated; default: from the settings, else 0."),
        metavar="SEED,...",
    ),
    config: str = typer.Option(
        None,
        "--config",
        "-c",
        help="YAML/JSON settings file (model, methods, seeds, sweeps, train, eval).",
        metavar="FILE",
    ),
    preset: str = typer.Option(
        None,
        "--preset",
        help=f"Named settings: {', '.join(PRESETS)}.",
        metavar="NAME",
    ),
    sweep: list[str] = typer.Option(
        None,
        "--sweep",
        help="FIELD=V1,V2,...: one variant per value of a PACSConfig field, e.g. pacs_beta=0.1,0.5,1,2,10 or "
        "pacs_score=rloo,grpo,dr_grpo. Repeatable (each sweep is one-at-a-time, as in the paper).",
        metavar="FIELD=V1,...",
    ),
    model: str = typer.Option(
        None,
        "--model",
        "-m",
        help=_help(TOP_FIELDS, "model", "[default: smollm2-135m]"),
        metavar="NAME",
    ),
    dataset: str = typer.Option(
        None,
        "--dataset",
        "-d",
        help="Training problems (train.dataset), as `pacs-rl train --dataset` takes them.",
        metavar="SOURCE",
    ),
    benchmarks: str = typer.Option(
        None,
        "--benchmarks",
        "-b",
        help=_help(EVAL_FIELDS, "benchmarks", "Comma-separated; default: from the settings."),
        metavar="SOURCE,...",
    ),
    output_dir: str = typer.Option(
        "compare_runs", "--output-dir", "-o", help="Comparison folder (resumed if it exists).", metavar="DIR"
    ),
    max_steps: int = typer.Option(
        None, "--max-steps", help="Optimizer steps per run (train.max_steps).", metavar="N"
    ),
    n: str = typer.Option(
        None,
        "--n",
        help=_help(EVAL_FIELDS, "n"),
        metavar="N",
    ),
    k: str = typer.Option(
        None,
        "--k",
        help=_help(EVAL_FIELDS, "ks", "Comma-separated; a --n given here drops the settings' ks above it."),
        metavar="K,...",
    ),
    only: str = typer.Option(
        None,
        "--only",
        help="Run only these phases: comma-separated glob patterns over run keys (grpo/seed0, 'pacs*/*') and "
        "'base'. Several processes with different --only can share one --output-dir.",
        metavar="PATTERN,...",
    ),
    report_only: bool = typer.Option(
        False, "--report-only", help="Only rewrite report.md and the PNGs from what is finished."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Check every setting and print the plan (methods, seeds, runs, budget, evaluation, what is done) "
        "without loading a model or writing anything.",
    ),
    no_progress: bool = typer.Option(
        False, "--no-progress", help="No progress bars: one line per training step, none while evaluating."
    ),
) -> None:
    """Train several methods from one base model under one budget, evaluate all with one pass@k protocol,
    and write report.md + PNGs into --output-dir. Rerun the same command to resume after an interruption.
    `pacs-rl compare paired` adds seed pairs of PACS and its baselines to one record instead.
    Older spellings still work: --output, --steps, --seeds N (seeds 0..N-1), --preset pacs-vs-grpo."""
    if ctx.invoked_subcommand is not None:
        given = [p.opts[0] for p in ctx.command.params if ctx.params.get(p.name) not in (p.default, None, ())]
        if given:
            fail(f"{', '.join(given)}: an option of the planned comparison; `pacs-rl compare {ctx.invoked_subcommand}` "
                 "takes its own options after its name")  # fmt: skip
        return
    console = Console(stderr=True)
    output = Path(output_dir)
    given = CompareOptions(methods=methods, seed=seed, model=model, sweep=sweep, max_steps=max_steps,
                           dataset=dataset, benchmarks=benchmarks, n=n, k=k)  # fmt: skip
    try:
        settings = given.settings(preset, config)
        if dry_run:
            _dry_run(settings, output)
            return
        path = _compare(settings, output, _split(only), report_only, console, not no_progress)
    except SettingsError as e:  # CompareError included
        fail(e)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: what is kept and how to go on
        _interrupted(e, output)
    typer.echo(path.read_text())


@dataclass
class CompareOptions:
    """The options of `pacs-rl compare` that override the settings file and the preset, as given (None where not
    given)."""

    methods: str | None
    seed: str | None
    model: str | None
    sweep: list[str] | None
    max_steps: int | None
    dataset: str | None
    benchmarks: str | None
    n: str | None
    k: str | None

    def settings(self, preset: str | None, config: str | None) -> dict:
        """The comparison's complete, checked settings: defaults, then ``preset``, then the settings file
        ``config`` (a note per older key spelling in it), then these options. Raises SettingsError naming a
        setting that cannot be used."""
        notes: list[str] = []
        file_settings = load_settings_file(config, notes) if config else None
        for message in notes:
            note(message)
        cli = self.overrides()
        if self.n and not self.k:  # the settings' ks that a smaller n given here cannot have go
            cli["eval"]["ks"] = _ks_within(preset, file_settings, cli["eval"]["n"])
        return resolve_settings(preset=preset, config=file_settings, cli=cli)

    def overrides(self) -> dict:
        """These options as a settings dict (resolve_settings' ``cli``), None for a section not given."""
        train = {"max_steps": self.max_steps, "dataset": self.dataset}
        n = self.n
        return {
            "methods": _split(self.methods),
            "seeds": _seeds(self.seed),
            "model": self.model,
            "sweeps": dict(parse_sweep(s) for s in self.sweep) if self.sweep else None,
            "train": {key: value for key, value in train.items() if value is not None} or None,
            "eval": {
                **({"benchmarks": _split(self.benchmarks)} if self.benchmarks else {}),
                **({"n": int(n) if n.strip().isdigit() else n} if n else {}),
                **({"ks": _ks(self.k)} if self.k else {}),
            }
            or None,
        }


def _interrupted(e: KeyboardInterrupt, output: Path) -> NoReturn:
    """Ctrl-C or SIGTERM: say what is kept in ``output`` and how to go on, and exit 130."""
    kept = f" ({e.kept()})" if hasattr(e, "kept") else ""
    typer.echo(
        f"interrupted: the finished runs and evaluations are kept in {output}, a half-done training run goes on "
        f"from its last checkpoint{kept}; go on with: {typed_command(str(output))}",
        err=True,
    )
    raise typer.Exit(130) from None


def _ks(text: str) -> list[int]:
    try:
        ks = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        fail(f"--k takes comma-separated whole numbers such as 1,2,4; got {text!r}")
    if not ks:
        fail(f"--k {text!r}: give at least one k")
    return ks


def _ks_within(preset: str | None, file_settings: dict | None, n) -> list[int] | None:
    """The ks the preset or settings file sets, without those above ``n`` (--n given without --k); None (powers of
    two up to n) when they set none or none is left."""
    ks = ((file_settings or {}).get("eval") or {}).get("ks") or (
        PRESETS.get(preset or "", {}).get("eval") or {}
    ).get("ks")
    if not ks:
        return None
    try:
        default, by_bench = parse_samples(str(n), [])
    except ValueError:
        return ks  # resolve_settings names the mistake
    smallest = min([default, *by_bench.values()])
    return [k for k in ks if int(k) <= smallest] or None


def preflight(settings: dict, output: Path, network: bool = True, report_only: bool = False) -> list[str]:
    """Every refusal of a comparison that can be made before torch loads, in this order (the run and its
    --dry-run both make them, `pacs_rl.preflight`): the output folder, the base model (a Hub name in the local
    cache when offline), and unless only the report is rewritten the libraries the train section needs, the
    training data (a local source read: it exists and its rows parse; a Hub one in the local datasets cache when
    offline) and each benchmark alike. ``network``: the run's (True), not a dry run's."""
    check = Preflight(network)
    check.output_folder(output)
    check.model(settings["model"])
    if report_only:
        return check.refusals
    check.add([f"train: {m}" for m in missing_packages(settings["train"])])
    if not check.hub_data(settings["train"]["dataset"], "train.dataset"):
        try:
            check_training_data(settings)
        except CompareError as e:
            check.add(str(e))
    loader = DataSettings(**eval_data_settings(settings)).loader_kwargs()
    for benchmark in settings["eval"]["benchmarks"]:
        check.data(benchmark, "eval.benchmarks", **loader)
    return check.refusals


def _compare(settings: dict, output: Path, only, report_only: bool, console, progress: bool = True) -> Path:
    """Check what can be checked without torch (`preflight`), then run (or only report) the comparison; return
    the report's path."""
    refusals = preflight(settings, output, report_only=report_only)
    if refusals:
        fail("; ".join(refusals))
    if report_only:
        from pacs_rl.compare.report import write_comparison_report  # numpy

        specs = build_plan(settings)
        write_or_check_manifest(output, settings, specs)
        path = write_comparison_report(output, settings, specs)
        console.print(f"report: {path}")
        return path
    show_library_notes()
    from pacs_rl.compare import execute  # torch, TRL
    from pacs_rl.training.output import quiet_libraries  # transformers

    quiet_libraries()  # as `pacs-rl train` does: no library bars or deprecation notes a user cannot act on
    execute.PROGRESS = progress
    if not progress:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    try:
        result = execute.run_comparison(settings, output, only=only, console=console)
    except (ResumeMismatch, DataError) as e:  # an eval folder drawn with other settings, bad data
        fail(e)
    return Path(result["report"])


def _dry_run(settings: dict, output: Path) -> None:
    """``--dry-run``: the comparison's plan and every refusal (exit 1), checked as the run checks it
    (`preflight`, without the network), nothing loaded or written."""
    refusals = preflight(settings, output, network=False)
    if refusals:  # answered before the plan, which reads the trainer's config fields (TRL)
        typer.echo(
            "dry run: nothing is loaded or written; the plan follows once the input passes these checks"
        )
        end_dry_run(refusals)
    specs = build_plan(settings)
    train, ev = settings["train"], settings["eval"]
    trained = sum((output / s.folder / TRAIN_DONE_FILE).is_file() for s in specs)
    evals = [eval_dir_of(output, s, b) for s in [None, *specs] for b in ev["benchmarks"]]
    evaluated = sum((d / EVAL_METRICS_FILE).is_file() for d in evals)
    budget = ", ".join(f"{k} {v}" for k, v in train.items() if k != "dataset")
    typer.echo("dry run: nothing is loaded or written")
    typer.echo(f"  base model: {settings['model']}")
    typer.echo("  methods: " + ", ".join(f"{m} ({method_label(m)})" for m in settings["methods"]))
    variants = list(dict.fromkeys(s.variant for s in specs))
    typer.echo(f"  training runs: {len(specs)} = {len(variants)} variant(s) x seeds {settings['seeds']}")
    typer.echo(f"  every run: {train['dataset']}; {budget}")
    top_p = ev["top_p"] if ev["temperature"] > 0 else 1.0
    typer.echo(
        f"  evaluation of the base model and every run: {', '.join(ev['benchmarks'])}; n = {ev['n']}, "
        f"T {ev['temperature']}, top-p {top_p}, <= {ev['max_new_tokens']} tokens, grader {ev['grader']}{grader_note(ev)}"
    )
    typer.echo(f"  output: {output} ({trained} of {len(specs)} runs trained, {evaluated} of {len(evals)} "
               "evaluations finished)")  # fmt: skip
    end_dry_run(refusals)


PAIRED_PRESET = "pacs-vs-grpo"  # the older spelling of `pacs-rl compare paired`: --preset pacs-vs-grpo


class CompareGroup(CommandGroup):
    """`pacs-rl compare`: the planned comparison, or with ``paired`` a paired-seed record (its own options). The
    older ``--preset pacs-vs-grpo`` is read as ``paired``, with a note. ``{methods}`` and ``{losses}`` in an
    option's help are filled in when the help is shown (from names that need no torch)."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        rest = list(args)
        for i, arg in enumerate(rest):
            old = arg == "--preset" and rest[i + 1 : i + 2] == [PAIRED_PRESET]
            if old or arg == f"--preset={PAIRED_PRESET}":
                del rest[i : i + 1 + old]
                note(
                    f"--preset {PAIRED_PRESET} is now `pacs-rl compare paired`; the old spelling still works"
                )
                rest = ["paired", *rest]
                break
        return super().parse_args(ctx, rest)

    def format_help(self, ctx, formatter):
        names = {"losses": ", ".join(loss_type_names()), "methods": ", ".join(method_names())}
        for param in self.params:
            if getattr(param, "help", None) and "{" in param.help:
                param.help = param.help.format(**names)
        return super().format_help(ctx, formatter)


app = typer.Typer(cls=CompareGroup, invoke_without_command=True, add_completion=False, rich_markup_mode=None)
app.callback(invoke_without_command=True)(compare_command)
app.command("paired", cls=Command)(paired_command)
