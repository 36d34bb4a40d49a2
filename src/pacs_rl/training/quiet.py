"""Library chatter that carries nothing for the user of `pacs-rl train` / `compare`, filtered out: the run shows
one progress display per long step (its own bars) and its own notes.

- transformers' tqdm bars ("Writing model shards" at every checkpoint, "Loading weights"): the run's bar shows
  the progress;
- transformers' note that it sorts checkpoints by number because mtime "may not be reliable";
- on resume, "There were missing keys in the checkpoint model loaded: ['lm_head.weight']" for a model whose LM
  head is tied to its embeddings: the tied weight is not saved, and it is restored with the embeddings
  (:func:`expect_tied_missing_keys`; any other missing key is still reported).
"""

from __future__ import annotations

import ast
import logging
import warnings

_MISSING = "There were missing keys in the checkpoint model loaded:"


class _DropMessages(logging.Filter):
    """Drop records whose message starts with one of ``prefixes``."""

    def __init__(self, *prefixes: str):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


class _TiedMissingKeys(logging.Filter):
    """Drop the missing-keys warning when every missing key is a tied weight of the model."""

    def __init__(self, tied: set[str]):
        super().__init__()
        self.tied = tied

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(_MISSING):
            return True
        try:
            keys = set(ast.literal_eval(message[len(_MISSING) :].strip().rstrip(".")))
        except (ValueError, SyntaxError):
            return True
        return not (keys and keys <= self.tied)


def quiet_libraries() -> None:
    """Switch off transformers' progress bars and its checkpoint-ordering note (for a command's run)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    logger = logging.getLogger("transformers.trainer_utils")
    if not any(isinstance(f, _DropMessages) for f in logger.filters):
        logger.addFilter(_DropMessages("mtime may not be reliable"))
    # TRL's generation reads transformers' deprecated `is_gradient_checkpointing`; nothing a user can change
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated")


def tied_weight_names(model) -> set[str]:
    """The parameter names of ``model`` that are tied to another (not saved in a checkpoint); empty when its
    config does not tie them."""
    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False):
        return set()
    tied = getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or {}
    return set(tied)


def expect_tied_missing_keys(model) -> None:
    """From now on, a resume that finds only ``model``'s tied weights missing from a checkpoint says nothing."""
    logger = logging.getLogger("transformers.trainer")
    for f in [f for f in logger.filters if isinstance(f, _TiedMissingKeys)]:
        logger.removeFilter(f)
    tied = tied_weight_names(model)
    if tied:
        logger.addFilter(_TiedMissingKeys(tied))
