"""The math reward in the form TRL's ``GRPOTrainer`` (and our trainers) call reward functions.

TRL calls ``reward_func(prompts=..., completions=..., completion_ids=..., **columns)`` where every dataset
column arrives as a keyword list (so the gold answers arrive as ``answer=[...]``), plus ``trainer_state``,
``log_extra`` and ``log_metric``. Completions are strings, or conversational lists such as
``[{"role": "assistant", "content": "..."}]``. TRL logs each reward under the function's ``__name__``.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        strict: only a non-empty last ``\\boxed{}`` counts (see ``docs/EVALUATION.md, "Verifier"`` for the tradeoff).
        timeout: per-completion time limit in seconds.
        pool: a :class:`RewardPool` to check batches in parallel; ``None`` checks in-process.
        answer_column: the dataset column holding the gold answers.
        ignore_prompt_echo: ignore text of a completion that repeats its prompt (uses TRL's ``prompts``).
        name: the name TRL logs the reward under.
    """

    def __init__(
        self,
        strict: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        pool: RewardPool | None = None,
        answer_column: str = "answer",
        ignore_prompt_echo: bool = True,
        name: str | None = None,
    ):
        self.strict = strict
        self.timeout = timeout
        self.pool = pool
        self.answer_column = answer_column
        self.ignore_prompt_echo = ignore_prompt_echo
        self.__name__ = name or ("math_reward_strict" if strict else "math_reward")
        self.last_result: BatchResult | None = None  # the verdicts of the latest call, for inspection

    def __call__(self, completions: Sequence, answer: Sequence | None = None, **kwargs) -> list[float]:
        answers = answer if self.answer_column == "answer" else kwargs.get(self.answer_column)
        if answers is None:
            raise ValueError(
                f"{self.__name__} needs the gold answers in the dataset column '{self.answer_column}', which "
                f"was not passed (got columns: {sorted(k for k in kwargs if k not in _TRL_EXTRAS)}). Rename "
                "the column or pass answer_column= to make_math_reward_func."
            )
        texts = [completion_text(c) for c in completions]
        prompts = kwargs.get("prompts")
        prompts = (
            [prompt_text(p) for p in prompts] if (self.ignore_prompt_echo and prompts is not None) else None
        )
        if self.pool is not None:
            result = self.pool.verify_batch(texts, list(answers), self.strict, self.timeout, prompts=prompts)
        else:
            result = verify_batch(
                texts, list(answers), self.strict, num_workers=0, timeout=self.timeout, prompts=prompts
            )
        self.last_result = result
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and result.scores:  # TRL >= 1.x: averaged per logging step
            n = len(result.scores)
            for reason in ("no_answer", "timeout", "multiple_answers", "unevaluated", "parse_error"):
                log_metric(f"{self.__name__}/{reason}_frac", result.reasons.get(reason, 0) / n)
        return result.scores

    def __getstate__(self):  # a pool holds processes and pipes: never pickle it
        state = dict(self.__dict__)
        state["pool"] = None
        state["last_result"] = None
        return state


_TRL_EXTRAS = {"prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}


def make_math_reward_func(
    strict: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    pool: RewardPool | None = None,
    answer_column: str = "answer",
    ignore_prompt_echo: bool = True,
    name: str | None = None,
) -> MathRewardFunction:
    """Build a TRL reward function; pass a long-lived :class:`RewardPool` to check batches in parallel."""
    return MathRewardFunction(strict, timeout, pool, answer_column, ignore_prompt_echo, name)


math_reward_func = MathRewardFunction()
"""Default TRL reward: lenient, in-process, 3 s per completion, gold answers in column ``answer``."""
