"""``pacs-rl compare paired``: add seed pairs to a paired-seed record (:mod:`pacs_rl.compare.paired`), report it, plan
it (``--dry-run``) or merge a second machine's copy into it (``--merge``). Its options are declared once
(:class:`PairedOptions`: default, help, check); each is checked, and a record of another protocol refused, before
torch loads."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import typer
from filelock import Timeout

from pacs_rl.command import end_dry_run, fail
from pacs_rl.compare.lock import lock_of
from pacs_rl.compare.methods import METHODS
from pacs_rl.compare.paired.record import (
    ARMS,
    MAX_PAIRS,
    PROTOCOL,
    load_record,
    new_record,
    parse_method,
    summarize,
)
from pacs_rl.preflight import Preflight
from pacs_rl.settings.declarations import at_least, declared, interval, one_of, setting
from pacs_rl.settings.errors import SettingsError

PASSK_N = PROTOCOL["passk"]["n"]
# the CPU default's settings a dry run names (the record holds all of them)
DEFAULT_KNOBS = ("learning_rate", "lr_scheduler_type", "temperature", "max_completion_length", "num_generations",
                 "grader", "dynamic_sampling", "skip_no_signal_steps")  # fmt: skip


@dataclasses.dataclass
class PairedOptions:
    """The settings of `pacs-rl compare paired`, one declaration each: its option's default and help, and its check
    (run before torch loads, by :func:`option_problems`)."""

    output_dir: str = setting("compare_runs", "Folder of the run folders (resumed if it exists).")
    record: str | None = setting(None, "The record file [default: OUTPUT_DIR/record.json].")
    methods: str | None = setting(
        None,
        f"Comma-separated methods of a new record: {', '.join(METHODS)} (compare/methods.py), or a variant such as "
        f"pacs[reference=frozen,pacs_beta=0.5]; default {', '.join(ARMS)}. A record goes on with its own.",
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
    workers: int = setting(2, "Runs at once (on a GPU: as many as fit, at 6 GiB each).", check=at_least(1))
    threads: int = setting(1, "Torch threads per run.", check=at_least(1))
    hours: float = setting(8.0, "Start no run after this many hours.", check=interval(0, open_low=True))
    stop_after: float | None = setting(
        None,
        "End after this many seconds, whatever runs: the runs still going are stopped (each resumes where it was "
        "when the record is continued here), every finished run is in the record, and no run starts that the "
        "record's runs on this device say cannot finish in time. Inside a time-limited call, leave it a minute.",
        check=interval(0, open_low=True),
    )
    target: float = setting(
        5.0,
        "Once PACS - GRPO's 95% interval is within ± this many percentage points, run the record's other methods "
        "on the seeds of the pairs, then stop.",
        check=interval(0, 100, open_low=True, open_high=True),
    )
    max_pairs: int | None = setting(
        None, "Stop after this many complete seeds.", check=at_least(1, null=True)
    )
    max_pairs: int | None = setting(
        MAX_PAIRS,
        "Stop after this many complete seeds, whatever the interval (the summary then says what ±TARGET would "
        "need); a second machine's copy counts the seeds it holds.",
        check=at_least(1, null=True),
    )
    full_seeds: int | None = setting(
        None,
        "Every method of the record on seeds below this, only PACS and GRPO from it on [default: every method on "
        "every seed].",
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


def option(name: str, *flags: str, metavar: str) -> Any:
    """The option of setting ``name``: its default and help from the declaration."""
    f = FIELDS[name]
    return typer.Option(f.default, flag(name), *flags, help=f.metadata["help"], metavar=metavar)


def option_problems(options: PairedOptions) -> list[str]:
    """What the declared checks find, each in one line naming the option."""
    out = []
    for name, f in FIELDS.items():
        check, value = declared(f).check, getattr(options, name)
        problem = check(flag(name), value) if check else None
        if problem:
            out.append(problem.replace(f"{flag(name)}=", f"{flag(name)} ", 1))
    if options.passk_every is not None and options.n is None:
        out.append(f"--passk-every {options.passk_every}: pass@k on every N-th seed needs --n {PASSK_N}")
    return out


def merge_unused(options: PairedOptions, report_only: bool) -> str | None:
    """With --merge, the options given that it would not use (it compares the two records' own protocols)."""
    unused = [flag(k) for k, f in FIELDS.items() if k not in MERGE_TAKES and getattr(options, k) != f.default]
    unused = sorted([*unused, *(["--report-only"] if report_only else [])])
    if options.merge is None or not unused:
        return None
    return (f"--merge only adds another record's runs: {', '.join(unused)} would not be used; leave "
            f"{'them' if len(unused) > 1 else 'it'} out")  # fmt: skip


def split_methods(text: str | None) -> list[str] | None:
    """Comma-separated methods, where a variant's own commas (``pacs[reference=frozen,ref_reset_steps=8]``) stay
    inside its brackets."""
    if not text:
        return None
    out, depth, part = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(part.strip())
            part = ""
        else:
            part += ch
    out.append(part.strip())
    return [m for m in out if m]


def paired_command(
    output_dir: str = option("output_dir", "-o", metavar="DIR"),
    record: str = option("record", metavar="FILE"),
    methods: str = option("methods", metavar="NAME,..."),
    max_steps: int = option("max_steps", metavar="N"),
    n: int = option("n", metavar="N"),
    passk_every: int = option("passk_every", metavar="N"),
    workers: int = option("workers", metavar="N"),
    threads: int = option("threads", metavar="N"),
    hours: float = option("hours", metavar="H"),
    stop_after: float = option("stop_after", metavar="SECONDS"),
    target: float = option("target", metavar="PP"),
    max_pairs: int = option("max_pairs", metavar="N"),
    full_seeds: int = option("full_seeds", metavar="SEED"),
    first_seed: int = option("first_seed", metavar="SEED"),
    merge: str = option("merge", metavar="FILE"),
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
    given = PairedOptions(output_dir=output_dir, record=record, methods=methods, max_steps=max_steps, n=n,
                          passk_every=passk_every, workers=workers, threads=threads, hours=hours,
                          stop_after=stop_after, target=target, max_pairs=max_pairs, full_seeds=full_seeds,
                          first_seed=first_seed, merge=merge)  # fmt: skip
    problems = [*option_problems(given), *filter(None, [merge_unused(given, report_only)])]
    if problems:
        fail("; ".join(problems))
    try:
        opts = driver_options(given)
        if merge is not None:
            merge_command(opts, Path(merge), dry_run)
        else:
            run_command(opts, report_only, dry_run)
    except SettingsError as e:  # CompareError: another protocol, an unknown method
        fail(e)


def driver_options(given: PairedOptions):
    """The :class:`pacs_rl.compare.paired.driver.Options` of checked options (a method it does not know refused)."""
    from pacs_rl.compare.paired.driver import Options  # numpy, and the runner it drives

    chosen = split_methods(given.methods)
    for spec in chosen or []:
        parse_method(spec)  # CompareError names a method it does not know
    output = Path(given.output_dir)
    return Options(
        record=Path(given.record) if given.record else output / "record.json",
        work=output,
        workers=given.workers,
        threads=given.threads,
        hours=given.hours,
        stop_after=given.stop_after,
        target=given.target / 100,
        max_seeds=given.max_pairs,
        full_seeds=given.full_seeds,
        first_seed=given.first_seed,
        methods=chosen,
        overrides={"max_steps": given.max_steps} if given.max_steps else None,
        no_passk=given.n is None,
        passk_every=given.passk_every,
    )


def run_command(opts, report_only: bool, dry_run: bool) -> None:
    """Run, report or dry-run the paired record ``opts`` describes."""
    from pacs_rl.compare.paired import collapses, driver, tables  # numpy, and the runner it drives

    if dry_run:
        _dry_run(opts)
        return
    if report_only:
        if not opts.record.is_file():
            fail(f"--record {opts.record}: no such record yet (run without --report-only to start it)")
        record = json.loads(opts.record.read_text())
        typer.echo(tables.markdown_tables(record))
        typer.echo(tables.verdict(record, opts.target, opts.max_seeds))
        if record["runs"]:  # what the runs logged while training, and the collapsed runs against the others
            typer.echo(f"\n{collapses.dynamics_table(record)}\n\n{collapses.collapse_table(record)}\n")
        typer.echo(tables.cost_line(record))
        from pacs_rl.compare.paired.figures import plot_comparison  # matplotlib

        if record["runs"]:
            typer.echo(f"figure: {plot_comparison(record, opts.work / 'comparison.png')}")
        return
    refusals, _record = preflight(opts)  # before run() takes the lock (which makes the run folder)
    if refusals:
        fail("; ".join(refusals))
    driver.run(opts)


def preflight(opts) -> tuple[list[str], dict | None]:
    """(every refusal of a paired record's run that needs no torch, in the order the run and its --dry-run make
    them; the record it goes on with, None when it cannot be read): the output folder, the record (another
    protocol, an unknown method), and the run folders already there (made under another protocol)."""
    from pacs_rl.compare.paired import driver  # numpy, and the runner it drives

    check = Preflight(network=False)
    check.output_folder(opts.work)
    record = None
    try:
        record = load_record(opts.record, opts.overrides, opts.methods, not opts.no_passk, opts.passk_every,
                             driver.started_seeds(opts.work))  # fmt: skip
    except SettingsError as e:
        check.add(str(e))
    if record is not None:
        check.add(driver.work_problem(opts.work, record["protocol"]))
    return check.refusals, record


def merge_command(opts, other: Path, dry_run: bool) -> None:
    """``--merge FILE``: the runs of FILE that --record lacks go into it (under the lock a running driver holds), or,
    with --dry-run, are only listed."""
    from pacs_rl.compare.paired import record as records
    from pacs_rl.compare.paired.tables import summary_text

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
        added, left = records.merge_records(record, theirs, str(other))
        if added and not dry_run:
            records.save_record(opts.record, record)
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


def _dry_run(opts) -> None:
    """What the record holds, the interval so far, and the runs that come next; nothing is loaded or run."""
    from pacs_rl.compare.paired import driver, tables
    from pacs_rl.compare.paired.record import PRIMARY

    refusals, record = preflight(opts)
    if record is None:  # refused: the plan of a new record with these options
        record = new_record(opts.overrides, opts.methods, not opts.no_passk, opts.passk_every)
        refusals += filter(None, [driver.work_problem(opts.work, record["protocol"])])
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
    jobs = itertools.islice(
        driver.next_jobs(record, list(proto["methods"]), opts.full_seeds, opts.first_seed), 4
    )
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
