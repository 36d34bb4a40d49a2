"""bf16 against fp32 for the CPU default, on a CPU that computes bf16 (AVX512-BF16 or AMX): what changes in
PACS's ratio, and whether learning does.

    python benchmarks/cpu_bf16.py ratio                     # r̂ under bf16 against fp32 on the same samples
    python benchmarks/cpu_bf16.py sampling                  # the base model's rollouts, fp32 sampler against bf16
    python benchmarks/cpu_bf16.py pairs --seeds 0-7         # paired seeds of `pacs-rl train`, fp32 and bf16
    python benchmarks/cpu_bf16.py summary [--markdown]      # the record so far

``ratio``: one rollout of the CPU default (4 prompts × 8 completions, T = 0.7, at most 96 tokens), one AdamW step
at the default learning rate on a PACS loss, then r̂ = log π_new − log π_old of every completion computed twice:
in fp32, and under bf16 autocast as the bf16 run computes it (old log-probs by a forward over the whole rollout,
new ones in the update's pieces). Prints and records the error of r̂, its correlation and slope against fp32, and
what reaches the loss: ψ (PACS's leave-one-out score) with the sign fp32 gives it, and |σ(ψ) − σ(ψ_fp32)|, the
change of each completion's weight in the gradient (σ(ψ) − R).

``pairs``: `pacs-rl train` with no other argument than ``--seed k --set num_threads=1`` and ``bf16`` false or
true, two runs at a time (one thread each: a run at one thread repeats itself bit for bit), resumable (a finished
run is read back, not run again). The record: held-out greedy accuracy after training per seed and precision,
PACS's figures (bf16 − fp32) with a 95% paired interval, and the training seconds. Writes
docs/benchmarks/cpu_bf16.json (``--out``), one record for both probes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
OUT = Path("docs/benchmarks/cpu_bf16.json")
WORK = Path("runs/cpu_bf16")
PRECISIONS = ("fp32", "bf16")


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def save(path: Path, part: dict) -> None:
    """Write ``part``'s keys into the record at ``path``, keeping the keys another probe wrote there."""
    record = {**load(path), **part}
    record.update({k: v for k, v in host().items() if k in ("cpu_capability", "date")})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")


def host() -> dict:
    from pacs_rl.sampling.transformers_backend import cpu_capability

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    return {"cpu_capability": cpu_capability(), "date": time.strftime("%Y-%m-%d"), "commit": commit.strip()}


# --------------------------------------------------------------------------------------------------- ratio
def rollout_prompts(n: int, seed: int):
    """(the bundled model, its tokenizer, ``n`` training problems of the CPU default's task, their chat prompts as
    token ids), as a run's first rollout draws them."""
    from pacs_rl.data import arithmetic_problems
    from pacs_rl.data.prompts import format_prompts
    from pacs_rl.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("smollm2-135m")
    problems = arithmetic_problems(n, seed=seed, split="train", ops="+-", digits="2,1")
    prompts = format_prompts(tok, [p.problem for p in problems])
    return model, tok, problems, [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]


def ratio(a) -> dict:
    import torch

    from pacs_rl.algorithms.pacs import pacs_loss
    from pacs_rl.sampling import SamplingParams, TransformersSampler
    from pacs_rl.training.logprobs import completion_logps
    from pacs_rl.training.schema import CPU_DEFAULTS

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    model, tok, _, ids = rollout_prompts(4, a.seed)
    G, T = CPU_DEFAULTS["num_generations"], CPU_DEFAULTS["max_completion_length"]
    groups = TransformersSampler(model, tok).generate_ids(
        ids, SamplingParams(n=G, temperature=CPU_DEFAULTS["temperature"], max_new_tokens=T, seed=a.seed)
    )
    width = max(len(i) for i in ids)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    rows, masks, attn = [], [], []
    for prompt, group in zip(ids, groups, strict=True):
        for s in group:
            n = len(s.token_ids)
            rows.append([pad] * (width - len(prompt)) + prompt + list(s.token_ids) + [pad] * (T - n))
            attn.append([0] * (width - len(prompt)) + [1] * (len(prompt) + n) + [0] * (T - n))
            masks.append([1.0] * n + [0.0] * (T - n))
    x, am, mask = torch.tensor(rows), torch.tensor(attn), torch.tensor(masks)
    temperature = CPU_DEFAULTS["temperature"]
    rewards = torch.tensor([float(i % 3 == 0) for i in range(len(rows))])  # labels: both in every group

    def logps(m, bf16: bool, budget: int) -> torch.Tensor:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            values, _ = completion_logps(m, x, am, T, temperature, budget)
        return values.float()

    old = {"fp32": logps(model, False, 4 * 128), "bf16": logps(model, True, 1024)}
    opt = torch.optim.AdamW(model.parameters(), lr=CPU_DEFAULTS["learning_rate"])
    model.train()
    logits = model(input_ids=x, attention_mask=am).logits[:, -T - 1 : -1].float() / temperature
    lp = torch.log_softmax(logits, -1).gather(-1, x[:, -T:, None])[..., 0]
    loss, _ = pacs_loss(lp, old["fp32"], mask, rewards, group_size=G)
    loss.backward()
    model.eval()
    opt.step()
    new = {"fp32": logps(model, False, 4 * 128), "bf16": logps(model, True, 4 * 256)}
    rhat = {k: ((new[k] - old[k]) * mask).sum(-1) for k in PRECISIONS}
    ref, bf = rhat["fp32"], rhat["bf16"]

    def psi(r: torch.Tensor) -> torch.Tensor:  # leave-one-out (rloo), per group
        g = r.view(-1, G)
        return (g - (g.sum(-1, keepdim=True) - g) / (G - 1)).flatten()

    p_ref, p_bf = psi(ref), psi(bf)
    weight_change = (torch.sigmoid(p_bf) - torch.sigmoid(p_ref)).abs()
    result = {
        "completions": len(rows),
        "mean_tokens": mask.sum(-1).mean().item(),
        "learning_rate": CPU_DEFAULTS["learning_rate"],
        "rhat_fp32_mean_abs": ref.abs().mean().item(),
        "rhat_bf16_minus_fp32_mean_abs": (bf - ref).abs().mean().item(),
        "rhat_bf16_minus_fp32_max_abs": (bf - ref).abs().max().item(),
        "rhat_corr": torch.corrcoef(torch.stack([ref, bf]))[0, 1].item(),
        "rhat_slope_bf16_on_fp32": ((bf * ref).sum() / (ref * ref).sum()).item(),
        "psi_sign_agrees": (torch.sign(p_bf) == torch.sign(p_ref)).float().mean().item(),
        "psi_fp32_mean_abs": p_ref.abs().mean().item(),
        "sigmoid_psi_change_mean": weight_change.mean().item(),
        "sigmoid_psi_change_max": weight_change.max().item(),
        "gradient_weight_fp32_mean_abs": (torch.sigmoid(p_ref) - rewards).abs().mean().item(),
    }
    print(json.dumps(result, indent=1))
    return result


# -------------------------------------------------------------------------------------------------- sampling
def sampling(a) -> dict:
    """The base model's rollouts drawn by the fast sampler in fp32 and on its bf16 copy, from the same prompts and
    seeds (the first rollouts of a run, before any update): the share the training grader pays, the mean length and
    the share cut at the token limit, and, per prompt, how many of its n samples were paid by each, paired."""
    import torch

    from pacs_rl.compare import stats
    from pacs_rl.rewards import verify
    from pacs_rl.sampling import SamplingParams, TransformersSampler
    from pacs_rl.training.schema import CPU_DEFAULTS

    torch.set_num_threads(a.threads)
    model, tok, problems, ids = rollout_prompts(a.prompts, a.seed)
    params = SamplingParams(n=a.n, temperature=CPU_DEFAULTS["temperature"],
                            max_new_tokens=CPU_DEFAULTS["max_completion_length"], seed=a.seed)  # fmt: skip
    out = {}
    for precision, dtype in (("fp32", None), ("bf16", "bfloat16")):
        t0 = time.time()
        groups = TransformersSampler(model, tok, dtype=dtype).generate_ids(ids, params)
        paid, lengths, cut = [], [], 0
        for problem, group in zip(problems, groups, strict=True):
            texts = [tok.decode(x.token_ids, skip_special_tokens=True) for x in group]
            paid.append(
                sum(verify(t, problem.answer, grader="sound", prompt=problem.problem).score for t in texts)
            )
            lengths += [len(x.token_ids) for x in group]
            cut += sum(len(x.token_ids) >= params.max_new_tokens for x in group)
        out[precision] = {"paid_per_prompt": paid, "paid": sum(paid) / (a.n * len(ids)),
                          "mean_length": sum(lengths) / len(lengths), "cut_at_limit": cut / len(lengths),
                          "seconds": round(time.time() - t0, 1)}  # fmt: skip
    diffs = [
        (b - f) / a.n
        for f, b in zip(out["fp32"]["paid_per_prompt"], out["bf16"]["paid_per_prompt"], strict=True)
    ]
    result = {"prompts": len(ids), "n": a.n, "seed": a.seed, "temperature": params.temperature,
              "max_new_tokens": params.max_new_tokens, **out,
              "bf16_minus_fp32_paid_per_prompt": stats.paired_interval(diffs, None)}  # fmt: skip
    print(json.dumps({k: v for k, v in result.items() if k not in ("fp32", "bf16")}, indent=1))
    print({p: {k: v for k, v in out[p].items() if k != "paid_per_prompt"} for p in out})
    return result


# --------------------------------------------------------------------------------------------------- pairs
def run_dir(work: Path, precision: str, seed: int) -> Path:
    return work / precision / f"seed{seed}"


def finished(folder: Path) -> dict | None:
    """The run's held-out result and training time, once it has both."""
    held = load(folder / "heldout.json")
    if "after" not in held:
        return None
    return {
        "heldout_before": held["before"]["accuracy"],
        "heldout_after": held["after"]["accuracy"],
        "train_seconds": held.get("train_seconds_this_session"),
    }


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def summarize(record: dict) -> dict:
    from pacs_rl.compare.stats import paired_interval

    runs = record.get("runs", {})
    seeds = sorted({int(s) for p in PRECISIONS for s in runs.get(p, {})})
    both = [s for s in seeds if all(str(s) in runs.get(p, {}) for p in PRECISIONS)]
    diffs = [runs["bf16"][str(s)]["heldout_after"] - runs["fp32"][str(s)]["heldout_after"] for s in both]
    mean = {
        p: sum(runs[p][str(s)]["heldout_after"] for s in both) / len(both) if both else None
        for p in PRECISIONS
    }
    times = {
        p: sorted(runs[p][str(s)]["train_seconds"] for s in both if runs[p][str(s)].get("train_seconds"))
        for p in PRECISIONS
    }
    summary = {"seeds": both, "heldout_after_mean": mean, "bf16_minus_fp32": paired_interval(diffs, 0.10)}
    if both:
        summary["train_seconds_median"] = {p: statistics.median(times[p]) for p in PRECISIONS if times[p]}
    return summary


def markdown(record: dict) -> str:
    """The paired seeds as a markdown table, then the interval (what docs/benchmarks/cpu_bf16.md quotes)."""
    runs, summary = record.get("runs", {}), summarize(record)
    lines = [
        "| seed | fp32: held-out after | bf16: held-out after | bf16 − fp32 | training s, fp32 / bf16 |",
        "|---:|---:|---:|---:|---:|",
    ]
    for s in summary["seeds"]:
        f, b = runs["fp32"][str(s)], runs["bf16"][str(s)]
        diff = 100 * (b["heldout_after"] - f["heldout_after"])
        lines.append(
            f"| {s} | {100 * f['heldout_after']:.1f}% | {100 * b['heldout_after']:.1f}% | {diff:+.1f} pp "
            f"| {f['train_seconds']:.0f} / {b['train_seconds']:.0f} |"
        )
    interval = summary["bf16_minus_fp32"]
    if "ci95" in interval:
        lo, hi = (100 * x for x in interval["ci95"])
        lines += [
            "",
            f"bf16 − fp32 over {interval['pairs']} pairs: {100 * interval['mean']:+.1f} pp, 95% interval "
            f"[{lo:+.1f}, {hi:+.1f}] pp (paired SD {100 * interval['sd']:.1f} pp; ±10 pp needs "
            f"{interval['pairs_needed']} pairs at this SD).",
        ]
    return "\n".join(lines)


def pairs(a) -> None:
    record = load(a.out)
    record.setdefault("runs", {p: {} for p in PRECISIONS})
    record["pairs_protocol"] = {
        "command": "pacs-rl train --output-dir RUN --seed K --set num_threads=1 --set bf16=false|true --no-progress",
        "what": "held-out greedy accuracy after 24 steps of the CPU default (200 problems), per seed; one thread",
    }
    jobs = [(p, s) for s in parse_seeds(a.seeds) for p in PRECISIONS]
    running: dict[subprocess.Popen, tuple[str, int]] = {}

    def collect(precision: str, seed: int) -> bool:
        result = finished(run_dir(a.work, precision, seed))
        if result is not None:
            for checkpoint in run_dir(a.work, precision, seed).glob("checkpoint-*"):
                shutil.rmtree(checkpoint)  # 1.6 GiB each, no longer needed: the held-out result is in
            record["runs"][precision][str(seed)] = result
            record["pairs_host"] = host()
            record["pairs_summary"] = summarize(record)
            save(a.out, {k: record[k] for k in ("runs", "pairs_protocol", "pairs_host", "pairs_summary")})
            print(f"{precision} seed {seed}: held-out after {result['heldout_after']:.3f}, "
                  f"{result['train_seconds'] or 0:.0f} s training | {json.dumps(record['pairs_summary'])}", flush=True)  # fmt: skip
        return result is not None

    while jobs or running:
        while jobs and len(running) < a.workers:
            precision, seed = jobs.pop(0)
            if collect(precision, seed):
                continue
            folder = run_dir(a.work, precision, seed)
            folder.parent.mkdir(parents=True, exist_ok=True)
            cmd = ["pacs-rl", "train", "--output-dir", str(folder), "--seed", str(seed), "--no-progress",
                   "--set", "num_threads=1", "--set", f"bf16={'true' if precision == 'bf16' else 'false'}"]  # fmt: skip
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            log = open(f"{folder}.log", "a")  # noqa: SIM115 (closed with the process)
            running[subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)] = (precision, seed)
            print(f"started {precision} seed {seed}", flush=True)
        time.sleep(5)
        for proc in [p for p in running if p.poll() is not None]:
            precision, seed = running.pop(proc)
            if not collect(precision, seed):
                print(
                    f"{precision} seed {seed} stopped without a result (exit {proc.returncode})", flush=True
                )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("probe", choices=["ratio", "sampling", "pairs", "summary"])
    p.add_argument("--prompts", type=int, default=64, help="sampling: training prompts")
    p.add_argument("--n", type=int, default=8, help="sampling: samples per prompt")
    p.add_argument("--seed", type=int, default=0, help="ratio: the rollout's seed")
    p.add_argument("--threads", type=int, default=2, help="ratio: torch threads")
    p.add_argument("--seeds", default="0-7", help="pairs: seeds, e.g. 0-7 or 0,3,5")
    p.add_argument("--workers", type=int, default=2, help="pairs: runs at a time (one thread each)")
    p.add_argument("--work", type=Path, default=WORK, help="pairs: where the runs go")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument(
        "--markdown", action="store_true", help="summary: the table docs/benchmarks/cpu_bf16.md quotes"
    )
    a = p.parse_args()
    if a.probe == "ratio":
        save(a.out, {"ratio": {**ratio(a), "host": host(), "command": " ".join(["python", *sys.argv])}})
    elif a.probe == "sampling":
        part = {**sampling(a), "host": host(), "command": " ".join(["python", *sys.argv])}
        save(a.out, {"sampling": part})
    elif a.probe == "pairs":
        pairs(a)
    elif a.markdown:
        print(markdown(load(a.out)))
    else:
        print(json.dumps(summarize(load(a.out)), indent=1))


if __name__ == "__main__":
    main()
