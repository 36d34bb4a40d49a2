"""PACS inside verl, with no fork: verl's registries select it by configuration.

    algorithm.adv_estimator=pacs
    actor_rollout_ref.actor.policy_loss.loss_mode=pacs

- :mod:`.options` (pure Python): the PACS fields of ``actor.policy_loss``, declared once with their checks; verl's
  config class for them is generated from the declaration.
- :mod:`.guard` (pure Python): :func:`check_verl_config` refuses settings that split groups, that verl 0.9
  would assert on in its workers, or that change what the PACS loss reads.
- :mod:`.core` (imports verl): the ``pacs`` estimator and loss; importing it registers them.
- :mod:`.plugin`: the ``verl.plugins`` entry point, so every verl process registers PACS on ``import verl``.
- ``python -m pacs_rl.integrations.verl <hydra overrides>``: registers, checks the config, runs verl's PPO main.

See docs/VERL.md.
"""

from .guard import VerlConfigError, check_verl_config, verl_config_problems
from .options import PACS_NAME

__all__ = ["PACS_NAME", "VerlConfigError", "check_verl_config", "register", "verl_config_problems"]


def register() -> None:
    """Register the ``pacs`` advantage estimator and policy loss in verl (imports verl). Idempotent."""
    from . import core

    core.register()
