"""Where the fp32 sampler's time goes: one ``TransformersSampler.generate`` under ``torch.profiler``.

    python benchmarks/sampler_profile.py                       # 16 arithmetic prompts x 8 x 128 tokens
    python benchmarks/sampler_profile.py --no-onednn           # the LM head on torch's default GEMM

Prints the top operators by self CPU time and writes, to --out, each one's share of the total, the
tokens generated and the seconds taken (the shape of ``benchmarks/sampling_speed.py``, temperature 1.0).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--no-onednn", action="store_true", help="TransformersSampler(onednn=False)")
    ap.add_argument("--top", type=int, default=12, help="operators listed")
    ap.add_argument("--out", default="docs/benchmarks/sampler_profile.json")
    a = ap.parse_args()

    import torch
    from sampling_speed import arithmetic_questions
    from torch.profiler import ProfilerActivity, profile

    from pacs_rl.models import load_model_and_tokenizer
    from pacs_rl.sampling import SamplingParams, TransformersSampler
    from pacs_rl.sampling.transformers_backend import cpu_capability

    model, tok = load_model_and_tokenizer("smollm2-135m")
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in arithmetic_questions(a.prompts)
    ]
    sampler = TransformersSampler(model, tok, batch_size=128, onednn=not a.no_onednn)
    sampler.generate(prompts[:1], SamplingParams(n=2, max_new_tokens=2, seed=0))  # warm-up, untimed
    params = SamplingParams(n=a.n, temperature=1.0, max_new_tokens=a.max_new_tokens, seed=1000)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t = time.perf_counter()
        groups = sampler.generate(prompts, params)
        seconds = time.perf_counter() - t
    tokens = sum(len(s.token_ids) for g in groups for s in g)
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    top = [
        {"op": e.key, "share": round(e.self_cpu_time_total / total, 4), "calls": e.count}
        for e in events[: a.top]
    ]
    for row in top:
        print(f"{row['share']:7.1%}  {row['calls']:7d}  {row['op']}")
    print(f"{tokens} tokens in {seconds:.1f} s ({tokens / seconds:.1f} tokens/s, under the profiler)")
    result = {
        "command": " ".join(["python", *sys.argv]),
        "onednn": not a.no_onednn,
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "top_ops_by_self_cpu_time": top,
        "threads": torch.get_num_threads(),
        "cpu_capability": cpu_capability(),
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
