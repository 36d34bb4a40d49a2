"""The measurements behind the CPU default of `pacs-rl train` (docs/TRAINING.md, "The first run";
the recorded figures: docs/benchmarks/train_cpu_choices.md).

Three probes on the bundled SmolLM2-135M-Instruct, each printing its figures and writing them to --out:

    python benchmarks/train_cpu_choices.py outcomes   # rollout accuracy by task, completion length, T
    python benchmarks/train_cpu_choices.py speed      # one training fwd+bwd: fp32, bf16 autocast, bf16, LoRA
    python benchmarks/train_cpu_choices.py precision  # r_hat = sum(logp_new - logp_old) in fp32 vs bf16 autocast

`outcomes` samples 16 training problems x 8 completions of up to 128 tokens once per (operators, operand
digits, T) and scores the first 32/48/64/96/128 tokens of each completion (--lengths; a completion cut at
L tokens is the first L tokens of a longer one), so the lengths share their samples; it also decodes each
problem greedily (the `pacs-rl train` held-out protocol, here on training problems). Completions are
graded as training grades them (--grader, default the CPU default's `paper+restatement`, 3 s per
completion): per limit, accuracy, the fraction of groups with both outcomes (the only ones PACS and GRPO
learn from on a rollout's first mini-batch), the fraction cut off and the mean length.

    python benchmarks/train_cpu_choices.py outcomes --ops +- --digits 2 2,1 1 --temperatures 1.0 0.7 0.5 \
        --problems 32 --out docs/benchmarks/train_cpu_tasks.json      # the task choice of the CPU default
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

LENGTHS = (32, 48, 64, 96, 128)


def _model():
    from pacs_rl.models import load_model_and_tokenizer

    return load_model_and_tokenizer("smollm2-135m")


def _prompt_ids(tok, problems):
    from pacs_rl.data import format_prompt

    return [tok(format_prompt(tok, p.problem), add_special_tokens=False)["input_ids"] for p in problems]


def outcomes(a) -> dict:
    from pacs_rl.data import arithmetic_problems
    from pacs_rl.rewards.pool import verify_batch
    from pacs_rl.sampling import SamplingParams, TransformersSampler

    model, tok = _model()
    sampler = TransformersSampler(model, tok, batch_size=64)

    def grade(problems, groups, length):
        """Verdicts of every completion cut at ``length`` tokens, graded as training grades them (the run's
        grader, a time limit per completion: an unbounded check can hang on a long sampled expression)."""
        texts = [tok.decode(s.token_ids[:length], skip_special_tokens=True) for g in groups for s in g]
        per = len(groups[0])
        answers = [p.answer for p in problems for _ in range(per)]
        questions = [p.problem for p in problems for _ in range(per)]
        r = verify_batch(texts, answers, a.grader, num_workers=0, timeout=3.0, prompts=questions)
        return [r.scores[i * per : (i + 1) * per] for i in range(len(problems))], r.reasons

    rows = []
    for ops, digits in [(o, d) for o in a.ops for d in a.digits]:
        problems = arithmetic_problems(a.problems, seed=0, split="train", ops=ops, digits=digits)
        ids = _prompt_ids(tok, problems)
        greedy = sampler.generate_ids(
            ids, SamplingParams(n=1, temperature=0.0, max_new_tokens=max(a.lengths))
        )
        for length in a.lengths:
            scores, _ = grade(problems, greedy, length)
            row = {"ops": ops, "digits": digits, "temperature": 0.0, "max_tokens": length}
            rows.append({**row, "accuracy": sum(s[0] for s in scores) / len(scores)})
            print(json.dumps(rows[-1]), flush=True)
        for temperature in a.temperatures:
            t = time.perf_counter()
            params = SamplingParams(n=a.G, temperature=temperature, max_new_tokens=max(a.lengths), seed=0)
            groups = sampler.generate_ids(ids, params)
            seconds = time.perf_counter() - t
            for length in a.lengths:
                scores, reasons = grade(problems, groups, length)
                correct = sum(sum(s) for s in scores)
                lengths = [min(len(s.token_ids), length) for g in groups for s in g]
                ended = [s.finish_reason == "stop" and len(s.token_ids) <= length for g in groups for s in g]
                row = {
                    "ops": ops,
                    "digits": digits,
                    "temperature": temperature,
                    "max_tokens": length,
                    "accuracy": correct / (len(problems) * a.G),
                    "mixed_groups": sum(0 < sum(s) < len(s) for s in scores) / len(problems),
                    "cut_off": 1 - sum(ended) / len(ended),
                    "mean_length": statistics.mean(lengths),
                    "reasons": reasons,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
            print(f"ops={ops} digits={digits} T={temperature}: {seconds:.1f} s to sample", flush=True)
    return {"problems": a.problems, "G": a.G, "grader": a.grader, "rows": rows}


def speed(a) -> dict:
    import torch

    from pacs_rl.models import load_model

    x = torch.randint(0, 49000, (a.batch, a.seq))
    prompt = a.seq - a.completion

    def best_of(model, autocast: bool) -> float:
        times = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(x).logits[:, prompt:].float()
            torch.log_softmax(logits, -1).mean().backward()
            times.append(time.perf_counter() - t)
            model.zero_grad(set_to_none=True)
        return min(times)

    from pacs_rl.sampling.transformers_backend import cpu_capability, cpu_has_native_bf16

    result = {"batch": a.batch, "seq": a.seq, "threads": torch.get_num_threads(), "seconds": {},
              "cpu_has_native_bf16": cpu_has_native_bf16(), "cpu_capability": cpu_capability()}  # fmt: skip
    fp32 = load_model("smollm2-135m")
    result["seconds"]["fp32"] = best_of(fp32, False)
    result["seconds"]["bf16_autocast"] = best_of(fp32, True)
    result["seconds"]["bf16_weights"] = best_of(copy.deepcopy(fp32).to(torch.bfloat16), False)
    try:
        from peft import LoraConfig, get_peft_model

        lora = get_peft_model(
            copy.deepcopy(fp32), LoraConfig(r=16, lora_alpha=32, target_modules="all-linear")
        )
        result["seconds"]["lora_fp32"] = best_of(lora, False)
        result["seconds"]["lora_bf16_autocast"] = best_of(lora, True)
    except ImportError:
        pass
    base = result["seconds"]["fp32"]
    result["speedup_over_fp32"] = {k: base / v for k, v in result["seconds"].items()}
    print(json.dumps(result, indent=2))
    return result


def precision(a) -> dict:
    import torch

    from pacs_rl.data import arithmetic_problems
    from pacs_rl.sampling import SamplingParams, TransformersSampler

    torch.manual_seed(0)
    model, tok = _model()
    problems = arithmetic_problems(2, seed=0, split="train")
    ids = _prompt_ids(tok, problems)
    T, P = 48, len(ids[0])
    assert all(len(i) == P for i in ids), "probe assumes equal prompt lengths"
    groups = TransformersSampler(model, tok).generate_ids(
        ids, SamplingParams(n=8, temperature=1.0, max_new_tokens=T, seed=0)
    )
    pad = tok.pad_token_id or 0
    seqs, mask = [], []
    for prompt, group in zip(ids, groups, strict=True):
        for s in group:
            n = len(s.token_ids)
            seqs.append(prompt + list(s.token_ids) + [pad] * (T - n))
            mask.append([1.0] * n + [0.0] * (T - n))
    x, mask = torch.tensor(seqs), torch.tensor(mask)

    def seq_logp(m, autocast: bool) -> torch.Tensor:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = m(x).logits[:, P - 1 : -1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, x[:, P:, None])[..., 0]
        return (lp * mask).sum(-1)

    rows = []
    for lr in a.lrs:
        new = copy.deepcopy(model)
        opt = torch.optim.AdamW(new.parameters(), lr=lr)
        logits = new(x).logits[:, P - 1 : -1]
        lp = (torch.log_softmax(logits, -1).gather(-1, x[:, P:, None])[..., 0] * mask).sum(-1)
        (-lp[:8].mean() + lp[8:].mean()).backward()  # one step: raise the first group, lower the second
        opt.step()
        ref = seq_logp(new, False) - seq_logp(model, False)
        bf = seq_logp(new, True) - seq_logp(model, True)
        row = {
            "lr": lr,
            "rhat_fp32_mean_abs": ref.abs().mean().item(),
            "rhat_bf16_mean_abs": bf.abs().mean().item(),
            "corr": torch.corrcoef(torch.stack([ref, bf]))[0, 1].item(),
            "bf16_over_fp32_slope": (bf * ref).sum().item() / (ref * ref).sum().item(),
            "max_abs_diff": (bf - ref).abs().max().item(),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"sequences": len(seqs), "max_tokens": T, "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("probe", choices=["outcomes", "speed", "precision"])
    p.add_argument("--problems", type=int, default=16)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--ops", nargs="+", default=["+-*", "+-"])
    p.add_argument("--digits", nargs="+", default=["2"], help="outcomes: operand lengths, 2 or 2,1 (47 + 8)")
    p.add_argument("--temperatures", nargs="+", type=float, default=[1.0, 0.7])
    p.add_argument(
        "--lengths", nargs="+", type=int, default=list(LENGTHS), help="outcomes: token limits scored"
    )
    p.add_argument("--grader", default="paper+restatement", help="outcomes: the grader (the CPU default's)")
    p.add_argument("--batch", type=int, default=16, help="speed: sequences")
    p.add_argument("--seq", type=int, default=105, help="speed: tokens per sequence (prompt + completion)")
    p.add_argument("--completion", type=int, default=48, help="speed: completion tokens scored")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--lrs", nargs="+", type=float, default=[1e-6, 1e-5])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON file (default docs/benchmarks/train_cpu_<probe>.json)")
    a = p.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    result = {"outcomes": outcomes, "speed": speed, "precision": precision}[a.probe](a)
    result["command"] = " ".join(["python", *sys.argv])
    result["loadavg"] = os.getloadavg()
    out = Path(a.out or f"docs/benchmarks/train_cpu_{a.probe}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
