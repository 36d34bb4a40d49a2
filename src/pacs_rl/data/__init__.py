"""Datasets, the paper's prompt template and procedural tasks.

from pacs_rl.data import load_problems, format_prompt, arithmetic_problems
problems = load_problems("math500", limit=50)          # or a .jsonl path, a Hub id, "arithmetic?n=100"
prompt = format_prompt(tokenizer, problems[0].problem)  # chat template + Appendix B.1 instruction
"""

from pacs_rl.data.loaders import (
    BENCHMARKS,
    DATA_DIR_ENV,
    BenchmarkSpec,
    benchmark_name,
    hub_dataset,
    load_problems,
)
from pacs_rl.data.problems import DataError, Problem, ProblemSet
from pacs_rl.data.procedural import (
    ARITHMETIC_DIGITS,
    ARITHMETIC_OPS,
    HELD_OUT_FRACTION,
    arithmetic_pool_size,
    arithmetic_problems,
    arithmetic_splits,
    is_held_out,
    reasoning_gym_problems,
    split_disjoint,
)
from pacs_rl.data.prompts import (
    INSTRUCTION,
    build_messages,
    encode_prompts,
    format_prompt,
    format_prompts,
    plain_prompt,
)

__all__ = [
    "ARITHMETIC_DIGITS",
    "ARITHMETIC_OPS",
    "BENCHMARKS",
    "DATA_DIR_ENV",
    "HELD_OUT_FRACTION",
    "INSTRUCTION",
    "BenchmarkSpec",
    "DataError",
    "Problem",
    "ProblemSet",
    "arithmetic_pool_size",
    "arithmetic_problems",
    "arithmetic_splits",
    "benchmark_name",
    "build_messages",
    "encode_prompts",
    "format_prompt",
    "format_prompts",
    "hub_dataset",
    "is_held_out",
    "load_problems",
    "plain_prompt",
    "reasoning_gym_problems",
    "split_disjoint",
]
