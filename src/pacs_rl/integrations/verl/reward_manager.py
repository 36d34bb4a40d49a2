"""verl's naive reward manager, telling the reward function which responses were cut at the length limit.

    reward.reward_manager.source=importlib
    reward.reward_manager.name=PACSRewardManager
    reward.reward_manager.module.path=pkg://pacs_rl.integrations.verl.reward_manager

verl 0.9 gives a reward function the decoded response only: its length and its EOS token are gone, so a response
cut at ``rollout.response_length`` reads like a finished one. This manager decides it from the token ids, by the
rule every path of pacs-rl uses (:func:`pacs_rl.integrations.verl.reward.response_cut_off`), and passes it on as
``extra_info["truncated"]`` (on a copy of the row's extra_info: verl shares one dict among a prompt's n
responses). Imports verl.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from omegaconf import OmegaConf
from transformers import GenerationConfig
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.utils.fs import copy_to_local

from pacs_rl.integrations.verl.reward import TRUNCATED_KEY, response_cut_off

__all__ = ["PACSRewardManager", "stop_token_ids"]


def stop_token_ids(tokenizer, config: Any) -> set[int]:
    """The ids a response ends on when it finished: the tokenizer's EOS, and the model's generation-config EOS
    ids (what verl's vLLM rollout stops on) when that config can be read."""
    ids = {tokenizer.eos_token_id} - {None}
    path = OmegaConf.select(config, "actor_rollout_ref.model.path")
    eos = None
    if path is not None:
        try:
            eos = GenerationConfig.from_pretrained(copy_to_local(str(path))).eos_token_id
        except Exception:  # no generation config there: the tokenizer's EOS only
            eos = None
    return ids | (set(eos if isinstance(eos, list) else [eos]) - {None})


class PACSRewardManager(NaiveRewardManager):
    """verl's ``naive`` reward manager, plus ``extra_info["truncated"]``: whether the response was cut at
    ``actor_rollout_ref.rollout.response_length``."""

    def __init__(self, config, tokenizer, compute_score, **kwargs):
        super().__init__(config, tokenizer, compute_score, **kwargs)
        self.stop_token_ids = stop_token_ids(tokenizer, config)
        length = OmegaConf.select(config, "actor_rollout_ref.rollout.response_length")
        self.max_response_length = int(length) if length is not None else None

    async def run_single(self, data):
        data = data[-1:]  # the row verl grades (a new DataProto: its non_tensor_batch is its own dict)
        item = data[0]
        cut = response_cut_off(
            item.batch["responses"],
            item.batch["attention_mask"],
            self.stop_token_ids,
            self.max_response_length,
        )
        info = item.non_tensor_batch.get("extra_info")
        info = {**(info if isinstance(info, dict) else {}), TRUNCATED_KEY: cut}
        data.non_tensor_batch["extra_info"] = np.array([info], dtype=object)
        return await super().run_single(data)
