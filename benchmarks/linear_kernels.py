"""GFLOP/s of a linear layer on the CPU: torch's default GEMM (``F.linear``, MKL's sgemm on x86 builds)
against oneDNN's linear op (``pacs_rl.sampling.onednn``), fp32, on the shapes of SmolLM2-135M.

    python benchmarks/linear_kernels.py                       # rows 16 .. 1200, torch's default threads
    python benchmarks/linear_kernels.py --rows 64 128 --out docs/benchmarks/linear_kernels.json

A decode step multiplies one row per live sequence (the sampler's batch: tens to a few hundred rows) by
every weight matrix; a prefill or a training forward multiplies a row per token (a thousand and more).
For each row count and weight shape the two kernels run alternately, best of --repeats timings of
--calls calls each; the JSON holds GFLOP/s per (rows, shape, kernel) and the ratio oneDNN / default.
The sampler uses oneDNN up to ``MAX_ROWS`` rows (``pacs_rl.sampling.onednn``); this is the measurement
behind that limit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# (out_features, in_features): attention q/o, k/v, MLP gate/up, MLP down, LM head (49,152-token vocabulary)
SHAPES = {
    "q_o": (576, 576),
    "k_v": (192, 576),
    "gate_up": (1536, 576),
    "down": (576, 1536),
    "lm_head": (49152, 576),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", nargs="+", type=int, default=[16, 64, 128, 256, 512, 1200])
    ap.add_argument("--calls", type=int, default=20, help="calls per timing (the LM head: a quarter)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--out", default="docs/benchmarks/linear_kernels.json")
    a = ap.parse_args()

    import torch

    from pacs_rl.sampling.onednn import _op, onednn_linear_available
    from pacs_rl.sampling.transformers_backend import cpu_capability

    if a.threads:
        torch.set_num_threads(a.threads)
    if not onednn_linear_available():
        sys.exit("this torch build has no usable oneDNN linear op: nothing to compare")
    op = _op()
    gen = torch.Generator().manual_seed(0)
    results = []
    with torch.inference_mode():
        for rows in a.rows:
            for name, (n_out, n_in) in SHAPES.items():
                x = torch.randn(rows, n_in, generator=gen)
                w = torch.randn(n_out, n_in, generator=gen)
                calls = max(1, a.calls // 4) if name == "lm_head" else a.calls
                kernels = {
                    "default": lambda x=x, w=w: torch.nn.functional.linear(x, w),
                    "onednn": lambda x=x, w=w: op(x, w, None, "none", [], ""),
                }
                best = {k: float("inf") for k in kernels}
                for f in kernels.values():
                    f()  # warm-up
                for _ in range(a.repeats):
                    for k, f in kernels.items():
                        t = time.perf_counter()
                        for _ in range(calls):
                            f()
                        best[k] = min(best[k], (time.perf_counter() - t) / calls)
                flops = 2 * rows * n_out * n_in
                row = {
                    "rows": rows,
                    "shape": name,
                    "gflops_default": round(flops / best["default"] / 1e9, 1),
                    "gflops_onednn": round(flops / best["onednn"] / 1e9, 1),
                    "onednn_over_default": round(best["default"] / best["onednn"], 2),
                }
                results.append(row)
                print(json.dumps(row), flush=True)
    out = {
        "command": " ".join(["python", *sys.argv]),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": cpu_capability(),
        "results": results,
        "loadavg": os.getloadavg(),
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
