"""The data and prompt settings of every command: where problems are read from and how each becomes a prompt
(`DataSettings`, under `pacs-rl train`'s RunSettings, `pacs-rl eval`'s EvalConfig and both sections of a
comparison)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pacs_rl.data.prompts import INSTRUCTION
from pacs_rl.settings.declarations import setting


@dataclass(kw_only=True)
class DataSettings:
    """Where problems are read from and how each becomes a prompt: the settings of `pacs-rl train` (RunSettings)
    and `pacs-rl eval` (EvalConfig), and of both sections of a comparison."""

    split: str | None = setting(
        None, "Split of a Hub dataset or procedural task (default: test if it has one, else train)."
    )
    problem_field: str | None = setting(None, "Column holding the problem text (default problem).")
    answer_field: str | None = setting(None, "Column holding the reference answer (default answer).")
    prompt_field: str | None = setting(
        None,
        "Column that already holds the prompt as chat messages, used as is (no instruction added); "
        "the problem text is then problem_field if present, else the last user message.",
    )
    instruction: str = setting(
        INSTRUCTION,
        "Appended to each problem in the user turn; default the paper's (Appendix B.1); '' = none.",
    )
    system_prompt: str | None = setting(
        None, "A system turn before each problem; default none (the chat template adds its own)."
    )
    skip_bad_rows: bool = setting(
        True, "Skip bad data rows (counted and reported); false stops at the first one."
    )

    def loader_kwargs(self) -> dict[str, Any]:
        """These settings as :func:`pacs_rl.data.load_problems` takes them."""
        return {
            "split": self.split,
            "problem_field": self.problem_field,
            "answer_field": self.answer_field,
            "prompt_field": self.prompt_field,
            "on_error": "skip" if self.skip_bad_rows else "raise",
        }


DATA_KEYS = tuple(DataSettings.__dataclass_fields__)


__all__ = ["DATA_KEYS", "DataSettings"]
