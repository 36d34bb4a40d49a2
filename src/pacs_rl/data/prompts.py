"""The prompt of the PACS paper (Appendix B.1): the model's own chat template, with the instruction
appended to the user turn.

    <|im_start|>system
    You are a helpful assistant.<|im_end|>            <- whatever the model's template adds by itself
    <|im_start|>user
    {problem} Please reason step by step, and put your final answer within \\boxed{}.<|im_end|>
    <|im_start|>assistant
"""

from __future__ import annotations

from typing import Any

INSTRUCTION = r"Please reason step by step, and put your final answer within \boxed{}."


def user_turn(problem: str, instruction: str = INSTRUCTION) -> str:
    """The text of the user turn: ``"{problem} {instruction}"``."""
    problem = problem.rstrip()
    return f"{problem} {instruction}" if instruction else problem


def build_messages(
    problem: str,
    system_prompt: str | None = None,
    instruction: str = INSTRUCTION,
    messages: list[dict[str, str]] | None = None,
) -> list[dict[str, str]]:
    """Chat messages for one problem. No system turn unless given: the template adds its default.

    ``messages``: a prompt the data already holds as chat messages (``Problem.messages``): used as is,
    with ``system_prompt`` put first when given and the messages have no system turn of their own."""
    if messages is not None:
        has_system = any(m.get("role") == "system" for m in messages)
        head = [{"role": "system", "content": system_prompt}] if system_prompt and not has_system else []
        return head + [dict(m) for m in messages]
    out = [{"role": "system", "content": system_prompt}] if system_prompt else []
    out.append({"role": "user", "content": user_turn(problem, instruction)})
    return out


def plain_prompt(problem: str, instruction: str = INSTRUCTION) -> str:
    """The fallback for a tokenizer without a chat template (a base model): a plain Q/A layout."""
    return f"Question: {user_turn(problem, instruction)}\nAnswer:"


def format_prompt(
    tokenizer: Any,
    problem: str,
    system_prompt: str | None = None,
    instruction: str = INSTRUCTION,
    plain_fallback: bool = False,
    messages: list[dict[str, str]] | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> str:
    """Render one problem as generation-ready text with the tokenizer's chat template.

    ``messages``: the prompt as chat messages when the data holds one (see :func:`build_messages`).
    ``chat_template_kwargs``: extra variables for the template (``{"enable_thinking": False}``), as TRL's
    ``GRPOConfig.chat_template_kwargs``. A tokenizer without a chat template raises ``ValueError``, unless
    ``plain_fallback=True``, which uses :func:`plain_prompt` instead (``"Question: ... Answer:"``).
    """
    if getattr(tokenizer, "chat_template", None) is None:
        if plain_fallback and messages is None:
            return plain_prompt(problem, instruction)
        name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
        raise ValueError(
            f"tokenizer {name!r} has no chat template, so the paper's prompt (Appendix B.1) cannot be "
            "rendered. Use an instruct/chat model, set tokenizer.chat_template, or pass "
            "plain_fallback=True (CLI: --plain-prompt) for a plain 'Question: ... Answer:' prompt"
            + (" (not for a prompt given as chat messages)." if messages is not None else ".")
        )
    messages = build_messages(problem, system_prompt, instruction, messages)
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
    )


def encode_prompts(
    tokenizer: Any, problems: list, prompt_kwargs: dict[str, Any] | None = None
) -> list[list[int]]:
    """The token ids of each problem's prompt (``Problem`` objects: their text, or their own chat messages),
    rendered by :func:`format_prompt` with ``prompt_kwargs``; no special tokens added (the template has them)."""
    return [
        tokenizer(
            format_prompt(tokenizer, p.problem, messages=p.messages, **(prompt_kwargs or {})),
            add_special_tokens=False,
        )["input_ids"]
        for p in problems
    ]


def format_prompts(tokenizer: Any, problems: list[str], **kwargs: Any) -> list[str]:
    """:func:`format_prompt` over a list."""
    return [format_prompt(tokenizer, p, **kwargs) for p in problems]
