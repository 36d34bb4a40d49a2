"""Training on TRL: `PACSConfig` / `PACSTrainer` (one trainer, one rollout path, every group loss),
`PPOConfig` / `PPOTrainer` (the same with a learned critic), and a whole run as one call:

    from pacs_rl.training import RunSettings, build_config, run_training
    result = run_training(RunSettings(), build_config({"max_steps": 4}, "runs/x"))

Names load lazily so that `pacs-rl --help` (which imports pacs_rl.training.cli) does not import TRL.
"""

from __future__ import annotations

from pacs_rl.lazy import lazy_face

_EXPORTS = {
    "PACSConfig": "pacs_rl.training.config",
    "PACSTrainer": "pacs_rl.training.trainer",
    "PPOConfig": "pacs_rl.training.ppo",
    "PPOTrainer": "pacs_rl.training.ppo",
    "CPU_DEFAULTS": "pacs_rl.training.schema",
    "RunSettings": "pacs_rl.training.schema",
    "TrainResult": "pacs_rl.training.run",
    "build_config": "pacs_rl.training.run",
    "config_and_trainer_classes": "pacs_rl.training.run",
    "run_training": "pacs_rl.training.run",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
