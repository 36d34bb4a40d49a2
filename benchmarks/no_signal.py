"""No signal, no step; ψ = 0 before the policy's first step of a rollout: the figures of docs/benchmarks/no_signal.md.

    python benchmarks/no_signal.py zero --before-root ROOT    # every reward 0: how far each loss moves the weights
    python benchmarks/no_signal.py cost --before-root ROOT    # time per step of each way to get the old log-probs

ROOT is a checkout of the code before the change (e.g. `git archive c76b41c src | tar -x -C ROOT`): each arm runs in
a child process with PYTHONPATH set to its code's src/, so "before" is that commit's code, not an emulation.

- ``zero``: the tiny random model, the CPU default's settings (fp32, the fast sampler's log-probs as the old ones,
  the update in pieces), every reward 0, 4 optimizer steps (2 rollouts): the largest |Δw| and the share of weight
  tensors moved, per loss, before and now. No group holds two different rewards, so nothing should move.
- ``cost``: the bundled model, the CPU default's first rollout (the same for every arm: same seed, same weights)
  and its two optimizer steps, per arm: CPU seconds and wall seconds of each step (a callback around each), and the
  PACS figures of step 2 (ψ, the gradient norm). The arms: ``before`` (the sampler's log-probs are the old ones and
  π_ref of every mini-batch), ``before_forward`` (old_logprobs_from_sampler=false: the old log-probs from a separate
  forward over the rollout batch, as the authors' code recomputes them), ``same_forward`` (now, with
  skip_no_signal_steps=false: while the policy has not stepped the loss takes them from its own forward) and
  ``shipped`` (now, the defaults). Rounds over seeds, arms in a rotating order; ratios against ``same_forward`` of
  the same round (the same rollout).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "benchmarks" / "no_signal.json"
LOSSES = ("pacs", "grpo", "rloo")
ARMS = {  # arm -> (code: "before" or "now", config overrides)
    "before": ("before", {}),
    "before_forward": ("before", {"old_logprobs_from_sampler": False}),
    "same_forward": ("now", {"skip_no_signal_steps": False}),
    "shipped": ("now", {}),
}


def zero_reward(completions, **kwargs):
    """Every completion 0: no group holds two different rewards."""
    return [0.0] * len(completions)


# ------------------------------------------------------------------------------------------------------ the child
def child(spec: dict) -> dict:
    """One training run as ``spec`` says (model, steps, seed, reward, config overrides), in this process's code;
    returns its per-step times and metrics, and how far its weights moved."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ["OMP_NUM_THREADS"] = str(spec["threads"])  # before torch loads
    import torch

    torch.set_num_threads(spec["threads"])
    from transformers import TrainerCallback

    from pacs_rl.models import TINY_MODEL, load_tokenizer, resolve_model, tiny_model_folder
    from pacs_rl.run_folder import METRICS_FILE, read_jsonl
    from pacs_rl.training import run
    from pacs_rl.training.data import build_dataset, load_run_data
    from pacs_rl.training.output import MetricsJsonlCallback
    from pacs_rl.training.schema import CPU_DEFAULTS, RunSettings

    out = Path(spec["out"])
    settings = RunSettings(model=spec["model"], eval_size=0, plot=False)
    kwargs = {**CPU_DEFAULTS, "max_steps": spec["steps"], "seed": spec["seed"], "save_strategy": "no"}
    config = run.build_config({**kwargs, **spec["overrides"]}, out)
    tiny = spec["model"] == TINY_MODEL
    model_id = str(tiny_model_folder(out / "base")) if tiny else resolve_model(spec["model"])
    torch.manual_seed(config.seed)
    problems, _ = load_run_data(settings, config.seed)
    rewards = [zero_reward] if spec["reward"] == "zero" else run.build_reward_funcs(settings, config)
    _, trainer_cls = run.config_and_trainer_classes(config.loss_type)
    times: list[tuple[float, float]] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.start = (time.process_time(), time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            times.append((time.process_time() - self.start[0], time.perf_counter() - self.start[1]))

    trainer = trainer_cls(model_id, rewards, args=config, train_dataset=build_dataset(problems, settings),
                          processing_class=load_tokenizer(model_id), callbacks=[MetricsJsonlCallback(), Timer()])  # fmt: skip
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    moved = [(after[k].detach() - v).abs().max().item() for k, v in before.items()]
    keep = ("loss", "grad_norm", "pacs/psi_abs_max", "groups/mixed_frac_minibatch", "optimizer/skipped_no_signal",
            "completions/mean_length")  # fmt: skip
    rows = [{k: r[k] for k in keep if k in r} for r in read_jsonl(out / METRICS_FILE) if "loss" in r]
    return {
        "cpu_seconds": [t[0] for t in times],
        "wall_seconds": [t[1] for t in times],
        "steps": rows,
        "max_abs_weight_change": max(moved),
        "tensors_moved": f"{sum(m > 0 for m in moved)} of {len(moved)}",
    }


def run_child(root: Path, spec: dict) -> dict:
    """``child(spec)`` in a fresh process on the code under ``root``/src."""
    env = {
        **os.environ,
        "PYTHONPATH": str(root / "src"),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    cmd = [sys.executable, __file__, "child", json.dumps(spec)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"child {spec} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------------ the parts
def zero(before_root: Path, tmp: Path) -> dict:
    out = {}
    for loss in LOSSES:
        for code, root in (("before", before_root), ("now", REPO)):
            spec = {"out": str(tmp / f"zero-{loss}-{code}"), "model": "tiny", "steps": 4, "seed": 0, "threads": 1,
                    "reward": "zero", "overrides": {"loss_type": loss}}  # fmt: skip
            got = run_child(root, spec)
            out[f"{loss}/{code}"] = {k: got[k] for k in ("max_abs_weight_change", "tensors_moved", "steps")}
            print(f"{loss:5s} {code:6s} max |dw| {got['max_abs_weight_change']:.3g}  tensors moved "
                  f"{got['tensors_moved']}  grad norms {[r.get('grad_norm') for r in got['steps']]}", flush=True)  # fmt: skip
    return out


def cost(before_root: Path, tmp: Path, seeds: list[int], threads: int, tokens: int | None) -> dict:
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for i, seed in enumerate(seeds):
        order = list(ARMS)[i % len(ARMS) :] + list(ARMS)[: i % len(ARMS)]
        for arm in order:
            code, overrides = ARMS[arm]
            if tokens:
                overrides = {**overrides, "max_completion_length": tokens}
            spec = {"out": str(tmp / f"cost-{arm}-{seed}"), "model": "smollm2-135m", "steps": 2, "seed": seed,
                    "threads": threads, "reward": "math", "overrides": overrides}  # fmt: skip
            got = run_child(before_root if code == "before" else REPO, spec)
            got["seed"] = seed
            runs[arm].append(got)
            second = got["steps"][1]
            print(f"seed {seed} {arm:15s} cpu s/step {[round(c, 1) for c in got['cpu_seconds']]}  step 2: psi "
                  f"{second.get('pacs/psi_abs_max')}, grad norm {second.get('grad_norm')}", flush=True)  # fmt: skip
    return {"runs": runs, "ratios": ratios(runs)}


def ratios(runs: dict[str, list[dict]]) -> dict:
    """Per arm: the median over rounds of its CPU (and wall) seconds for the rollout's two steps over same_forward's
    on the same rollout, and the median seconds of each step. (No ratio per step: where a mini-batch holds no group
    with two different rewards, same_forward's step runs neither a forward nor a backward and takes ~0.01 s.)"""
    out = {}
    base = runs["same_forward"]
    for arm, arm_runs in runs.items():
        per = {}
        for kind in ("cpu_seconds", "wall_seconds"):
            per[f"{kind}_total_ratio"] = statistics.median(
                sum(a[kind]) / sum(b[kind]) for a, b in zip(arm_runs, base, strict=True)
            )
            for step in (0, 1):
                per[f"{kind}_step{step + 1}_median"] = statistics.median(a[kind][step] for a in arm_runs)
        out[arm] = per
    return out


def save(part: str, result: dict, command: str) -> None:
    from pacs_rl.sampling.transformers_backend import cpu_capability

    record = json.loads(OUT.read_text()) if OUT.is_file() else {}
    result.update(command=command, date=time.strftime("%Y-%m-%d"), loadavg=os.getloadavg())
    record[part] = result
    record.update(cpu_capability=cpu_capability(), date=time.strftime("%Y-%m-%d"))
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {OUT} ({part})")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("part", choices=["zero", "cost"])
    p.add_argument("--before-root", type=Path, required=True, help="a checkout of the code before the change")
    p.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1], help="cost: one round (one rollout) per seed"
    )
    p.add_argument(
        "--threads", type=int, default=1, help="cost: torch threads of each run (1: CPU time is comparable)"
    )
    p.add_argument("--tokens", type=int, help="cost: max_completion_length (default: the CPU default's)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="no-signal-") as tmp:
        if a.part == "zero":
            result = zero(a.before_root, Path(tmp))
        else:
            result = cost(a.before_root, Path(tmp), a.seeds, a.threads, a.tokens)
    command = f"python benchmarks/no_signal.py {a.part} --before-root ROOT"
    if a.part == "cost":
        command += f" --seeds {' '.join(map(str, a.seeds))} --threads {a.threads}"
        command += f" --tokens {a.tokens}" if a.tokens else ""
    save(a.part, result, command)


if __name__ == "__main__":
    main()
