"""The math reward in the form TRL's ``GRPOTrainer`` (and our trainers) call reward functions.

TRL calls ``reward_func(prompts=..., completions=..., completion_ids=..., **columns)`` where every dataset
column arrives as a keyword list (so the gold answers arrive as ``answer=[...]``), plus ``trainer_state``,
``log_extra`` and ``log_metric``. Completions are strings, or conversational lists such as
``[{"role": "assistant", "content": "..."}]``. TRL logs each reward under the function's ``__name__``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from pacs_rl.rewards.cutoff import is_cut_off, refuses_cut_off
from pacs_rl.rewards.graders import (  # light, so that settings are checked before the verifier loads
    DEFAULT_GRADER,
    MATH_REWARD,
    grader_name,
    load_reward_function,
    split_reward_specs,
)
from pacs_rl.rewards.pool import DEFAULT_TIMEOUT, BatchResult, RewardPool, verify_batch


def completion_text(completion) -> str:
    """The text of a completion: a string as is; a conversational list -> its assistant contents joined.

    Content given as parts (``[{"type": "text", "text": ...}]``) is flattened. Anything else -> ``str()``.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, Sequence):
        texts = []
        for message in completion:
            if not isinstance(message, dict):
                texts.append(str(message))
                continue
            if message.get("role", "assistant") != "assistant":
                continue
            texts.append(_content_text(message.get("content")))
        return "\n".join(texts)
    return str(completion)


def prompt_text(prompt) -> str | None:
    """The text of a prompt (string, or every message content of a conversational prompt joined)."""
    if prompt is None:
        return None
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, dict):
        prompt = [prompt]
    if isinstance(prompt, Sequence):
        return "\n".join(_content_text(m.get("content")) if isinstance(m, dict) else str(m) for m in prompt)
    return str(prompt)


def _content_text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


class MathRewardFunction:
    """A picklable TRL reward function: 1.0 per completion whose final answer equals ``answer``.

    Args:
        grader: ``paper`` (default: math-verify as the PACS authors call it), ``strict``, or either with
            ``+rule``s (``paper+restatement``); see ``pacs_rl.rewards.math_verifier`` and docs/EVALUATION.md.
        timeout: per-completion time limit in seconds.
        pool: a :class:`RewardPool` to check batches in parallel; ``None`` checks in-process.
        answer_column: the dataset column holding the gold answers.
        name: the name TRL logs the reward under; default ``math_reward`` for ``paper``, else
            ``math_reward_<grader>``.
        max_completion_length, stop_token_ids: the sampler's token limit and EOS ids, to tell from TRL's
            ``completion_ids`` which completions were cut off at the limit when the caller does not say
            (``pacs_rl.rewards.cutoff.is_cut_off``).

    The rules ``restatement`` and ``echo`` read the question from the dataset column ``problem`` when TRL
    passes it, else from TRL's ``prompts``. A keyword ``truncated`` (one bool per completion; ``PACSTrainer``
    passes it to every reward function) says which completions were cut off at the token limit: the training
    grader (``sound``) scores those 0 with reason "truncated"; without it they are told from ``completion_ids``
    and ``max_completion_length``.
    """

    def __init__(
        self,
        grader: str = DEFAULT_GRADER,
        timeout: float = DEFAULT_TIMEOUT,
        pool: RewardPool | None = None,
        answer_column: str = "answer",
        name: str | None = None,
        max_completion_length: int | None = None,
        stop_token_ids: Sequence[int] = (),
    ):
        self.grader = grader_name(grader)
        self.max_completion_length = max_completion_length
        self.stop_token_ids = tuple(stop_token_ids)
        self.timeout = timeout
        self.pool = pool
        self.answer_column = answer_column
        self.__name__ = name or (
            "math_reward" if self.grader == DEFAULT_GRADER else f"math_reward_{self.grader}"
        )
        self.last_result: BatchResult | None = None  # the verdicts of the latest call, for inspection
        # (completions, gold answers, questions) of the latest call: what the reward-hacking monitor keeps
        self.last_inputs: tuple[list[str], list[str], list[str | None]] | None = None
        self.last_truncated: list[bool] | None = None  # which completions of the latest call were cut off
        self._warned_cut_off = False

    def __call__(self, completions: Sequence, answer: Sequence | None = None, **kwargs) -> list[float]:
        answers = answer if self.answer_column == "answer" else kwargs.get(self.answer_column)
        if answers is None:
            raise ValueError(
                f"{self.__name__} needs the gold answers in the dataset column '{self.answer_column}', which "
                f"was not passed (got columns: {sorted(k for k in kwargs if k not in _TRL_EXTRAS)}). Rename "
                "the column or pass answer_column= to make_math_reward_func."
            )
        texts = [completion_text(c) for c in completions]
        questions = kwargs.get("problem")
        if questions is None and kwargs.get("prompts") is not None:
            questions = [prompt_text(p) for p in kwargs["prompts"]]
        questions = None if questions is None else list(questions)
        truncated = self._cut_offs(kwargs.get("truncated"), kwargs.get("completion_ids"))
        if self.pool is not None:
            result = self.pool.verify_batch(
                texts, list(answers), self.grader, self.timeout, prompts=questions, truncated=truncated
            )
        else:
            result = verify_batch(
                texts, list(answers), self.grader, 0, self.timeout, prompts=questions, truncated=truncated
            )
        self.last_result = result
        self.last_inputs = (texts, [str(a) for a in answers], questions or [None] * len(texts))
        self.last_truncated = [bool(t) for t in truncated] if truncated is not None else [False] * len(texts)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and result.scores:  # TRL >= 1.x: averaged per logging step
            n = len(result.scores)
            for reason in (
                "no_answer",
                "timeout",
                "multiple_answers",
                "restatement",
                "not_a_number",
                "parse_error",
                "truncated",
            ):
                log_metric(f"{self.__name__}/{reason}_frac", result.reasons.get(reason, 0) / n)
        return result.scores

    def _cut_offs(self, truncated: Sequence | None, completion_ids: Sequence | None) -> list[bool] | None:
        """Which completions were cut off: as the caller says (``truncated``), else from TRL's ``completion_ids``
        when the token limit is known; None when nobody can tell (said once, where the grader refuses them)."""
        if truncated is not None:
            return [bool(t) for t in truncated]
        if completion_ids is not None and self.max_completion_length is not None:
            return [
                is_cut_off(ids, self.max_completion_length, self.stop_token_ids) for ids in completion_ids
            ]
        if completion_ids is not None and refuses_cut_off(self.grader) and not self._warned_cut_off:
            self._warned_cut_off = True
            warnings.warn(
                f"{self.__name__}: the {self.grader} grader refuses completions cut off at the token limit, but it "
                "was told neither which were (truncated=) nor the limit; pass max_completion_length= and "
                "stop_token_ids= to make_math_reward_func (PACSTrainer passes truncated= itself)",
                stacklevel=3,
            )
        return None

    def __getstate__(self):  # a pool holds processes and pipes: never pickle it
        state = dict(self.__dict__)
        state["pool"] = None
        state["last_result"] = None
        state["last_inputs"] = None
        state["last_truncated"] = None
        return state


_TRL_EXTRAS = {"prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
_TRL_EXTRAS |= {"truncated"}  # PACSTrainer's: which completions were cut off at the token limit


def make_math_reward_func(
    grader: str = DEFAULT_GRADER,
    timeout: float = DEFAULT_TIMEOUT,
    pool: RewardPool | None = None,
    answer_column: str = "answer",
    name: str | None = None,
    max_completion_length: int | None = None,
    stop_token_ids: Sequence[int] = (),
) -> MathRewardFunction:
    """Build a TRL reward function; pass a long-lived :class:`RewardPool` to check batches in parallel, and the
    sampler's ``max_completion_length`` and EOS ``stop_token_ids`` where the caller (TRL's own trainer) does not
    say which completions were cut off at the token limit."""
    return MathRewardFunction(
        grader, timeout, pool, answer_column, name, max_completion_length, stop_token_ids
    )


math_reward_func = MathRewardFunction()
"""Default TRL reward: the ``paper`` grader, in-process, 3 s per completion, gold answers in column ``answer``."""


# ----------------------------------------------------------------------------------- reward functions by name
def load_reward_funcs(
    spec: str | Sequence[str],
    grader: str = DEFAULT_GRADER,
    timeout: float = DEFAULT_TIMEOUT,
    pool: RewardPool | None = None,
    answer_column: str = "answer",
) -> list:
    """TRL reward functions from names: ``math`` (the math verifier with ``grader``) and user functions
    ``package.module:function`` / ``path/to/file.py:function`` in TRL's form
    ``f(completions, prompts=..., **dataset_columns) -> list[float]``. Weights are TRL's ``reward_weights``."""
    specs = split_reward_specs(spec)
    if not specs:
        raise ValueError("no reward function given; use 'math' or 'package.module:function'")
    return [
        make_math_reward_func(grader, timeout, pool, answer_column)
        if s == MATH_REWARD
        else load_reward_function(s)
        for s in specs
    ]
