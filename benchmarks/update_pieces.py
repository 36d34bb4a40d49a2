"""The update's forward + backward with and without `update_token_budget`, on the same real micro-batches.

    python benchmarks/update_pieces.py                       # bundled model, 4 groups of 8, budgets 96..384
    python benchmarks/update_pieces.py --groups 2 --budgets 128 --out runs/pieces.json

Samples GROUPS groups of G=8 completions (at most 96 tokens, T = 0.7, the CPU default) for arithmetic
prompts with the fast sampler, then times the PACS update of each group (one micro-batch) under:

- ``one forward``: the CPU default before the budget (shared prompt forward, one backward per micro-batch);
- ``budget N (rollout values)``: the pieces, with the log-prob values taken from the rollout (the first
  mini-batch of a rollout);
- ``budget N (+ forward)``: the same after the policy stepped: a forward without gradient first.

Each setting runs in its own process (peak memory is per process): after one warm-up update (the gradient
buffers exist, as in training) it reports the median seconds per micro-batch over REPEATS passes and the peak
resident memory above the resident set after the warm-up (Linux VmHWM, reset through /proc/self/clear_refs).
Writes --out (default docs/benchmarks/update_pieces.json) with ratios to ``one forward`` and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

G, MAX_NEW, TEMPERATURE = 8, 96, 0.7


def _kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _batches(model, tokenizer, groups: int, seed: int):
    """(input_ids, attention_mask, completion_mask, rewards) per group, as the trainer builds them."""
    import torch

    from pacs_rl.data import encode_prompts
    from pacs_rl.data.procedural import arithmetic_problems
    from pacs_rl.sampling import SamplingParams, TransformersSampler

    problems = arithmetic_problems(n=groups, seed=seed, ops="+-", digits=(2, 1), split="train")
    prompt_ids = encode_prompts(tokenizer, problems, None)
    params = SamplingParams(n=G, temperature=TEMPERATURE, max_new_tokens=MAX_NEW, seed=seed)
    samples = TransformersSampler(model, tokenizer).generate_ids(prompt_ids, params)
    out = []
    for k, (prompt, group) in enumerate(zip(prompt_ids, samples, strict=True)):
        T = max(len(s.token_ids) for s in group)
        ids = torch.full((G, len(prompt) + T), tokenizer.pad_token_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        for row, s in enumerate(group):
            ids[row, : len(prompt)] = torch.tensor(prompt)
            ids[row, len(prompt) : len(prompt) + len(s.token_ids)] = torch.tensor(s.token_ids)
            attention[row, : len(prompt) + len(s.token_ids)] = 1
        rewards = torch.tensor(
            [float(r % 3 == k % 3) for r in range(G)]
        )  # a mixed group: every row has a gradient
        out.append((ids, attention, attention[:, len(prompt) :], rewards))
    return out


def _measure(setting: str, budget: int | None, groups: int, seed: int, repeats: int) -> dict:
    import torch

    from pacs_rl.algorithms import compute_policy_loss
    from pacs_rl.models import load_model_and_tokenizer
    from pacs_rl.training.logprobs import completion_logits_shared_prompt, completion_logps, token_logps

    torch.manual_seed(seed)
    model, tokenizer = load_model_and_tokenizer("smollm2-135m")
    batches = _batches(model, tokenizer, groups, seed)
    model.train()

    with torch.no_grad():  # the rollout's log-probs (the sampler's, in training): not part of the update
        rollout = [completion_logps(model, b[0], b[1], b[2].size(1), TEMPERATURE, 10**9)[0] for b in batches]

    def update(ids, attention, mask, rewards, values):
        T = mask.size(1)
        if budget is None:
            parts = completion_logits_shared_prompt(model, ids, attention, T)
            logps, used = [], 0
            for logits in parts:
                logps.append(
                    token_logps(logits, ids[:, -T:][:, used : used + logits.size(1)], TEMPERATURE, False)[0]
                )
                used += logits.size(1)
            logp = torch.nn.functional.pad(torch.cat(logps, 1), (0, T - used))
        else:
            if setting.endswith("(+ forward)"):  # the policy stepped since the rollout
                with torch.no_grad():
                    values = completion_logps(model, ids, attention, T, TEMPERATURE, 4 * budget)[
                        0
                    ]  # as the trainer
            logp = values.clone().requires_grad_()
        ref = values - 0.01 * mask  # the policy moved a little since the reference: ψ ≠ 0
        loss, _ = compute_policy_loss("pacs", logp=logp, old_logp=ref, mask=mask.float(), rewards=rewards,
                                      group_size=G, ref_logp=ref)  # fmt: skip
        loss.backward()
        if budget is not None:
            completion_logps(model, ids, attention, T, TEMPERATURE, budget, grad=logp.grad)

    update(*batches[0], rollout[0])  # warm-up: the gradient buffers exist from here on, as in training
    model.zero_grad(set_to_none=False)
    base_kib = _kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    times = []
    for _ in range(repeats):
        for batch, values in zip(batches, rollout, strict=True):
            t = time.perf_counter()
            update(*batch, values)
            times.append(time.perf_counter() - t)
    tokens = sum(int(b[2].sum()) for b in batches)
    return {
        "setting": setting,
        "update_token_budget": budget,
        "median_s_per_micro_batch": statistics.median(times),
        "mean_s_per_micro_batch": statistics.mean(times),
        "peak_rss_above_weights_and_grads_mib": (_kib("VmHWM") - base_kib) / 1024,
        "completion_tokens_per_pass": tokens,
        "padded_tokens_per_pass": sum(b[2].numel() for b in batches),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--budgets", type=int, nargs="+", default=[96, 128, 256, 384])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="docs/benchmarks/update_pieces.json")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # child process: one setting
    a = p.parse_args()
    if a.one is not None:
        setting, budget = json.loads(a.one)
        print(json.dumps(_measure(setting, budget, a.groups, a.seed, a.repeats)))
        return

    import torch

    settings = [("one forward", None)]
    settings += [(f"budget {b} (rollout values)", b) for b in a.budgets]
    settings += [(f"budget {b} (+ forward)", b) for b in a.budgets]
    load_start, rows = os.getloadavg(), []
    for setting, budget in settings:
        cmd = [sys.executable, __file__, "--groups", str(a.groups), "--repeats", str(a.repeats),
               "--seed", str(a.seed), "--one", json.dumps([setting, budget])]  # fmt: skip
        rows.append(
            json.loads(
                subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1]
            )
        )
        r = rows[-1]
        print(f"{setting:28} {r['median_s_per_micro_batch']:6.2f} s/micro-batch  "
              f"peak +{r['peak_rss_above_weights_and_grads_mib']:7.1f} MiB", flush=True)  # fmt: skip
    base = rows[0]
    for r in rows:
        r["time_ratio_to_one_forward"] = r["median_s_per_micro_batch"] / base["median_s_per_micro_batch"]
        r["peak_ratio_to_one_forward"] = (
            r["peak_rss_above_weights_and_grads_mib"] / base["peak_rss_above_weights_and_grads_mib"]
        )
    result = {
        "command": "python benchmarks/update_pieces.py " + " ".join(sys.argv[1:]),
        "model": "smollm2-135m (fp32)",
        "groups": a.groups,
        "group_size": G,
        "max_new_tokens": MAX_NEW,
        "torch_threads": torch.get_num_threads(),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "rows": rows,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
