"""Which completions were cut off at the token limit, and which graders refuse them.

A completion cut at the token limit did not finish: whatever number it last wrote may be the start of a longer
one, the middle of a loop, or a guess it had not yet revised. The training grader (``sound``) never pays one, on
every path that samples (the fast sampler, TRL's ``generate``, vLLM, verl's rollout); the ``paper`` and ``strict``
graders grade it as the PACS authors did, and the runs count the cut-off answers they pay beside their verdicts.

:func:`is_cut_off` is the one rule every path uses. Light on purpose (no torch, no math-verify).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pacs_rl.rewards.graders import TRAINING_GRADER, parse_grader

CUT_OFF_REASON = "truncated"  # the verdict's reason for a completion a grader refuses as cut off
FINISHED, CUT_OFF = "stop", "length"  # the finish reasons of pacs_rl.sampling.Sample (and vLLM)
# the base graders that never pay a completion cut at the token limit: the training grader
REFUSING_GRADERS = (TRAINING_GRADER,)


def is_cut_off(
    token_ids: Sequence[int],
    max_tokens: int | None,
    stop_token_ids: Collection[int] = (),
    finish_reason: str | None = None,
) -> bool:
    """Whether a completion was cut at the token limit.

    The sampler's ``finish_reason`` decides where there is one (``"length"`` is cut off, ``"stop"`` is not);
    otherwise the token count: cut off iff ``token_ids`` reached ``max_tokens`` and does not end in one of
    ``stop_token_ids`` (the EOS ids: a completion that produced its stop token as its last allowed token
    finished). ``max_tokens`` None (no limit known) and no finish reason: not cut off.
    """
    if finish_reason is not None:
        return finish_reason == CUT_OFF
    if max_tokens is None:
        return False
    return len(token_ids) >= max_tokens and not (token_ids and token_ids[-1] in stop_token_ids)


def refuses_cut_off(grader: str) -> bool:
    """Whether ``grader`` (a name such as ``sound`` or ``paper+restatement``) refuses every cut-off completion."""
    return parse_grader(grader).base in REFUSING_GRADERS
