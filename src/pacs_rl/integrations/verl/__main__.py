"""``python -m pacs_rl.integrations.verl [hydra overrides]``: verl's PPO entry point with PACS.

Registers PACS, composes verl's own ``ppo_trainer`` config with the overrides (``--config-path`` /
``--config-name`` work as in ``python -m verl.trainer.main_ppo``), refuses a config that would split
groups (:func:`pacs_rl.integrations.verl.check_verl_config`), then runs verl's ``main_ppo.main``.
With ``PACS_VERL_CHECK_ONLY=1`` it stops after the check and prints the PACS settings.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from verl.trainer import main_ppo

from . import core
from .guard import VerlConfigError, check_verl_config, data_parallel_size
from .options import loss_settings


def main() -> None:
    core.register()
    config_dir = str(Path(main_ppo.__file__).resolve().parent / "config")

    @hydra.main(config_path=config_dir, config_name="ppo_trainer", version_base=None)
    def run(config) -> None:
        try:
            check_verl_config(config)
        except VerlConfigError as err:  # a user's setting: the list of what to change, no traceback
            print(f"pacs-rl: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        if os.environ.get("PACS_VERL_CHECK_ONLY", "") not in ("", "0"):
            actor = config.actor_rollout_ref.actor
            loss = actor.policy_loss
            pacs = " ".join(f"{name}={value}" for name, value in loss_settings(loss).items())
            print(
                "pacs-rl verl config OK: "
                f"adv_estimator={config.algorithm.adv_estimator} loss_mode={loss.loss_mode} {pacs} "
                f"n={config.actor_rollout_ref.rollout.n} "
                f"dp={data_parallel_size(config)} mini={actor.ppo_mini_batch_size} "
                f"micro_per_gpu={actor.ppo_micro_batch_size_per_gpu}"
            )
            return
        main_ppo.main.__wrapped__(config)  # verl's main without its own hydra wrapper

    run()


if __name__ == "__main__":
    sys.exit(main())
