"""Training on TRL: `PACSConfig` / `PACSTrainer` (one trainer, one rollout path, every loss)."""

from pacs_rl.training.config import LOSS_TYPES, PACSConfig
from pacs_rl.training.trainer import PACSTrainer, last_complete_checkpoint

__all__ = ["LOSS_TYPES", "PACSConfig", "PACSTrainer", "last_complete_checkpoint"]
