"""What a `pacs-rl train` run folder and a `pacs-rl eval` folder hold, for the code that writes them and the code
that reads them (`pacs-rl eval --model RUN/final`, `audit`, the model card, `pacs-rl compare`): the names of their
files (here only), a run's state for a rerun into it, and the held-out protocol it measured with, as `pacs-rl eval`
takes it.

    RUN/settings.json        the run's settings, its data, how held-out accuracy was measured ("heldout")
    RUN/metrics.jsonl        one row per logged step (`read_jsonl`); RUN/training_curves.png their plot
    RUN/heldout.json         held-out accuracy before and after training
    RUN/answer_forms.json    the forms of the paid answers (rollouts, held-out)
    RUN/samples/             rollouts.jsonl, heldout_before.jsonl, heldout_after.jsonl: completions and verdicts
    RUN/checkpoint-N/        TRL's checkpoints; complete once trainer_state.json is written
    RUN/final/               the trained weights (and their model card, README.md, also in RUN/); a weight file the
                             last checkpoint holds byte for byte is stored once (a link to it: share_weights)
    RUN/base_model/          the tiny random model a run of --model tiny started from
    RUN/eval/<protocol>/     `pacs-rl eval --model RUN/final` on the run's own held-out task
    RUN/run_complete.json    written last, by a run that finished

    EVAL/run.json            the settings an eval folder's samples were drawn with (checked on resume)
    EVAL/samples.jsonl       one row per sample
    EVAL/metrics.json        pass@k, counts, forms, settings, timing
    EVAL/results.md, passk.png   the table and the curve
    EVAL/audit.json          `pacs-rl audit`'s result (beside the first folder audited)

Light on purpose (no torch): the command checks a folder before anything heavy loads.
"""

from __future__ import annotations

import filecmp
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pacs_rl.data import benchmark_name
from pacs_rl.data.procedural import arithmetic_task, is_procedural
from pacs_rl.rewards.graders import TRAINING_GRADER, parse_grader

# ---- a `pacs-rl train` run folder
SETTINGS_FILE = "settings.json"
HELDOUT_FILE = "heldout.json"
FINISHED_FILE = "run_complete.json"
FINAL_DIR = "final"
CURVES_FILE = "training_curves.png"
BASE_MODEL_DIR = "base_model"  # where --model tiny is saved inside the run folder
METRICS_FILE = "metrics.jsonl"
FORMS_FILE = "answer_forms.json"
CARD_FILE = "README.md"  # the model card, in the run folder and in final/
SAMPLES_DIR = "samples"
ROLLOUTS_FILE = "rollouts.jsonl"  # in SAMPLES_DIR
EVAL_DIR = "eval"  # RUN/eval/<protocol>: the run's own held-out task evaluated
OTHER_SETTINGS_FILE = (
    "run_settings.json"  # a settings record some folders hold, read by `pacs-rl audit` for the grader
)
CHECKPOINT_PREFIX = "checkpoint-"  # transformers' checkpoint-N folders
TRAINER_STATE_FILE = (
    "trainer_state.json"  # transformers', in a checkpoint: written last, so it marks it complete
)
PACS_STATE_FILE = (
    "pacs_trainer_state_rank{rank}.pt"  # in a checkpoint: PACSTrainer's own state, one per process
)
CRITIC_DIR = "critic"  # in a checkpoint (and beside a saved final model): PPO's critic
CRITIC_OPTIMIZER_FILE = "optimizer.pt"  # in CRITIC_DIR
CRITIC_SCHEDULER_FILE = "scheduler.pt"  # in CRITIC_DIR

# ---- a `pacs-rl eval` folder
EVAL_RUN_FILE = "run.json"
EVAL_SAMPLES_FILE = "samples.jsonl"
EVAL_METRICS_FILE = "metrics.json"
RESULTS_FILE = "results.md"
PASSK_PLOT_FILE = "passk.png"
AUDIT_FILE = "audit.json"

# The held-out arithmetic problems are drawn with this seed whatever the run's seed: every seed of a
# comparison is measured on the same problems (a seed-dependent set added its own variance to the spread
# over seeds). It is the set seed 0 drew before.
HELDOUT_SEED = 10_000
FIELD_KEYS = ("problem_field", "answer_field", "prompt_field")


def heldout_samples_file(when: str) -> str:
    """The samples file of the held-out pass ``when`` ('before' or 'after' training), in SAMPLES_DIR."""
    return f"heldout_{when}.jsonl"


# a run's samples files, in the order they are reported
TRAINING_SAMPLES_FILES = (heldout_samples_file("before"), heldout_samples_file("after"), ROLLOUTS_FILE)


def read_json(path: str | Path) -> dict[str, Any]:
    """A JSON file of the folder as a mapping; {} when it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def jsonl_lines(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(line, row) of each line of a JSONL file of the folder (metrics.jsonl, a samples file) that holds a JSON
    object, read as it goes; a line that does not (one cut by a kill mid-write, a blank one) is skipped, and a
    missing or unreadable file has none. The line comes as written (without its newline), for a file rewritten
    with some of its rows."""
    try:
        with Path(path).open(encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                try:
                    row = json.loads(line)
                except ValueError:  # json.JSONDecodeError, and a blank line
                    continue
                if isinstance(row, dict):
                    yield line, row
    except OSError:
        return


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file of the folder (`jsonl_lines`: a line that does not parse is skipped; a missing file
    has none): a run's metrics.jsonl, its samples files."""
    return [row for _, row in jsonl_lines(path)]


def first_jsonl_row(path: str | Path) -> dict[str, Any]:
    """The first row of a JSONL file of the folder (`jsonl_lines`), read alone; {} when it has none."""
    return next((row for _, row in jsonl_lines(path)), {})


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest `checkpoint-N` folder whose save finished (it holds trainer_state.json), or None."""
    if not os.path.isdir(output_dir):
        return None
    best, best_step = None, -1
    for name in os.listdir(output_dir):
        if not name.startswith(CHECKPOINT_PREFIX):
            continue
        try:
            step = int(name.removeprefix(CHECKPOINT_PREFIX))
        except ValueError:
            continue
        path = os.path.join(output_dir, name)
        if os.path.isfile(os.path.join(path, TRAINER_STATE_FILE)) and step > best_step:
            best, best_step = path, step
    return best


# weight files of a saved model (safetensors, shards, PyTorch's .bin, a LoRA adapter's): what final/ may share
WEIGHT_SUFFIXES = (".safetensors", ".bin")


def share_weights(final: str | Path, checkpoint: str | Path) -> list[str]:
    """Store once the weight files ``final`` holds byte for byte as ``checkpoint`` does (a run whose last checkpoint
    is its last step): each becomes a hard link to the checkpoint's file, or where the filesystem has none a
    symbolic link to it (relative: the run folder may move); where neither can be made the copy stays. Returns the
    names of the files stored once. Loaders read either link as the file itself (from_pretrained, --resume,
    `pacs-rl eval RUN/final`); before final/ is written again, :func:`unshare_weights`."""
    final, checkpoint = Path(final), Path(checkpoint)
    shared = []
    for path in sorted(p for p in final.iterdir() if p.suffix in WEIGHT_SUFFIXES and not p.is_symlink()):
        theirs = checkpoint / path.name
        if not theirs.is_file():
            continue
        if not os.path.samefile(path, theirs):
            if path.stat().st_size != theirs.stat().st_size or not filecmp.cmp(path, theirs, shallow=False):
                continue
            if not _link(theirs, path):
                continue
        shared.append(path.name)
    return shared


def _link(target: Path, path: Path) -> bool:
    """Replace ``path`` by a hard link to ``target``, else a relative symbolic link; False when neither can be made."""
    tmp = path.with_name(f".{path.name}.link")
    tmp.unlink(missing_ok=True)
    try:
        os.link(target, tmp)
    except OSError:
        try:
            os.symlink(os.path.relpath(target, path.parent), tmp)
        except OSError:
            return False
    os.replace(tmp, path)
    return True


def unshare_weights(folder: str | Path) -> None:
    """Remove the weight files of ``folder`` that are stored once with a checkpoint (a link), so that writing the
    folder again writes new files instead of through the link into the checkpoint's."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.suffix in WEIGHT_SUFFIXES and (path.is_symlink() or path.stat().st_nlink > 1):
            path.unlink()


def output_dir_problem(path: str | Path, option: str = "--output-dir") -> str | None:
    """Why ``path`` cannot be an output folder (it, or a folder above it, is a file); None when it can."""
    p = Path(path).expanduser()
    for part in (p, *p.parents):
        if part.exists() and not part.is_dir():
            which = "is a file" if part == p else f"is under {part}, which is a file"
            return f"{option} {path} {which}; give a folder (a new one, or a run to --resume)"
    return None


def output_folder_problem(out: str | Path, resume: bool, num_processes: int | None = None) -> str | None:
    """Why a run cannot write into ``out`` (a file, a folder of checkpoints without --resume, --resume without
    a complete checkpoint, or, given ``num_processes``, a checkpoint written by another number of processes);
    None when it can."""
    problem = output_dir_problem(out)
    if problem:
        return problem
    out = Path(out)
    if not resume:
        if out.is_dir() and any(out.glob(f"{CHECKPOINT_PREFIX}*")):
            return f"{out} already holds checkpoints: pass --resume to continue it, or another --output-dir"
        return None
    checkpoint = last_complete_checkpoint(out)
    if checkpoint is None:
        return f"--resume: no complete checkpoint-* folder in {out}"
    saved = len(list(Path(checkpoint).glob(PACS_STATE_FILE.format(rank="*"))))
    if num_processes is not None and saved and saved != num_processes:
        return (
            f"--resume: {checkpoint} was written by {saved} processes and this run has {num_processes}. Each process "
            f"saved its own rollout batch and random state, which cannot be re-sharded exactly: resume on {saved} "
            f"processes (accelerate launch --num_processes {saved} ...), or start a new run in another --output-dir"
        )
    return None


def folder_state(out: str | Path) -> str:
    """What a run folder holds, for the rule of a rerun into it: 'new' (nothing of a run), 'finished',
    'checkpointed' (an unfinished run with a complete checkpoint), 'started' (a run stopped before its first
    checkpoint), or 'unknown' (checkpoints but no record of their settings)."""
    out = Path(out)
    if not out.is_dir():
        return "new"
    recorded = (out / SETTINGS_FILE).is_file()
    if recorded and (out / FINISHED_FILE).is_file():
        return "finished"
    if last_complete_checkpoint(out) is not None:
        return "checkpointed" if recorded else "unknown"
    if any(out.glob(f"{CHECKPOINT_PREFIX}*")):
        return "unknown" if not recorded else "started"
    return "started" if recorded else "new"


def run_folder(model: str) -> Path | None:
    """The run folder ``model`` is (RUN) or holds the final weights of (RUN/final, RUN/checkpoint-N), by its
    settings.json; None for any other model."""
    path = Path(model)
    for folder in (path, path.parent):
        if (folder / SETTINGS_FILE).is_file() and (folder / FINAL_DIR).is_dir():
            return folder
    return None


def resolved_grader(name: str) -> str:
    """A grader setting in its canonical name (``auto``, the old default's name, is the training grader)."""
    return TRAINING_GRADER if name == "auto" else parse_grader(name).name


def heldout_protocol(run: Mapping[str, Any], max_new_tokens: int, seed: int, n: int) -> dict[str, Any] | None:
    """How a run measures held-out accuracy, as `pacs-rl eval` takes it: the source (with the arithmetic task's
    split, seed, ops and digits spelled out, so that it draws the same problems), how many, the sampling, the
    grader and the prompt. ``run``: the run keys (`RunSettings` as a mapping). None when the run has no held-out
    set (``n`` = 0)."""
    if not n:
        return None
    limit = None
    if run["eval_dataset"] is None:  # the arithmetic task's held-out split (training/data.py)
        task = arithmetic_task(run["dataset"], run["arithmetic_ops"], run["arithmetic_digits"])
        source = f"arithmetic?split=test&seed={HELDOUT_SEED}&n={n}&ops={task['ops']}&digits={task['digits']}"
        fields: dict[str, Any] = {}
    else:
        source, limit = run["eval_dataset"], run["eval_size"]
        own = benchmark_name(source) is not None or is_procedural(source)
        fields = {} if own else {k: run[k] for k in FIELD_KEYS if run[k] is not None}
    temperature = run["eval_temperature"]
    return {
        "source": source,
        "limit": limit,
        "n": n,
        "fields": fields,
        "temperature": temperature,
        "top_p": run["eval_top_p"] if temperature > 0 else 1.0,
        "max_new_tokens": run["eval_max_new_tokens"] or max_new_tokens,
        "grader": resolved_grader(run["grader"]),
        "seed": seed,
        "instruction": run["instruction"],
        "system_prompt": run["system_prompt"],
    }


class ProtocolUnknown(ValueError):
    """A run folder whose record is too old to say how its held-out accuracy was measured."""


def recorded_protocol(folder: str | Path) -> dict[str, Any] | None:
    """How the run in ``folder`` measured its held-out accuracy: settings.json's ``heldout``; for a run recorded
    before that key, rebuilt from its run keys, config and heldout.json. None when it had no held-out set; raises
    ProtocolUnknown when its record lacks what the rebuild needs (a run key added since)."""
    folder = Path(folder)
    recorded = read_json(folder / SETTINGS_FILE)
    if "heldout" in recorded:
        return recorded["heldout"]
    run, config = recorded.get("run", {}), recorded.get("config", {})
    held = read_json(folder / HELDOUT_FILE)
    n = (held.get("before") or held.get("after") or {}).get("n", run.get("eval_size"))
    tokens = config.get("max_completion_length")
    if tokens is None:
        from trl import GRPOConfig  # the default it ran with (TRL: only for such old runs)

        tokens = GRPOConfig.__dataclass_fields__["max_completion_length"].default
    unknown = f"{folder / SETTINGS_FILE} is from an older pacs-rl and does not say how held-out accuracy was measured"
    if n is None:
        raise ProtocolUnknown(f"{unknown} (no held-out count)")
    try:
        return heldout_protocol(run, int(tokens), int(config.get("seed", 42)), int(n))
    except KeyError as e:
        raise ProtocolUnknown(f"{unknown} (its run keys lack {e.args[0]})") from None
