"""Training on TRL: `PACSConfig` / `PACSTrainer` (one trainer, one rollout path, every loss).

Attributes load lazily so `pacs-rl --help` (which imports pacs_rl.training.cli) does not import TRL.
"""

from __future__ import annotations

__all__ = ["LOSS_TYPES", "PACSConfig", "PACSTrainer", "PPOConfig", "PPOTrainer", "last_complete_checkpoint"]


def __getattr__(name: str):
    if name in ("LOSS_TYPES", "PACSConfig"):
        from pacs_rl.training import config

        return getattr(config, name)
    if name in ("PACSTrainer", "last_complete_checkpoint"):
        from pacs_rl.training import trainer

        return getattr(trainer, name)
    if name in ("PPOConfig", "PPOTrainer"):
        from pacs_rl.training import ppo

        return getattr(ppo, name)
    raise AttributeError(f"module 'pacs_rl.training' has no attribute {name!r}")
