"""Learning on the default task: held-out accuracy before/after for several losses and seeds, same budget.

Each (loss, seed) is one `pacs-rl train` run (the CPU default unless overridden) into OUT/<loss>-s<seed>;
finished runs are skipped, so the script can be stopped and rerun. Writes OUT/summary.json and prints a
table of mean and spread (min..max) of the after-training accuracy and of the gain.

    python benchmarks/train_learning.py --out runs/learning                      # pacs, grpo x seeds 0 1 2
    python benchmarks/train_learning.py --losses pacs grpo --seeds 0 --set max_steps=10
    python benchmarks/train_learning.py --set model=/path/to/tiny --set eval_size=4 ...  (smoke)
    python benchmarks/train_learning.py --out runs/g4 --seeds 0 1 2 3 4 --set num_generations=4 \
        --against runs/learning/summary.json      # paired by seed: differences, sign-flip p-value

Each run's row also carries diagnostics read from its metrics.jsonl (why a seed learns or not): reward and
fraction of groups with both labels (the only groups PACS and GRPO learn from) over the first six and last
rollouts, rollouts without any such group, completions cut off at the length limit, steps whose gradient
norm was exactly zero.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def diagnostics(run_dir: Path) -> dict:
    """Per-run figures from ``metrics.jsonl``; empty when the run logged none."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rollouts = [r for r in rows if "groups/mixed_frac" in r]  # steps that drew a new rollout
    if not rollouts:
        return {}

    def mean(key: str, part: list[dict]) -> float:
        return round(statistics.mean(r[key] for r in part), 3)

    first, last = rollouts[:6], rollouts[-3:]
    return {
        "rollouts": len(rollouts),
        "reward_first_6": mean("reward", first),
        "reward_last_3": mean("reward", last),
        "mixed_groups_first_6": mean("groups/mixed_frac", first),
        "mixed_groups_last_6": mean("groups/mixed_frac", rollouts[-6:]),
        "rollouts_without_mixed_group": sum(r["groups/mixed_frac"] == 0 for r in rollouts),
        "cut_off_first_6": mean("completions/clipped_ratio", first),
        "cut_off_last_3": mean("completions/clipped_ratio", last),
        "mean_length_last_3": mean("completions/mean_length", last),
        "steps_zero_grad_norm": sum(r.get("grad_norm") == 0.0 for r in rows),
    }


def paired(rows: list[dict], against: list[dict]) -> dict:
    """Per loss, after-training accuracy of ``rows`` minus ``against`` on the seeds both have."""
    from pacs_rl.compare.stats import sign_flip_test

    base = {(r["loss"], r["seed"]): r["after"] for r in against}
    out = {}
    for loss in dict.fromkeys(r["loss"] for r in rows):
        pairs = [(r["seed"], r["after"] - base[loss, r["seed"]]) for r in rows if (loss, r["seed"]) in base]
        if not pairs:
            continue
        test = sign_flip_test([d for _, d in pairs])
        out[loss] = {"seeds": [s for s, _ in pairs], "diffs": [round(d, 4) for _, d in pairs], **test}
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="runs/learning")
    p.add_argument("--losses", nargs="+", default=["pacs", "grpo"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--set", dest="sets", action="append", default=[], help="key=value for every run")
    p.add_argument("--summary", default=None, help="also copy summary.json here (e.g. docs/benchmarks/...)")
    p.add_argument("--against", default=None, help="a summary.json to pair with by (loss, seed)")
    a = p.parse_args()

    from pacs_rl.training.checks import parse_assignments, split_settings
    from pacs_rl.training.run import build_config, run_training
    from pacs_rl.training.schema import default_settings

    overrides = parse_assignments(a.sets)
    out = Path(a.out)
    rows = []
    for seed in a.seeds:  # seed-major: a stopped benchmark still holds paired (loss, seed) runs
        for loss in a.losses:
            run_dir = out / f"{loss}-s{seed}"
            done = run_dir / "heldout.json"
            held = json.loads(done.read_text()) if done.is_file() else {}
            if "after" not in held:
                settings, cfg = split_settings(
                    {**default_settings(), "loss_type": loss, "seed": seed, **overrides}
                )
                t = time.time()
                result = run_training(
                    settings, build_config(cfg, run_dir), resume=any(run_dir.glob("checkpoint-*"))
                )
                held = dict(result.heldout)
                held["wall_seconds"] = time.time() - t
            rows.append({"loss": loss, "seed": seed, "before": held["before"]["accuracy"],
                         "after": held["after"]["accuracy"], "n": held["after"]["n"],
                         "diagnostics": diagnostics(run_dir)})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)

    table = {}
    for loss in a.losses:
        r = [x for x in rows if x["loss"] == loss]
        after = [x["after"] for x in r]
        gain = [x["after"] - x["before"] for x in r]
        table[loss] = {
            "after_mean": statistics.mean(after), "after_min": min(after), "after_max": max(after),
            "gain_mean": statistics.mean(gain), "gain_min": min(gain), "gain_max": max(gain), "seeds": len(r),
        }  # fmt: skip
    result = {"runs": rows, "by_loss": table, "settings": a.sets, "loadavg_end": os.getloadavg()}
    if a.against:
        result["against"] = {"summary": a.against}
        result["against"].update(paired(rows, json.loads(Path(a.against).read_text())["runs"]))
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(result, indent=2))
    if a.summary:
        Path(a.summary).parent.mkdir(parents=True, exist_ok=True)
        Path(a.summary).write_text(json.dumps(result, indent=2))
    print(f"{'loss':8} {'after (mean, min..max)':28} {'gain (mean, min..max)':28}")
    for loss, t in table.items():
        print(
            f"{loss:8} {t['after_mean']:.3f} ({t['after_min']:.3f}..{t['after_max']:.3f})        "
            f"{t['gain_mean']:+.3f} ({t['gain_min']:+.3f}..{t['gain_max']:+.3f})"
        )
    for loss, t in result.get("against", {}).items():
        if isinstance(t, dict):
            print(
                f"{loss} against {a.against}: mean difference {t['mean']:+.3f} (SE {t['se']:.3f}) over "
                f"seeds {t['seeds']}, sign-flip p = {t['p_value']:.3f}"
            )


if __name__ == "__main__":
    main()
