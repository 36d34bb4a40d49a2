"""``pacs-rl compare --preset pacs-vs-grpo``: the options of a paired-seed record, checked before torch loads,
then :func:`pacs_rl.compare.paired.run` (or its report, or its dry run)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import typer
from filelock import Timeout

from pacs_rl.command import end_dry_run, fail
from pacs_rl.compare.lock import lock_of
from pacs_rl.settings import SettingsError, output_dir_problem

PAIRED_PRESET = "pacs-vs-grpo"  # pacs_rl.compare.paired.PRESET, named here without importing the engine


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


def paired_preset(
    output: Path, methods, max_steps, n, paired: dict, others: dict, report_only: bool, dry_run: bool
) -> None:
    """``pacs-rl compare --preset pacs-vs-grpo``: ``paired`` holds its own options by name (None where not given),
    ``others`` the comparison options it does not take."""
    extra = [name for name, value in others.items() if value]
    if extra:
        fail(f"--preset {PAIRED_PRESET} sets its own {', '.join(extra)}: leave {'them' if len(extra) > 1 else 'it'} "
             "out (its protocol: docs/RESULTS.md)")  # fmt: skip
    defaults = {
        "--workers": 2,
        "--threads": 1,
        "--hours": 8.0,
        "--target": 5.0,
        "--full-seeds": 0,
        "--first-seed": 0,
    }
    given = {name: defaults.get(name) if value is None else value for name, value in paired.items()}
    try:
        opts = paired_options(output=output, record=given["--record"], methods=methods, max_steps=max_steps, n=n,
                              workers=given["--workers"], threads=given["--threads"], hours=given["--hours"],
                              target=given["--target"], max_pairs=given["--max-pairs"],
                              full_seeds=given["--full-seeds"], passk_every=given["--passk-every"],
                              first_seed=given["--first-seed"])  # fmt: skip
        if given["--merge"] is not None:
            given_too = {
                "--methods": methods,
                "--max-steps": max_steps,
                "--n": n,
                "--report-only": report_only or None,
            }
            # the two records' own protocols are compared: none of the options that run or shape a record is used
            running = [name for name, value in {**given_too, **paired}.items() if value is not None and name not in
                       ("--record", "--merge")]  # fmt: skip
            if running:
                fail(f"--merge only adds another record's runs: {', '.join(running)} would not be used; leave "
                     f"{'them' if len(running) > 1 else 'it'} out")  # fmt: skip
            merge_command(opts, Path(given["--merge"]), dry_run)
            return
        paired_command(opts, report_only, dry_run)
    except SettingsError as e:  # CompareError: another protocol, an unknown method
        fail(e)


def paired_options(
    *,
    output: Path,
    record: str | None,
    methods: str | None,
    max_steps: int | None,
    n: str | None,
    workers: int,
    threads: int,
    hours: float,
    target: float,
    max_pairs: int | None,
    full_seeds: int,
    passk_every: int | None = None,
    first_seed: int = 0,
):
    """The :class:`pacs_rl.compare.paired.Options` of these command-line values; a one-line error names a value
    the paired protocol cannot take."""
    from pacs_rl.compare.paired import KS, PROTOCOL, Options, parse_method

    if n is not None and n.strip() != str(PROTOCOL["passk"]["n"]):
        fail(f"--n {n}: the paired protocol samples n = {PROTOCOL['passk']['n']} for pass@k ({KS}); give "
             f"--n {PROTOCOL['passk']['n']} for pass@k, or leave --n out for greedy accuracy only")  # fmt: skip
    for name, value, low in (
        ("--workers", workers, 1),
        ("--threads", threads, 1),
        ("--max-pairs", max_pairs, 1),
        ("--first-seed", first_seed, 0),
    ):
        if value is not None and value < low:
            fail(f"{name} {value}: give a whole number of at least {low}")
    if passk_every is not None and (passk_every < 1 or n is None):
        fail(
            f"--passk-every {passk_every}: pass@k on every N-th seed, N at least 1, with --n {PROTOCOL['passk']['n']}"
        )
    if not 0 < target < 100:
        fail(f"--target {target}: the half-width of the 95% interval in percentage points, e.g. 5")
    if hours <= 0:
        fail(f"--hours {hours}: give the hours after which no run starts, e.g. 8")
    chosen = split_methods(methods)
    for spec in chosen or []:
        parse_method(spec)  # CompareError names a method it does not know
    return Options(
        record=Path(record) if record else output / "record.json",
        work=output,
        workers=workers,
        threads=threads,
        hours=hours,
        target=target / 100,
        max_seeds=max_pairs,
        full_seeds=full_seeds,
        first_seed=first_seed,
        methods=chosen,
        overrides={"max_steps": max_steps} if max_steps else None,
        no_passk=n is None,
        passk_every=passk_every,
    )


def paired_command(opts, report_only: bool, dry_run: bool) -> None:
    """Run, report or dry-run the paired record ``opts`` describes."""
    from pacs_rl.compare import paired  # numpy, and the runner it drives

    if dry_run:
        _dry_run(opts)
        return
    if report_only:
        if not opts.record.is_file():
            fail(f"--record {opts.record}: no such record yet (run without --report-only to start it)")
        record = json.loads(opts.record.read_text())
        typer.echo(paired.markdown_tables(record))
        typer.echo(paired.cost_line(record))
        from pacs_rl.compare.paired_figures import plot_comparison  # matplotlib

        if record["runs"]:
            typer.echo(f"figure: {plot_comparison(record, opts.work / 'comparison.png')}")
        return
    problem = output_dir_problem(opts.work)
    if problem:
        fail(problem)
    # another protocol is refused here, before run() takes the lock (which makes the run folder)
    paired.load_record(
        opts.record,
        opts.overrides,
        opts.methods,
        not opts.no_passk,
        opts.passk_every,
        paired.started_seeds(opts.work),
    )
    paired.run(opts)


def merge_command(opts, other: Path, dry_run: bool) -> None:
    """``--merge FILE``: the runs of FILE that --record lacks go into it (under the lock a running driver holds), or,
    with --dry-run, are only listed."""
    from pacs_rl.compare import paired

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
        added, left = paired.merge_records(record, theirs, str(other))
        if added and not dry_run:
            paired.save_record(opts.record, record)
    except paired.CompareError as e:
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
        typer.echo(paired.summary_text(record))


def _dry_run(opts) -> None:
    """What the record holds, the interval so far, and the runs that come next; nothing is loaded or run."""
    from pacs_rl.compare import paired

    refusals = []
    try:
        record = paired.load_record(opts.record, opts.overrides, opts.methods, not opts.no_passk, opts.passk_every,
                                    paired.started_seeds(opts.work))  # fmt: skip
    except paired.CompareError as e:
        refusals.append(str(e))
        record = paired.new_record(opts.overrides, opts.methods, not opts.no_passk, opts.passk_every)
    proto = record["protocol"]
    gap = (
        paired.summarize(record).get(paired.PRIMARY, {}).get("pacs_minus_this", {}).get("greedy_accuracy", {})
    )
    typer.echo("dry run: nothing is loaded or run")
    typer.echo(
        f"  record: {opts.record} ({len(record['runs'])} runs{', base evaluated' if record.get('base') else ''})"
    )
    order = (f"every method on seeds below {opts.full_seeds}, then only pacs and {paired.PRIMARY}"
             if opts.full_seeds else f"only pacs and {paired.PRIMARY} run")  # fmt: skip
    typer.echo(f"  methods: {', '.join(proto['methods'])}; {order}")
    typer.echo(f"  every run: the pacs-rl train CPU default with {proto['train']}; greedy at steps "
               f"{[*proto['greedy_at'], proto['train']['max_steps']]}; pass@k {_passk_rule(proto)}")  # fmt: skip
    if gap.get("ci95"):
        typer.echo(f"  PACS - {paired.PRIMARY} so far: {100 * gap['mean']:+.1f} pp "
                   f"[{100 * gap['ci95'][0]:+.1f}, {100 * gap['ci95'][1]:+.1f}] over {gap['pairs']} pairs; "
                   f"±5 pp needs about {gap['pairs_needed']}")  # fmt: skip
    jobs = itertools.islice(
        paired.next_jobs(record, list(proto["methods"]), opts.full_seeds, opts.first_seed), 4
    )
    typer.echo("  next runs: " + ", ".join("base" if m is None else f"{m} seed {s}" for m, s in jobs))
    typer.echo(f"  {paired.cost_line(record)}")
    typer.echo(
        f"  {opts.workers} at a time, {opts.threads} thread(s) each, for at most {opts.hours:g} h, in {opts.work}"
    )
    end_dry_run(refusals)


def _passk_rule(proto: dict) -> str:
    if proto.get("passk") is None:
        return "off"
    rule, n = proto.get("passk_seeds"), proto["passk"]["n"]
    if rule is None:
        return f"n = {n} on every run"
    return f"n = {n} on the base model and seeds {rule['from']}, {rule['from'] + rule['every']}, ..."
