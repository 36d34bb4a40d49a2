"""What every sampling backend takes and returns."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    """How to sample completions; the same fields on every backend."""

    n: int = field(default=1, metadata={"help": "Samples per prompt (the group size G)."})
    temperature: float = field(
        default=1.0, metadata={"help": "Softmax temperature; 0 means greedy decoding (argmax)."}
    )
    top_p: float = field(
        default=1.0,
        metadata={"help": "Nucleus mass in (0, 1]: sample only from the smallest top set reaching it."},
    )
    max_new_tokens: int = field(default=256, metadata={"help": "Cap on generated tokens per sample."})
    seed: int | None = field(
        default=None,
        metadata={"help": "Seed of the sampling RNG; None draws one from torch's global RNG."},
    )
    stop_token_ids: list[int] | None = field(
        default=None,
        metadata={
            "help": "Token ids that end a sample (kept in token_ids). None: the tokenizer's eos plus "
            "the model's generation_config eos ids."
        },
    )
    logprobs: bool = field(
        default=False,
        metadata={
            "help": "Also return, per generated token, its log-probability under the model's raw "
            "distribution (log_softmax of the logits, before temperature/top-p)."
        },
    )
    logprob_temperature: float = field(
        default=1.0,
        metadata={
            "help": "With logprobs: return log_softmax(logits / logprob_temperature) of each token (1 = the raw "
            "distribution). A trainer that scores completions at its sampling temperature sets that temperature."
        },
    )

    def validate(self) -> None:
        """Raise ValueError naming the field, its value and the allowed range."""
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"SamplingParams.n={self.n!r}: need an integer >= 1 (samples per prompt)")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature={self.temperature!r}: need >= 0 (0 = greedy)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p={self.top_p!r}: need 0 < top_p <= 1 (1 = off)")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens={self.max_new_tokens!r}: need an integer >= 1")
        if not self.logprob_temperature > 0:
            raise ValueError(f"SamplingParams.logprob_temperature={self.logprob_temperature!r}: need > 0")
        if self.stop_token_ids is not None and not all(isinstance(t, int) for t in self.stop_token_ids):
            raise ValueError(f"SamplingParams.stop_token_ids={self.stop_token_ids!r}: need a list of ints")


@dataclass
class Sample:
    """One generated completion."""

    text: str = field(metadata={"help": "Decoded completion, special tokens skipped."})
    token_ids: list[int] = field(
        metadata={"help": "Generated ids, including the stop token when one was produced."}
    )
    finish_reason: str = field(
        metadata={"help": "'stop' (a stop token was produced) or 'length' (max_new_tokens reached)."}
    )
    logprobs: list[float] | None = field(
        default=None,
        metadata={"help": "Per-token log-probabilities when SamplingParams.logprobs is set, else None."},
    )
    entropies: list[float] | None = field(
        default=None,
        metadata={
            "help": "Per-token entropy of the distribution the log-probs are taken from (softmax of the logits / "
            "logprob_temperature) when SamplingParams.logprobs is set (the transformers sampler; None from vLLM)."
        },
    )
