"""Shared pieces of the tests: a deterministic 0/1 reward and the tiny-run settings every trainer test starts from
(tests/test_train.py, tests/test_ppo.py), and a script of the repository loaded as a module."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import time
from pathlib import Path
from types import ModuleType

G = 4  # group size of the tiny runs
REPO = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """A script of the repository (``benchmarks/cpu_bf16.py``) loaded as a module, to test its functions."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_until_killed(trainer, step: int, event: str = "step_end", sampling_round: int = 1) -> int | None:
    """Train ``trainer`` until it is stopped in global step ``step``, as a kill or a signal at that moment would stop
    it. ``event``: ``step_end`` (its ``on_step_end`` callback raises KeyboardInterrupt) or ``save`` (right after that
    step's checkpoint), as a kill would stop it; ``sampling`` or ``update``: a real SIGTERM to this process in the
    middle of the step, under the run's signal handling (`pacs_rl.stopping`), at the second forward of the step's
    rollout (the policy sampling it; ``sampling_round``: in dynamic sampling's further round of that number) or at
    the first forward of its update (a micro-batch of the step still to come). For those, returns how many forwards
    of the policy ran to their end after the signal."""
    import pytest

    if event in ("sampling", "update"):
        return _train_until_signalled(trainer, step, event, sampling_round)
    from transformers import TrainerCallback

    def kill(self, args, state, control, **kw):
        if state.global_step == step:
            raise KeyboardInterrupt

    trainer.add_callback(type("Kill", (TrainerCallback,), {f"on_{event}": kill})())
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    return None


def _train_until_signalled(trainer, step: int, phase: str, sampling_round: int) -> int:
    """`train_until_killed`'s ``sampling`` and ``update``: the phase of each forward is read from the trainer's
    method running it (its rollout's generation, its loss)."""
    import pytest
    import torch

    from pacs_rl import stopping

    now = {"phase": None}
    seen = {"forwards": 0, "after": None, "rounds": 0}

    def marking(name, method):
        def run(*args, **kwargs):
            if name == "sampling" and trainer.state.global_step == step - 1:
                seen["rounds"] += 1
            now["phase"] = name
            try:
                return method(*args, **kwargs)
            finally:
                now["phase"] = None

        return run

    trainer._generate_single_turn = marking("sampling", trainer._generate_single_turn)
    trainer._compute_loss = marking("update", trainer._compute_loss)

    def signal_mid_step(module, args):  # the first pre-hook: runs before the stop's check
        if (
            now["phase"] == phase
            and trainer.state.global_step == step - 1
            and torch.is_grad_enabled() == (phase == "update")
            and (phase == "update" or seen["rounds"] == sampling_round)
        ):
            seen["forwards"] += 1
            if seen["forwards"] == (2 if phase == "sampling" else 1) and seen["after"] is None:
                seen["after"] = 0
                os.kill(os.getpid(), signal.SIGTERM)

    def count_after(module, args, output):
        if seen["after"] is not None:
            seen["after"] += 1

    model = trainer.model
    hooks = [model.register_forward_pre_hook(signal_mid_step), model.register_forward_hook(count_after)]
    hooks += stopping.watch(model)
    try:
        with stopping.stop_on_signals(), pytest.raises(stopping.StopRequested):
            trainer.train()
    finally:
        for hook in hooks:
            hook.remove()
    assert seen["after"] is not None, f"no {phase} forward in step {step}: nothing was signalled"
    assert trainer.state.global_step == step - 1  # the step in progress was dropped
    return seen["after"]


def keep_first_checkpoint(run_dir: Path, last_step: int) -> str:
    """Remove ``run_dir``'s checkpoints 2..``last_step`` (as if the kill had come after step 1) and return the one left,
    checked to be the run's last complete checkpoint."""
    import shutil

    from pacs_rl.run_folder import last_complete_checkpoint

    for step in range(2, last_step + 1):
        shutil.rmtree(run_dir / f"checkpoint-{step}", ignore_errors=True)
    assert last_complete_checkpoint(run_dir) == str(run_dir / "checkpoint-1")
    return str(run_dir / "checkpoint-1")


def parity_reward(completions, **kwargs):
    """1 when the completion holds an odd number of odd digits: a deterministic 0/1 label."""
    return [float(sum(c[0]["content"].count(d) for d in "13579") % 2) for c in completions]


def tiny_run_kwargs(tmp_path, **overrides) -> dict:
    """Config keywords of a 2-step run on a tiny model: two groups of G per micro-batch, 8-token completions,
    2 mini-batches per rollout, no checkpoints, no trackers."""
    kw = dict(
        output_dir=str(tmp_path),
        use_cpu=True,
        per_device_train_batch_size=2 * G,
        num_generations=G,
        max_completion_length=8,
        max_steps=2,
        learning_rate=1e-2,
        mini_batches_per_rollout=2,
        report_to=[],
        seed=0,
        disable_tqdm=True,
        save_strategy="no",
    )
    kw.update(overrides)
    return kw


def grouped_batch(vocab_size: int, pad_id: int, groups: int, group_size: int, lengths: list[int], P=7, T=6):
    """(input_ids, attention_mask, completion_mask) of ``groups`` random prompts of P tokens (the first
    left-padded by 2) × ``group_size`` random completions right-padded from ``lengths`` to T tokens."""
    import torch

    torch.manual_seed(0)
    prompts = torch.randint(3, vocab_size, (groups, P))
    prompt_mask = torch.ones_like(prompts)
    prompt_mask[0, :2] = 0  # left padding
    completions = torch.randint(3, vocab_size, (groups * group_size, T))
    completion_mask = torch.ones_like(completions)
    for row, length in enumerate(lengths):
        completion_mask[row, length:] = 0
    ids = torch.cat([prompts.repeat_interleave(group_size, 0), completions], 1)
    attention = torch.cat([prompt_mask.repeat_interleave(group_size, 0), completion_mask], 1)
    ids[attention == 0] = pad_id
    return ids, attention, completion_mask


def child_output(proc: subprocess.CompletedProcess) -> str:
    """What a failed child process said, whole (the cause of a crash on one rank often sits far above the launcher's
    own traceback at the end): its exit status, all of its stderr, then its stdout."""
    return f"exit status {proc.returncode}\n--- stderr ---\n{proc.stderr}\n--- stdout ---\n{proc.stdout}"


def gloo_threads() -> list[str]:
    """The names of this process's threads that gloo runs (a process group's worker and transport threads), read
    from /proc; empty where there is no /proc."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return []
    names = []
    for task in tasks.iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return sorted(name for name in names if "gloo" in name)


def kill_when(cmd: list[str], ready, env: dict) -> None:
    """Start ``cmd``, SIGKILL it and every process under it (torchrun's workers, the reward pool's: they run in
    sessions of their own and would outlive it) as soon as ``ready()`` holds, polled every 20 ms; wait for it."""
    import psutil  # accelerate's own dependency

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 600
        while not ready() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before the moment to kill it"
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.send_signal(signal.SIGKILL)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()


def resolve(config, options, sets):
    """(RunSettings, config kwargs) of a `pacs-rl train` command line's settings layers, as the command splits them
    (CPU defaults < --config < options < --set)."""
    from pacs_rl.training import checks, cli

    values = cli.merge_settings(cli.user_settings(config, options, sets))
    values.pop("output_dir", None)
    return checks.split_settings(values)


def rounded(value):
    """``value`` with every float rounded to 12 significant digits."""
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return float(f"{value:.12g}") if isinstance(value, float) else value
