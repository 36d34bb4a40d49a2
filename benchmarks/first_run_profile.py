"""Where the first run's seconds and bytes go: `pacs-rl train` (the CPU default) with every phase timed.

    python benchmarks/first_run_profile.py                                  # the CPU default, as shipped
    python benchmarks/first_run_profile.py --set max_steps=4 --set eval_size=50 --out runs/probe.json

Runs `run_training` in this process with the same settings as `pacs-rl train` (plus any --set) and wraps
the trainer's methods to time each phase: start-up (imports), model load, the held-out evaluation before
and after, per rollout the sampling, the rewards, the old-log-prob forward and the rest of TRL's rollout
bookkeeping, per micro-batch the log-prob forward, the loss and the backward, the gradient clip and
optimizer step, checkpoints, the final save and the plot. Times are exclusive (a phase's own time, its
nested phases subtracted) and add up to the wall time. Memory: the peak resident set of each phase
(Linux: VmHWM is reset through /proc/self/clear_refs when a phase starts, and a nested phase's peak also
counts for the phases around it), the resident set before the run, and the bytes of the weights,
gradients and optimizer state at the end. Writes the JSON to --out (default
docs/benchmarks/first_run_profile.json) with os.getloadavg() at the start and the end; the recorded
table is in docs/benchmarks/first_run.md.
"""

from __future__ import annotations

import time

T_START, CPU_START = time.perf_counter(), time.process_time()

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the peak resident set size (VmHWM) to the current one
        return True
    except OSError:
        return False


class Phases:
    """Exclusive wall/CPU time, calls and peak RSS per named phase; phases nest."""

    def __init__(self):
        self.stats: dict[str, dict] = {}
        self.stack: list[list] = []  # [name, t0, cpu0, child_wall, child_cpu, peak_kib]
        self.can_reset = _reset_peak()

    def _fold_peak(self) -> None:
        hwm = _status_kib("VmHWM")
        for frame in self.stack:
            frame[5] = max(frame[5], hwm)

    def enter(self, name: str) -> None:
        self._fold_peak()
        if self.can_reset:
            _reset_peak()
        self.stack.append([name, time.perf_counter(), time.process_time(), 0.0, 0.0, _status_kib("VmRSS")])

    def exit(self) -> None:
        self._fold_peak()
        name, t0, c0, child_wall, child_cpu, peak = self.stack.pop()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        s = self.stats.setdefault(name, {"calls": 0, "wall_s": 0.0, "cpu_s": 0.0, "peak_rss_mib": 0.0})
        s["calls"] += 1
        s["wall_s"] += wall - child_wall
        s["cpu_s"] += cpu - child_cpu
        s["peak_rss_mib"] = max(s["peak_rss_mib"], peak / 1024)
        if self.stack:
            self.stack[-1][3] += wall
            self.stack[-1][4] += cpu

    def wrap(self, owner, attr: str, name) -> None:
        """Time every call of owner.attr as phase ``name`` (a str, or a function of the call's args)."""
        original = getattr(owner, attr)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            self.enter(name(*args, **kwargs) if callable(name) else name)
            try:
                return original(*args, **kwargs)
            finally:
                self.exit()

        setattr(owner, attr, timed)


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--set", dest="sets", action="append", default=[], help="key=value, as pacs-rl train --set"
    )
    p.add_argument("--output-dir", default=None, help="run folder (default: a new temporary folder)")
    p.add_argument("--out", default="docs/benchmarks/first_run_profile.json")
    p.add_argument("--label", default="", help="a note stored with the figures (e.g. which code ran)")
    a = p.parse_args()
    load_start = os.getloadavg()

    import tempfile

    import torch

    from pacs_rl.sampling.transformers_backend import cpu_capability
    from pacs_rl.training import run as run_module
    from pacs_rl.training.checks import parse_assignments, split_settings
    from pacs_rl.training.trainer import PACSTrainer

    phases = Phases()
    startup_wall, startup_cpu = time.perf_counter() - T_START, time.process_time() - CPU_START
    startup_peak = _status_kib("VmHWM") / 1024
    heldout_calls = {"n": 0}

    def heldout_name(*args, **kwargs):
        heldout_calls["n"] += 1
        return "held-out before" if heldout_calls["n"] == 1 else "held-out after"

    from trl.trainer import grpo_trainer as trl_grpo  # TRL loads the weights from the model's name

    phases.wrap(trl_grpo, "create_model_from_path", "model load")
    phases.wrap(run_module, "load_tokenizer", "model load")
    phases.wrap(run_module, "heldout_accuracy", heldout_name)
    phases.wrap(run_module, "plot_curves", "plot")
    trainer_box = {}
    original_init = PACSTrainer.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        trainer_box["trainer"] = self
        phases.wrap(self.accelerator, "backward", "update: backward")
        phases.wrap(self, "_clip_grad_norm", "update: gradient clip")

    PACSTrainer.__init__ = init
    original_create_optimizer = PACSTrainer.create_optimizer

    def create_optimizer(self, *args, **kwargs):
        optimizer = original_create_optimizer(self, *args, **kwargs)
        phases.wrap(optimizer, "step", "update: optimizer step")
        return optimizer

    PACSTrainer.create_optimizer = create_optimizer
    phases.wrap(PACSTrainer, "_generate_and_score_completions", "rollout: other (TRL bookkeeping)")
    phases.wrap(PACSTrainer, "_generate_single_turn", "rollout: sampling")
    phases.wrap(PACSTrainer, "_calculate_rewards", "rollout: rewards")
    phases.wrap(
        PACSTrainer,
        "_get_per_token_logps_and_entropies",
        lambda *a, **k: "update: log-prob forward" if torch.is_grad_enabled() else "rollout: old log-probs",
    )
    phases.wrap(PACSTrainer, "compute_loss", "update: loss (outside the forward)")
    phases.wrap(PACSTrainer, "training_step", "update: other")
    phases.wrap(PACSTrainer, "_save_checkpoint", "checkpoints")
    phases.wrap(PACSTrainer, "save_model", "final save")

    from pacs_rl.device import with_device
    from pacs_rl.training.schema import default_settings

    # the device and precision `pacs-rl train` would choose here (bf16 where the CPU computes it)
    values, device = with_device(parse_assignments(a.sets), default_settings())
    print(f"device: {device.line()}", flush=True)
    settings, config_kwargs = split_settings(values)
    out_dir = a.output_dir or tempfile.mkdtemp(prefix="first-run-profile-")
    config = run_module.build_config(config_kwargs, out_dir)
    rss_before = _status_kib("VmRSS") / 1024
    phases.enter("run: other (data, trainer set-up)")
    t0 = time.perf_counter()
    result = run_module.run_training(settings, config)
    phases.exit()
    run_wall = time.perf_counter() - t0

    trainer = trainer_box["trainer"]
    params = list(trainer.model.parameters())
    state = [t for s in trainer.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    table = {"start-up (imports)": {"calls": 1, "wall_s": startup_wall, "cpu_s": startup_cpu,
                                    "peak_rss_mib": startup_peak}}  # fmt: skip
    table.update(phases.stats)
    total_wall = time.perf_counter() - T_START
    report = {
        "label": a.label,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": a.sets,
        "device": device.line(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": cpu_capability(),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "total_wall_s": total_wall,
        "run_training_wall_s": run_wall,
        "train_seconds": result.train_seconds,
        "total_cpu_s": time.process_time() - CPU_START,
        "peak_rss_mib": max(s.get("peak_rss_mib", 0.0) for s in table.values()),
        "peak_rss_tracked_per_phase": phases.can_reset,
        "rss_before_run_mib": rss_before,
        "weights_mib": _tensor_bytes(params) / 2**20,
        "optimizer_state_mib": _tensor_bytes(state) / 2**20,
        "heldout": result.heldout,
        "global_step": result.global_step,
        "phases": {k: {m: round(v, 2) for m, v in s.items()} for k, s in table.items()},
    }
    width = max(len(k) for k in table)
    print(f"{'phase':{width}}  calls   wall s  share   CPU s  peak RSS MiB")
    for name, s in sorted(table.items(), key=lambda kv: -kv[1]["wall_s"]):
        print(
            f"{name:{width}}  {s['calls']:5d} {s['wall_s']:8.1f} {100 * s['wall_s'] / total_wall:5.1f}% "
            f"{s['cpu_s']:7.1f}  {s.get('peak_rss_mib', 0):10.0f}"
        )
    print(
        f"total {total_wall:.1f} s wall, {report['total_cpu_s']:.1f} s CPU; peak RSS {report['peak_rss_mib']:.0f} MiB; "
        f"held-out {result.heldout}; load {load_start} -> {report['loadavg_end']}"
    )
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
