"""Problems (JSONL/parquet/benchmark names, through :func:`pacs_rl.data.load_problems`) → verl's RL
parquet: one row per prompt with ``data_source``, ``prompt`` (chat messages with the paper's
instruction, Appendix B.1), ``ability``, ``reward_model.ground_truth`` and ``extra_info``.

    python -m pacs_rl.integrations.verl.data SOURCE OUT.parquet [--limit N] [--data-source NAME]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pacs_rl.data import load_problems
from pacs_rl.data.prompts import build_messages

__all__ = ["to_verl_rows", "write_verl_parquet"]


def to_verl_rows(problems, data_source: str) -> list[dict[str, Any]]:
    """``Problem`` objects (id, problem, answer) → rows in verl's RLHFDataset layout."""
    return [
        {
            "data_source": data_source,
            "prompt": build_messages(p.problem),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": p.answer},
            # the question, for the sound grader's check that an answer is not the question given back
            "extra_info": {"index": i, "id": str(p.id), "question": p.problem},
        }
        for i, p in enumerate(problems)
    ]


def write_verl_parquet(
    source: str, out: str | Path, limit: int | None = None, data_source: str | None = None
) -> int:
    """Load ``source`` (bad rows skipped and reported), write ``out`` as parquet; returns the row count."""
    problems = load_problems(source, limit=limit, on_error="skip")
    if problems.skipped:
        print(f"skipped {problems.skipped} bad row(s) of {source}: {problems.skip_messages[:3]}")
    if not problems:
        raise ValueError(f"no usable problem in {source!r}: each row needs a problem and an answer.")
    name = data_source or f"pacs/{Path(str(source)).stem}"
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(to_verl_rows(problems, name)), out)
    return len(problems)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "source", help="a JSONL/parquet file with problem and answer fields, or a benchmark name"
    )
    parser.add_argument("out", help="the parquet file to write")
    parser.add_argument("--limit", type=int, default=None, help="keep the first N valid rows")
    parser.add_argument(
        "--data-source", default=None, help="the data_source field (default: pacs/<file stem>)"
    )
    args = parser.parse_args(argv)
    n = write_verl_parquet(args.source, args.out, args.limit, args.data_source)
    print(f"wrote {n} rows to {args.out}")


if __name__ == "__main__":
    main()
