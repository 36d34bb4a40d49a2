"""``pacs-rl compare``: a planned comparison (methods and variants × seeds, from a preset, a settings file and the
options) and, under it, ``pacs-rl compare paired`` (PACS against its baselines, seed pair after seed pair, into one
record). Both plan with `pacs_rl.compare.plan`, run with one executor (`pacs_rl.compare.driver`: a process per
run, resumable, --stop-after) into one record format (`pacs_rl.compare.record`), and check every option, method and
variant before torch loads (`preflight`, shared by the run and its --dry-run, `pacs_rl.preflight`). The method list
in the help is filled in from names that need no torch."""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from filelock import Timeout

from pacs_rl.command import Command, CommandGroup, end_dry_run, fail, note
from pacs_rl.compare.lock import lock_of
from pacs_rl.compare.methods import METHODS, method_label, method_names, parse_method, split_methods
from pacs_rl.compare.plan import (
    EVAL_FIELDS,
    PRESETS,
    TOP_FIELDS,
    check_training_data,
    comparison_protocol,
    duplicate_problem,
    eval_data_settings,
    grader_note,
    load_settings_file,
    next_jobs,
    paired_arms_problem,
    parse_sweep,
    resolve_settings,
    sweep_note,
)
from pacs_rl.compare.record import (
    ARMS,
    MAX_PAIRS,
    PRIMARY,
    PROTOCOL,
    cpu_default,
    load_record,
    new_record,
    open_record,
    protocol,
    summarize,
)
from pacs_rl.evaluation.runner import parse_samples
from pacs_rl.preflight import Preflight, missing_packages
from pacs_rl.settings.data import DataSettings
from pacs_rl.settings.declarations import at_least, declared, interval, one_of, setting
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training.schema import loss_type_names

RECORD_FILE = "record.json"  # a comparison's record in its --output-dir
COMPARISON = "A planned comparison (pacs-rl compare): every method and variant on every seed from one base model under one budget, evaluated with one pass@k protocol."  # fmt: skip


@dataclass
class RunnerOptions:
    """The executor's options, the same in both commands (`pacs_rl.compare.driver.Options`)."""

    workers: int = setting(2, "Runs at once, each a process of its own (on a GPU: as many as fit, at 6 GiB each).",
                           check=at_least(1))  # fmt: skip
    threads: int = setting(1, "Torch threads per run.", check=at_least(1))
    stop_after: float | None = setting(
        None,
        "End after this many seconds, whatever runs: the runs still going are stopped (each resumes where it was "
        "when the record is continued here), every finished run is in the record, and no run starts that the "
        "record's runs on this device say cannot finish in time. Inside a time-limited call, leave it a minute.",
        check=interval(0, open_low=True),
    )


PASSK_N = PROTOCOL["passk"]["n"]
# the CPU default's settings a dry run names (the record holds all of them)
DEFAULT_KNOBS = ("learning_rate", "lr_scheduler_type", "temperature", "max_completion_length", "num_generations",
                 "grader", "dynamic_sampling", "skip_no_signal_steps")  # fmt: skip


@dataclass
class PairedOptions(RunnerOptions):
    """The settings of `pacs-rl compare paired`, one declaration each: its option's default and help, and its check
    (run before torch loads, by :func:`option_problems`)."""

    output_dir: str = setting("compare_runs", "Folder of the run folders (resumed if it exists).")
    record: str | None = setting(None, "The record file [default: OUTPUT_DIR/record.json].")
    methods: str | None = setting(
        None,
        f"Comma-separated methods of a new record: {', '.join(METHODS)}, any loss (compare/methods.py), or a variant "
        f"such as pacs[reference=frozen,pacs_beta=0.5]; default {', '.join(ARMS)}. A record goes on with its own.",
    )
    max_steps: int | None = setting(
        None, "Optimizer steps per run [default: the protocol's 48].", check=at_least(1, null=True)
    )
    n: int | None = setting(
        None,
        f"{PASSK_N}: pass@k with n = {PASSK_N} samples on the first {PROTOCOL['passk']['problems']} held-out "
        "problems; left out, greedy accuracy only.",
        check=one_of([PASSK_N], null=True),
    )
    passk_every: int | None = setting(
        None,
        f"With --n {PASSK_N}: pass@k on every N-th seed only (a record without pass@k takes it on from its next seed).",
        check=at_least(1, null=True),
    )
    hours: float = setting(8.0, "Start no run after this many hours.", check=interval(0, open_low=True))
    target: float = setting(
        5.0,
        "Once PACS - GRPO's 95% interval is within ± this many percentage points, run the record's other methods "
        "on the seeds of the pairs, then stop.",
        check=interval(0, 100, open_low=True, open_high=True),
    )
    max_pairs: int | None = setting(
        None,
        f"Stop after this many complete seeds, whatever the interval (the summary then says what ±TARGET would "
        f"need); a second machine's copy counts the seeds it holds [default: {MAX_PAIRS}].",
        check=at_least(1, null=True),
    )
    full_seeds: int | None = setting(
        None,
        "Every method of the record on seeds below this, only PACS and GRPO from it on; once PACS - GRPO is "
        "answered, each other method on this many of the paired seeds [default: every method on every seed].",
        check=at_least(0, null=True),
    )
    first_seed: int = setting(
        0,
        "New seeds from this one on; a second machine adding to a copy of the record takes seeds the first will not "
        "reach, and --merge brings its runs back.",
        check=at_least(0),
    )
    merge: str | None = setting(
        None,
        "Add to --record the runs of FILE (a copy of it that another machine added to) that it lacks, then stop; "
        "each run keeps the device it ran on. Takes --record and --output-dir (where a running driver's lock is).",
    )


FIELDS = {f.name: f for f in dataclasses.fields(PairedOptions)}
MERGE_TAKES = ("output_dir", "record", "merge")  # --merge compares the two records' own protocols


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def option(declared_in: type, name: str, *flags: str, metavar: str) -> Any:
    """The option of setting ``name`` of the options ``declared_in``: its default and help from the declaration."""
    f = declared_in.__dataclass_fields__[name]
    return typer.Option(f.default, flag(name), *flags, help=f.metadata["help"], metavar=metavar)


def option_problems(options: RunnerOptions) -> list[str]:
    """What the declared checks find, each in one line naming the option."""
    out = []
    for f in dataclasses.fields(options):
        check, value = declared(f).check, getattr(options, f.name)
        problem = check(flag(f.name), value) if check else None
        if problem:
            out.append(problem.replace(f"{flag(f.name)}=", f"{flag(f.name)} ", 1))
    if getattr(options, "passk_every", None) is not None and options.n is None:
        out.append(f"--passk-every {options.passk_every}: pass@k on every N-th seed needs --n {PASSK_N}")
    return out


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


@dataclass
class CompareOptions(RunnerOptions):
    """The options of `pacs-rl compare`, one declaration each (None where not given: the settings file, then the
    preset, then the defaults decide)."""

    methods: str | None = setting(
        None,
        "Comma-separated methods: {methods} (each as the PACS authors ran it: pacs unclipped, grpo as verl ran it; "
        "pacs_clip = PACS with gradient clip 1.0; compare/methods.py), or variants of them such as "
        "pacs[pacs_beta=0.5]. Default: from --config / --preset, else pacs,grpo.",
    )
    seed: str | None = setting(None, _help(TOP_FIELDS, "seeds", "Comma-separated; default: from the settings, else 0. "
                                           "More seeds later go on in the same record."))  # fmt: skip
    config: str | None = setting(None, "YAML/JSON settings file (model, methods, seeds, sweeps, train, "
                                 "method_settings, eval).")  # fmt: skip
    preset: str | None = setting(None, f"Named settings: {', '.join(PRESETS)}.")
    sweep: list[str] | None = setting(
        None,
        "FIELD=V1,V2,...: another spelling of variants, one per value of a setting for each method it applies to "
        "(a PACS option: the PACS methods), e.g. pacs_beta=0.1,0.5,1,2,10 is pacs[pacs_beta=0.1], ...; a value a "
        "method already has is its plain run. Repeatable (each sweep is one-at-a-time, as in the paper).",
    )
    model: str | None = setting(None, _help(TOP_FIELDS, "model", "[default: smollm2-135m]"))
    dataset: str | None = setting(
        None, "Training problems (train.dataset), as `pacs-rl train --dataset` takes them."
    )
    benchmarks: str | None = setting(None, _help(EVAL_FIELDS, "benchmarks", "Comma-separated; default: from the "
                                                 "settings."))  # fmt: skip
    output_dir: str = setting("compare_runs", "Comparison folder: its record, run folders and report (resumed if "
                              "it exists).")  # fmt: skip
    max_steps: int | None = setting(
        None, "Optimizer steps per run (train.max_steps).", check=at_least(1, null=True)
    )
    n: str | None = setting(None, _help(EVAL_FIELDS, "n"))
    k: str | None = setting(None, _help(EVAL_FIELDS, "ks", "Comma-separated; a --n given here drops the settings' "
                                        "ks above it."))  # fmt: skip

    def settings(self) -> dict:
        """The comparison's complete, checked settings: defaults, then the preset, then the settings file (a note
        per older key spelling in it), then these options. Raises SettingsError naming a setting that cannot be
        used."""
        notes: list[str] = []
        file_settings = load_settings_file(self.config, notes) if self.config else None
        for message in notes:
            note(message)
        cli = self.overrides()
        if self.n and not self.k:  # the settings' ks that a smaller n given here cannot have go
            cli["eval"]["ks"] = _ks_within(self.preset, file_settings, cli["eval"]["n"])
        return resolve_settings(preset=self.preset, config=file_settings, cli=cli)

    def overrides(self) -> dict:
        """These options as a settings dict (resolve_settings' ``cli``), None for a section not given."""
        train = {"max_steps": self.max_steps, "dataset": self.dataset}
        n = self.n
        return {
            "methods": split_methods(self.methods),
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


def _c(name: str, *flags: str, metavar: str) -> Any:
    return option(CompareOptions, name, *flags, metavar=metavar)


def _p(name: str, *flags: str, metavar: str) -> Any:
    return option(PairedOptions, name, *flags, metavar=metavar)


# ---------------------------------------------------------------------------------------------- pacs-rl compare
def compare_command(
    ctx: typer.Context,
    methods: str = _c("methods", metavar="NAME,..."),
    seed: str = _c("seed", metavar="SEED,..."),
    config: str = _c("config", "-c", metavar="FILE"),
    preset: str = _c("preset", metavar="NAME"),
    sweep: list[str] = _c("sweep", metavar="FIELD=V1,..."),
    model: str = _c("model", "-m", metavar="NAME"),
    dataset: str = _c("dataset", "-d", metavar="SOURCE"),
    benchmarks: str = _c("benchmarks", "-b", metavar="SOURCE,..."),
    output_dir: str = _c("output_dir", "-o", metavar="DIR"),
    max_steps: int = _c("max_steps", metavar="N"),
    n: str = _c("n", metavar="N"),
    k: str = _c("k", metavar="K,..."),
    workers: int = _c("workers", metavar="N"),
    threads: int = _c("threads", metavar="N"),
    stop_after: float = _c("stop_after", metavar="SECONDS"),
    report_only: bool = typer.Option(
        False, "--report-only", help="Only rewrite report.md and the PNGs from what the record holds."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Check every setting, method and variant and print the plan (methods, seeds, runs, budget, evaluation, "
        "what the record holds) without loading a model or writing anything.",
    ),
) -> None:
    """Train several methods and variants from one base model under one budget, each run a process of its own,
    evaluate all with one pass@k protocol into one record (OUTPUT_DIR/record.json), and write report.md + PNGs
    from it. Rerun the same command to resume after an interruption, or with more seeds to add them.
    `pacs-rl compare paired` adds seed pairs of PACS and its baselines to a record until its interval is narrow.
    Older spellings still work: --output, --steps, --seeds N (seeds 0..N-1), --preset pacs-vs-grpo."""
    if ctx.invoked_subcommand is not None:
        given = [p.opts[0] for p in ctx.command.params if ctx.params.get(p.name) not in (p.default, None, ())]
        if given:
            fail(f"{', '.join(given)}: an option of the planned comparison; `pacs-rl compare {ctx.invoked_subcommand}` "
                 "takes its own options after its name")  # fmt: skip
        return
    named = dict(locals())
    given = CompareOptions(**{name: named[name] for name in CompareOptions.__dataclass_fields__})
    output = Path(output_dir)
    check = Preflight(network=not dry_run)
    check.add(option_problems(given))
    settings = None
    try:
        settings = given.settings()
    except SettingsError as e:  # CompareError included: a method, variant or setting train refuses
        check.add(str(e))
    if settings is not None:
        preflight(settings, output, check, report_only)
    if dry_run:
        _dry_run(settings, output, given, check.refusals)
        return
    if check.refusals:
        fail("; ".join(check.refusals))
    note_line = sweep_note(settings)
    if note_line:
        note(note_line)
    try:
        path, missing = _compare(settings, output, given, report_only)
    except SettingsError as e:
        fail(e)
    typer.echo(path.read_text())
    if missing and not report_only:
        typer.echo(f"unfinished: {', '.join(missing)} (each run's log is beside its folder, {output}/<variant>/"
                   "seed<s>.log); the same command goes on with them", err=True)  # fmt: skip
        raise typer.Exit(1)


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


def preflight(settings: dict, output: Path, check: Preflight, report_only: bool = False) -> None:
    """Every refusal of a planned comparison that can be made before torch loads, after its settings' (each method
    and variant read and checked as `pacs-rl train` checks it, `pacs_rl.compare.plan.resolve_settings`), in this
    order (the run and its --dry-run both make them, into ``check``): the output folder, the base model (a Hub name
    in the local cache when offline), the record there (made with other settings, or a folder of other runs), and
    unless only the report is rewritten the libraries the train section needs, the training data (a local source
    read: it exists and its rows parse; a Hub one in the local datasets cache when offline) and each benchmark
    alike."""
    from pacs_rl.compare.driver import work_problem  # the executor, which needs no torch either

    check.output_folder(output)
    check.model(settings["model"])
    if report_only:
        return
    try:
        record = open_record(output / RECORD_FILE, comparison_protocol(settings), COMPARISON)
        check.add(work_problem(output, record["protocol"]))
    except SettingsError as e:
        check.add(str(e))
    check.add([f"train: {m}" for m in missing_packages(settings["train"])])
    if not check.hub_data(settings["train"]["dataset"], "train.dataset"):
        try:
            check_training_data(settings)
        except SettingsError as e:
            check.add(str(e))
    loader = DataSettings(**eval_data_settings(settings)).loader_kwargs()
    for benchmark in settings["eval"]["benchmarks"]:
        check.data(benchmark, "eval.benchmarks", **loader)


def _compare(
    settings: dict, output: Path, runner: RunnerOptions, report_only: bool
) -> tuple[Path, list[str]]:
    """Run (or only report) the comparison: its runs into its record, then the report; return the report's path and
    the planned runs the record lacks (a run that failed twice, or one --stop-after ended)."""
    from pacs_rl.compare import driver  # the executor and its tables
    from pacs_rl.compare.report import legacy_record, write_comparison_report  # numpy, matplotlib

    path = output / RECORD_FILE
    if report_only:
        if path.is_file():
            record = json.loads(path.read_text())
        elif (output / driver.LEGACY_MANIFEST).is_file():
            record = legacy_record(output)
        else:
            fail(f"--output-dir {output}: no record yet (run without --report-only to start it)")
    else:
        opts = driver.Options(record=path, work=output, workers=runner.workers, threads=runner.threads, hours=None,
                              target=None, max_seeds=None, stop_after=runner.stop_after, seeds=settings["seeds"])  # fmt: skip
        record = driver.run(opts, comparison_protocol(settings), COMPARISON)
    seeds = record.get("seeds", settings["seeds"])  # an earlier folder's own
    have = {(r["method"], r["seed"]) for r in record["runs"]}
    missing = [f"{m} seed {s}" for s in seeds for m in record["protocol"]["methods"] if (m, s) not in have]
    return write_comparison_report(record, output, seeds), missing


def _dry_run(settings: dict | None, output: Path, runner: RunnerOptions, refusals: list[str]) -> None:
    """``--dry-run``: the comparison's plan and every refusal (exit 1), checked as the run checks it
    (`preflight`, without the network), nothing loaded or written."""
    if settings is None or refusals:
        typer.echo(
            "dry run: nothing is loaded or written; the plan follows once the input passes these checks"
        )
        end_dry_run(refusals)
    proto = comparison_protocol(settings)
    path = output / RECORD_FILE
    record = json.loads(path.read_text()) if path.is_file() else new_record(proto)
    variants = list(proto["methods"])
    runs = [(v, s) for s in settings["seeds"] for v in variants]
    done = sum(1 for r in record["runs"] if (r["method"], r["seed"]) in runs)
    train, ev = settings["train"], settings["eval"]
    budget = ", ".join(f"{k} {v}" for k, v in train.items() if k != "dataset")
    typer.echo("dry run: nothing is loaded or written")
    typer.echo(f"  base model: {settings['model']}")
    typer.echo("  methods: " + ", ".join(f"{m} ({method_label(m)})" for m in variants))
    typer.echo(f"  training runs: {len(runs)} = {len(variants)} variant(s) x seeds {settings['seeds']}")
    typer.echo(f"  every run: {train['dataset']}; {budget}")
    top_p = ev["top_p"] if ev["temperature"] > 0 else 1.0
    typer.echo(
        f"  evaluation of the base model and every run: {', '.join(ev['benchmarks'])}; n = {ev['n']}, "
        f"T {ev['temperature']}, top-p {top_p}, <= {ev['max_new_tokens']} tokens, grader {ev['grader']}{grader_note(ev)}"
    )
    typer.echo(f"  output: {output} (its record holds {done} of {len(runs)} runs, the base model "
               f"{'evaluated' if record.get('base') else 'not yet'}); {runner.workers} run(s) at a time, "
               f"{runner.threads} thread(s) each")  # fmt: skip
    line = sweep_note(settings)
    if line:
        typer.echo(f"  {line}")
    end_dry_run(refusals)


# ---------------------------------------------------------------------------------------------- pacs-rl compare paired
def merge_unused(options: PairedOptions, report_only: bool) -> str | None:
    """With --merge, the options given that it would not use (it compares the two records' own protocols)."""
    unused = [flag(k) for k, f in FIELDS.items() if k not in MERGE_TAKES and getattr(options, k) != f.default]
    unused = sorted([*unused, *(["--report-only"] if report_only else [])])
    if options.merge is None or not unused:
        return None
    return (f"--merge only adds another record's runs: {', '.join(unused)} would not be used; leave "
            f"{'them' if len(unused) > 1 else 'it'} out")  # fmt: skip


def paired_command(
    output_dir: str = _p("output_dir", "-o", metavar="DIR"),
    record: str = _p("record", metavar="FILE"),
    methods: str = _p("methods", metavar="NAME,..."),
    max_steps: int = _p("max_steps", metavar="N"),
    n: int = _p("n", metavar="N"),
    passk_every: int = _p("passk_every", metavar="N"),
    workers: int = _p("workers", metavar="N"),
    threads: int = _p("threads", metavar="N"),
    hours: float = _p("hours", metavar="H"),
    stop_after: float = _p("stop_after", metavar="SECONDS"),
    target: float = _p("target", metavar="PP"),
    max_pairs: int = _p("max_pairs", metavar="N"),
    full_seeds: int = _p("full_seeds", metavar="SEED"),
    first_seed: int = _p("first_seed", metavar="SEED"),
    merge: str = _p("merge", metavar="FILE"),
    report_only: bool = typer.Option(
        False,
        "--report-only",
        help="Print the record's tables, where its stopping rule stands, what its runs logged, its cost, and draw "
        "its figure; run nothing.",
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="What the record holds, its interval so far and the runs that come next; run nothing.",
    ),
) -> None:
    """PACS against its baselines, seed pair after seed pair, into one record, until PACS - GRPO's paired 95%
    interval is within --target (docs/RESULTS.md). Rerun the same command to go on after a stop."""
    named = dict(locals())
    given = PairedOptions(**{name: named[name] for name in FIELDS})
    problems = [*option_problems(given), *filter(None, [merge_unused(given, report_only)])]
    if problems:
        fail("; ".join(problems))
    opts = driver_options(given)
    if merge is not None:
        merge_command(opts, Path(merge), dry_run)
    elif dry_run:
        _paired_dry_run(opts, given.max_pairs is not None)
    elif report_only:
        _paired_report(opts)
    else:
        refusals, _ = paired_preflight(opts, given.max_pairs is not None)  # before run() takes the lock
        if refusals:
            fail("; ".join(refusals))
        from pacs_rl.compare import driver  # the executor

        try:
            driver.run(opts)
        except SettingsError as e:  # CompareError: the record or its folder
            fail(e)


def driver_options(given: PairedOptions):
    """The :class:`pacs_rl.compare.driver.Options` of checked options."""
    from pacs_rl.compare.driver import Options  # the executor

    output = Path(given.output_dir)
    return Options(
        record=Path(given.record) if given.record else output / RECORD_FILE,
        work=output,
        workers=given.workers,
        threads=given.threads,
        hours=given.hours,
        stop_after=given.stop_after,
        target=given.target / 100,
        max_seeds=given.max_pairs if given.max_pairs is not None else MAX_PAIRS,
        full_seeds=given.full_seeds,
        first_seed=given.first_seed,
        methods=split_methods(given.methods),
        overrides={"max_steps": given.max_steps} if given.max_steps else None,
        no_passk=given.n is None,
        passk_every=given.passk_every,
    )


def paired_preflight(opts, max_pairs_given: bool) -> tuple[list[str], dict | None]:
    """(every refusal of a paired record's run that needs no torch, in the order the run and its --dry-run make
    them; the record it goes on with, None when it cannot be read): the output folder, each method and variant
    (read and checked as `pacs-rl train` checks it), a method named twice or training as another, arms the stopping
    rule needs, the record (another protocol), and the run folders already there (made under another protocol)."""
    from pacs_rl.compare.driver import (  # the executor, which needs no torch either
        started_seeds,
        work_problem,
    )

    check = Preflight(network=False)
    check.output_folder(opts.work)
    trained = {}
    for spec in opts.methods or []:
        try:
            trained[spec] = parse_method(spec)
        except SettingsError as e:
            check.add(str(e))
    if len(set(opts.methods or [])) != len(opts.methods or []):
        check.add(f"--methods lists a method twice: {opts.methods}")
    check.add(duplicate_problem(trained, {**cpu_default(), **PROTOCOL["train"], **(opts.overrides or {})}))
    record = None
    if not check.refusals:
        try:
            record = load_record(opts.record, opts.overrides, opts.methods, not opts.no_passk, opts.passk_every,
                                 started_seeds(opts.work))  # fmt: skip
        except SettingsError as e:
            check.add(str(e))
    if record is not None:
        check.add(paired_arms_problem(list(record["protocol"]["methods"]), max_pairs_given))
        check.add(work_problem(opts.work, record["protocol"]))
    return check.refusals, record


def _paired_report(opts) -> None:
    """--report-only: the record's tables, where its stopping rule stands, what its runs logged, its cost, its
    figure."""
    from pacs_rl.compare import collapses, tables  # numpy
    from pacs_rl.compare.figures import plot_comparison  # matplotlib

    if not opts.record.is_file():
        fail(f"--record {opts.record}: no such record yet (run without --report-only to start it)")
    record = json.loads(opts.record.read_text())
    typer.echo(tables.markdown_tables(record))
    typer.echo(tables.verdict(record, opts.target, opts.max_seeds))
    if record["runs"]:  # what the runs logged while training, and the collapsed runs against the others
        typer.echo(f"\n{collapses.dynamics_table(record)}\n\n{collapses.collapse_table(record)}\n")
    typer.echo(tables.cost_line(record))
    if record["runs"]:
        typer.echo(f"figure: {plot_comparison(record, opts.work / 'comparison.png')}")


def merge_command(opts, other: Path, dry_run: bool) -> None:
    """``--merge FILE``: the runs of FILE that --record lacks go into it (under the lock a running driver holds), or,
    with --dry-run, are only listed."""
    from pacs_rl.compare.record import merge_records, save_record
    from pacs_rl.compare.tables import summary_text

    for path, what in ((other, "--merge"), (opts.record, "--record")):
        if not path.is_file():
            fail(f"{what} {path}: no such record file")
    try:
        theirs = json.loads(other.read_text())
    except json.JSONDecodeError as e:
        fail(f"--merge {other}: not a record (JSON: {e})")
    lock = None if dry_run else lock_of(opts.work / opts.record.name)  # a dry run makes no folder
    try:
        if lock is not None:
            lock.acquire()
    except Timeout:
        fail(f"{opts.record} is being added to by a running `pacs-rl compare` (it holds {lock.lock_file}): stop it, "
             "merge, then start it again")  # fmt: skip
    try:
        record = json.loads(opts.record.read_text())
        added, left = merge_records(record, theirs, str(other))
        if added and not dry_run:
            save_record(opts.record, record)
    except SettingsError as e:
        fail(e)
    finally:
        if lock is not None:
            lock.release()
    keys = set(added)
    devices = sorted(
        {r.get("host", {}).get("device", "?") for r in record["runs"] if (r["method"], r["seed"]) in keys}
    )
    seeds = sorted({s for _, s in added})
    where = f": seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}, run on {', '.join(devices)}"
    typer.echo(
        f"{'would add' if dry_run else 'added'} {len(added)} runs of {other} to {opts.record}{where if added else ''}"
    )
    if left:
        typer.echo(f"left out, their pair incomplete (a pair is trained on one machine): "
                   f"{', '.join(f'{m} seed {s}' for m, s in left)}")  # fmt: skip
    if added and not dry_run:
        typer.echo(summary_text(record))


def _paired_dry_run(opts, max_pairs_given: bool) -> None:
    """What the record holds, the interval so far, and the runs that come next; nothing is loaded or run."""
    from pacs_rl.compare import tables  # numpy
    from pacs_rl.compare.driver import work_problem

    refusals, record = paired_preflight(opts, max_pairs_given)
    if record is None:  # refused: the plan of a new record with these options, where its methods can be read
        try:
            record = new_record(protocol(opts.overrides, opts.methods, not opts.no_passk, opts.passk_every))
            refusals += filter(None, [work_problem(opts.work, record["protocol"])])
        except SettingsError:
            pass
    if record is None:
        typer.echo("dry run: nothing is loaded or run; the plan follows once the input passes these checks")
        end_dry_run(refusals)
    proto = record["protocol"]
    gap = summarize(record).get(PRIMARY, {}).get("pacs_minus_this", {}).get("greedy_accuracy", {})
    typer.echo("dry run: nothing is loaded or run")
    typer.echo(
        f"  record: {opts.record} ({len(record['runs'])} runs{', base evaluated' if record.get('base') else ''})"
    )
    order = ("every method on every seed" if opts.full_seeds is None else
             f"every method on seeds below {opts.full_seeds}, then only pacs and {PRIMARY}")  # fmt: skip
    typer.echo(f"  methods: {', '.join(proto['methods'])}; {order}")
    typer.echo(f"  every run: the pacs-rl train CPU default with {proto['train']}; greedy at steps "
               f"{[*proto['greedy_at'], proto['train']['max_steps']]}; pass@k {_passk_rule(proto)}")  # fmt: skip
    held = proto.get("cpu_default")
    if held:
        knobs = ", ".join(f"{k} {held[k]}" for k in DEFAULT_KNOBS if k in held)
        typer.echo(f"  the CPU default it holds ({len(held)} settings): {knobs}, ...")
    if gap.get("ci95"):
        typer.echo(f"  {tables.verdict(record, opts.target, opts.max_seeds)}")
    jobs = itertools.islice(next_jobs(record, list(proto["methods"]), opts.full_seeds, opts.first_seed), 4)
    typer.echo("  next runs: " + ", ".join("base" if m is None else f"{m} seed {s}" for m, s in jobs))
    typer.echo(f"  {tables.cost_line(record)}")
    end = f", ending after {opts.stop_after:g} s" if opts.stop_after is not None else ""
    typer.echo(f"  {opts.workers} at a time, {opts.threads} thread(s) each, no run started after {opts.hours:g} h"
               f"{end}, in {opts.work}; it stops at ±{100 * opts.target:g} pp or {opts.max_seeds} pairs")  # fmt: skip
    end_dry_run(refusals)


def _passk_rule(proto: dict) -> str:
    if proto.get("passk") is None:
        return "off"
    rule, n = proto.get("passk_seeds"), proto["passk"]["n"]
    if rule is None:
        return f"n = {n} on every run"
    return f"n = {n} on the base model and seeds {rule['from']}, {rule['from'] + rule['every']}, ..."


# ---------------------------------------------------------------------------------------------- the group
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
