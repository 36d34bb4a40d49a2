"""The log-probabilities of the update: per-token log-probs of the completions on the 'logits' path, and the
update's backward in pieces.

**The 'logits' path** (``logprob_impl='logits'``, the CPU default; `PACSTrainer._get_per_token_logps_and_entropies`
calls ``completion_only_logps``). The model's own forward computes the LM head on the completion positions only,
at the sampling temperature, followed by a log-softmax (``token_logps``). With ``shared_prompt_forward`` each
distinct prompt of a batch runs once (``prompt_forward``) and its KV cache serves its rows, whose completion tokens
run trimmed to the longest (``completion_logits_shared_prompt``); without it every full row runs.

**The update's backward in pieces** of at most ``update_token_budget`` completion tokens (CPU memory).
A micro-batch's loss needs the log-probs of all its rows at once (PACS's ψ_i compares completion i with the
other completions of its group), so an ordinary forward keeps the activations of every row until the backward:
for the bundled 135M model in fp32 about 2 MB per completion token, logits included (benchmarks/update_pieces.py:
1.2 GiB for a group of 8 completions holding ~570 tokens). With a budget the update runs in three steps:

1. the log-prob values (B, T) of the micro-batch come without a graph: from the rollout when the policy has
   not stepped since it was sampled (they are then the current values), otherwise from a forward without
   gradient (``completion_logps``);
2. the loss is computed on them as on any log-probs, and its backward delivers ∂L/∂logp, (B, T);
3. that gradient drives the model's backward in pieces (``LogpsBackwardInPieces``): each piece is a forward
   with gradient over a few rows and ``backward(logp_piece, ∂L/∂logp_piece)``. The parameter gradients add up
   to the one-forward gradient (same θ, same values; float rounding aside), for any loss.

Rows are sorted by length, so a piece pads to its own longest completion instead of the batch's: the shorter
completions cost their own tokens only. Each distinct prompt runs once without gradient for its KV cache, which
the pieces read as leaves; their gradients add up and go back through a second forward of the prompt, with
gradient, at the end (the prompt's graph is not held while the pieces run).
Single process only (a DDP/DeepSpeed/FSDP backward must run once per micro-batch); the trainer checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import torch
from torch import Tensor
from transformers import DynamicCache

from pacs_rl.models import cache_keyword

__all__ = [
    "LogpsBackwardInPieces",
    "completion_forward",
    "completion_logits_shared_prompt",
    "completion_logps",
    "completion_only_logps",
    "pieces_problems",
    "plan_pieces",
    "prompt_forward",
    "token_logps",
]


def pieces_problems(
    *,
    num_processes: int,
    deepspeed: bool,
    fsdp: bool,
    activation_checkpointing: bool,
    completion_only_head: bool,
    logprob_impl: str,
    device: str,
    shared_prompt_forward: bool,
) -> list[str]:
    """Why update_token_budget cannot apply to a run set up so (empty: it applies). The trainer warns with these
    and runs one forward and backward per micro-batch; `--dry-run` lists them."""
    reasons = [
        (f"{num_processes} processes", num_processes > 1),
        ("DeepSpeed", deepspeed),
        ("FSDP", fsdp),
        ("activation checkpointing", activation_checkpointing),
        (f"logprob_impl={logprob_impl!r} on {device}", not completion_only_head),
        ("shared_prompt_forward=False", not shared_prompt_forward),
    ]
    return [reason for reason, applies in reasons if applies]


# ------------------------------------------------------------------------------------------- the model's forward
def token_logps(
    logits: Tensor, targets: Tensor, temperature: float, compute_entropy: bool
) -> tuple[Tensor, Tensor | None]:
    """log softmax(logits / T) at ``targets`` and, without gradient, the entropy of each position.

    logits: (b, t, V), the LM head's output (scaled in place: autograd keeps one (b, t, V) tensor, and the
    entropy is computed one row at a time, so no further (b, t, V) copies); targets: (b, t).
    Returns ((b, t), (b, t) or None).
    """
    logits = logits.float().div_(temperature)  # the head's output is not needed by its own backward
    log_z = torch.logsumexp(logits, dim=-1)  # (b, t)
    logps = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
    if not compute_entropy:
        return logps, None
    with torch.no_grad():
        entropy = torch.stack([log_z[r] - (torch.softmax(z, -1) * z).sum(-1) for r, z in enumerate(logits)])
    return logps, entropy


def _config(model):
    return getattr(model, "module", model).config  # DDP wraps the model in .module


def prompt_forward(model, prompt_ids: Tensor, prompt_mask: Tensor):
    """Run each distinct (left-padded) prompt once with a KV cache.

    Returns (head, cache, inverse, prompt_mask): head (U, 1, V) is the LM head at each distinct prompt's last
    position (it predicts completion token 0), cache the distinct prompts' DynamicCache, inverse (B,) the
    distinct prompt of each row, prompt_mask (B, P') with the columns that are padding in every row dropped.
    """
    first = int(prompt_mask.any(0).nonzero()[0]) if prompt_mask.any() else 0  # drop all-padding columns
    prompt_ids, prompt_mask = prompt_ids[:, first:], prompt_mask[:, first:]
    unique, inverse = torch.unique(torch.cat([prompt_ids, prompt_mask], 1), dim=0, return_inverse=True)
    u_ids, u_mask = unique[:, : prompt_ids.size(1)], unique[:, prompt_ids.size(1) :]
    cache = DynamicCache(config=_config(model))
    head = model(
        input_ids=u_ids,
        attention_mask=u_mask,
        position_ids=(u_mask.cumsum(-1) - 1).clamp_min(0),
        use_cache=True,
        logits_to_keep=1,
        **{cache_keyword(model): cache},
    ).logits  # (U, 1, V)
    return head, cache, inverse, prompt_mask


def completion_forward(
    model, kv: list[Tensor], rows: Tensor, ids: Tensor, mask: Tensor, positions: Tensor
) -> Tensor:
    """The LM head's output (b, w, V) for completion tokens ``ids`` (b, w) after the prompts' cache rows ``rows``.

    kv: the prompts' keys and values, layer by layer (keys, values, keys, ...), as ``prompt_forward``'s cache
    holds them; ``rows`` (b,) picks each row's prompt; mask (b, P' + w) and positions (b, w) as the model takes
    them."""
    cache = DynamicCache(config=_config(model))
    for layer in range(len(kv) // 2):
        cache.update(kv[2 * layer][rows], kv[2 * layer + 1][rows], layer)
    return model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        **{cache_keyword(model): cache},
    ).logits


# ------------------------------------------------------------------------------------------- the 'logits' path
def completion_logits_shared_prompt(
    model, input_ids: Tensor, attention_mask: Tensor, logits_to_keep: int
) -> list[Tensor]:
    """Logits that predict the completion tokens, with each distinct prompt run through the model once.

    input_ids, attention_mask: (B, P + T), a left-padded prompt then a right-padded completion of
    T = ``logits_to_keep`` tokens. Rows that share a prompt (the G completions of a group) share its
    forward: the prompt's KV cache (with gradient) is computed for the distinct prompts and copied to their
    rows, then only the completion tokens run, trimmed to the longest completion of the batch. The same
    function as one forward over every full row (same positions relative to each row's first real token,
    same masks), with (G − 1)/G of the prompt work and the trailing padding left out.
    Returns the logits in two parts, in completion order (not concatenated: a copy of (B, used, V) floats):
    (B, 1, V) from the last prompt position, predicting completion token 0, then (B, used − 1, V) predicting
    tokens 1 .. used − 1, where ``used`` is the longest completion (the second part is absent when used = 1).
    """
    P = input_ids.size(1) - logits_to_keep
    completion_ids, completion_mask = input_ids[:, P:], attention_mask[:, P:]
    filled = completion_mask.any(0).nonzero()
    used = int(filled[-1]) + 1 if len(filled) else 1  # longest completion in the batch (>= 1 column)
    head, cache, inverse, prompt_mask = prompt_forward(model, input_ids[:, :P], attention_mask[:, :P])
    if used == 1:
        return [head[inverse]]
    kv = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    mask = torch.cat([prompt_mask, completion_mask[:, : used - 1]], dim=1)  # (B, P' + used - 1)
    start = prompt_mask.sum(-1, keepdim=True)  # (B, 1): position of completion token 0
    positions = start + torch.arange(used - 1, device=input_ids.device)
    # token t predicts token t + 1: (B, used - 1, V)
    tail = completion_forward(model, kv, inverse, completion_ids[:, : used - 1], mask, positions)
    return [head[inverse], tail]


def completion_logits_full_rows(
    model, input_ids: Tensor, attention_mask: Tensor, logits_to_keep: int
) -> list[Tensor]:
    """Logits (B, T, V) that predict the T = ``logits_to_keep`` completion tokens, from one forward over every full
    row (the LM head on the last T + 1 positions), as the one part of ``completion_logits_shared_prompt``'s list."""
    return [
        model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            logits_to_keep=logits_to_keep + 1,
            use_cache=False,
        ).logits[:, :-1]  # position t predicts token t + 1
    ]


def completion_only_logps(
    model,
    input_ids: Tensor,
    attention_mask: Tensor,
    logits_to_keep: int,
    temperature: float,
    *,
    batch_size: int,
    compute_entropy: bool,
    shared_prompt: bool,
    autocast: Callable[[], AbstractContextManager],
) -> tuple[Tensor, Tensor | None]:
    """Per-token log-probs (B, T) of the last T = ``logits_to_keep`` tokens and, when asked, their entropies
    (without gradient: they are only logged), ``batch_size`` rows at a time.

    The forward runs under ``autocast()`` (the accelerator's), with each distinct prompt run once
    (``shared_prompt``: ``completion_logits_shared_prompt``) or over every full row; the log-softmax in fp32
    outside it. Columns past the longest completion, trimmed by the shared prompt forward, get log-prob 0."""
    chunks = []
    for start in range(0, input_ids.size(0), batch_size):
        rows = slice(start, start + batch_size)
        chunks.append(
            _chunk_logps(model, input_ids[rows], attention_mask[rows], logits_to_keep, temperature,
                         compute_entropy, shared_prompt, autocast)
        )  # fmt: skip
    logps = torch.cat([lp for lp, _ in chunks])
    return logps, (torch.cat([ent for _, ent in chunks]) if compute_entropy else None)


def _chunk_logps(
    model, input_ids, attention_mask, logits_to_keep, temperature, compute_entropy, shared_prompt, autocast
) -> tuple[Tensor, Tensor | None]:
    """``completion_only_logps`` of one chunk of rows: the logits part by part (each part's log-softmax scales it
    in place, so one (b, t, V) float tensor is alive at a time), padded back to ``logits_to_keep`` columns."""
    forward = completion_logits_shared_prompt if shared_prompt else completion_logits_full_rows
    with autocast():
        parts = forward(model, input_ids, attention_mask, logits_to_keep)
    targets = input_ids[:, input_ids.size(1) - logits_to_keep :]
    logps, entropies, used = [], [], 0
    for logits in parts:  # (b, t, V) each, in completion order
        t = logits.size(1)
        lp, ent = token_logps(logits, targets[:, used : used + t], temperature, compute_entropy)
        logps.append(lp)
        entropies.append(ent)
        used += t
    del parts, logits
    pad = (0, logits_to_keep - used)  # trimmed padding columns: log-prob 0 (masked by the caller)
    logps = torch.nn.functional.pad(torch.cat(logps, 1), pad)
    return logps, (torch.nn.functional.pad(torch.cat(entropies, 1), pad) if compute_entropy else None)


# ------------------------------------------------------------------------------------------- the update in pieces
def plan_pieces(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Rows (indices) in pieces of at most ``token_budget`` padded tokens, longest rows first.

    A piece pads to its first (longest) row, so it holds ``budget // longest`` rows (at least one: a row longer
    than the budget is a piece of its own). Rows of length 0 are left out.
    """
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    pieces: list[list[int]] = []
    for i in order:
        if pieces and (len(pieces[-1]) + 1) * lengths[pieces[-1][0]] <= token_budget:
            pieces[-1].append(i)
        else:
            pieces.append([i])
    return pieces


def completion_logps(
    model,
    input_ids: Tensor,
    attention_mask: Tensor,
    logits_to_keep: int,
    temperature: float,
    token_budget: int,
    grad: Tensor | None = None,
    compute_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs of the completion tokens, computed piece by piece (``plan_pieces``).

    input_ids, attention_mask: (B, P + T), a left-padded prompt then a right-padded completion of
    T = ``logits_to_keep`` tokens. grad None: the values without gradient. grad (B, T): also add the gradient
    of Σ grad · logp to the parameters' ``.grad`` (rows whose grad is all zero are skipped). Returns the values
    (B, T) in fp32, 0 on padding, and the entropies (B, T) when asked (0 on padding and on skipped rows).
    """
    T = logits_to_keep
    completion_ids, completion_mask = input_ids[:, -T:], attention_mask[:, -T:]
    lengths = completion_mask.sum(-1).tolist()
    if grad is not None:
        lengths = [n if bool(g.any()) else 0 for n, g in zip(lengths, grad, strict=True)]
    values = torch.zeros(completion_ids.shape, dtype=torch.float32, device=input_ids.device)
    entropy = torch.zeros_like(values) if compute_entropy else None
    if grad is not None and not any(lengths):  # nothing to differentiate (e.g. groups of equal rewards)
        return values, entropy
    prompt = input_ids[:, :-T], attention_mask[:, :-T]
    leaves, inverse, prompt_mask = _prompt_cache(
        model, prompt, completion_ids[:, :1], temperature, (values, entropy), grad is not None
    )
    with torch.set_grad_enabled(grad is not None):
        _run_pieces(model, leaves, inverse, (prompt_mask, completion_ids, completion_mask), lengths,
                    token_budget, temperature, (values, entropy), grad)  # fmt: skip
        if grad is not None:
            _prompt_backward(model, prompt, inverse, completion_ids[:, :1], temperature, grad[:, :1], leaves)
    values = values * completion_mask
    return values, (entropy * completion_mask if entropy is not None else None)


def _prompt_cache(model, prompt, first_tokens, temperature, out, requires_grad: bool):
    """Run each distinct prompt once, without gradient (its graph would stay alive through every piece; with a
    gradient it runs again at the end, ``_prompt_backward``). Writes completion token 0's log-prob (and entropy)
    into ``out`` = (values, entropy or None); returns the prompts' keys and values as leaves (``requires_grad``:
    they collect the pieces' gradients), each row's distinct prompt and the trimmed prompt mask."""
    values, entropy = out
    with torch.no_grad():
        head, cache, inverse, prompt_mask = prompt_forward(model, *prompt)
        lp0, ent0 = token_logps(head[inverse], first_tokens, temperature, entropy is not None)
    values[:, :1] = lp0
    if ent0 is not None:
        entropy[:, :1] = ent0
    leaves = [t.requires_grad_(requires_grad) for layer in cache.layers for t in (layer.keys, layer.values)]
    return leaves, inverse, prompt_mask


def _run_pieces(model, leaves, inverse, masks_and_ids, lengths, token_budget, temperature, out, grad) -> None:
    """Completion tokens 1 .. n of every row, a piece of rows at a time after its prompt's cache ``leaves``: their
    log-probs (and entropies) written into ``out`` = (values, entropy or None) and, with ``grad``, each piece's
    backward run at once, so that one piece's activations are alive at a time."""
    prompt_mask, completion_ids, completion_mask = masks_and_ids
    values, entropy = out
    device = completion_ids.device
    start = prompt_mask.sum(-1, keepdim=True)  # (B, 1): position of completion token 0
    for piece in plan_pieces(lengths, token_budget):
        # completion tokens 1 .. width are predicted by the tokens 0 .. width - 1 before them
        width = lengths[piece[0]] - 1
        if width <= 0:
            continue
        idx = torch.tensor(piece, device=device)
        logits = completion_forward(model, leaves, inverse[idx], completion_ids[idx, :width],
                                    torch.cat([prompt_mask[idx], completion_mask[idx, :width]], 1),
                                    start[idx] + torch.arange(width, device=device))  # fmt: skip
        lp, ent = token_logps(logits, completion_ids[idx, 1 : width + 1], temperature, entropy is not None)
        del logits
        values[idx, 1 : width + 1] = lp.detach()
        if ent is not None:
            entropy[idx, 1 : width + 1] = ent
        if grad is not None:
            torch.autograd.backward(lp, grad[idx, 1 : width + 1].to(lp.dtype))
        del lp


def _prompt_backward(model, prompt, inverse, first_tokens, temperature, first_grad, leaves) -> None:
    """The prompt's share of the gradient: completion token 0's log-prob and the KV cache every piece read (its
    gradient gathered on ``leaves``), through a second forward of the prompt, with gradient."""
    head, cache, _, _ = prompt_forward(model, *prompt)
    lp0, _ = token_logps(head[inverse], first_tokens, temperature, False)
    outputs, grads = [lp0], [first_grad.to(lp0.dtype)]
    kv = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    for tensor, leaf in zip(kv, leaves, strict=True):
        if leaf.grad is not None:
            outputs.append(tensor)
            grads.append(leaf.grad)
    torch.autograd.backward(outputs, grads)


class LogpsBackwardInPieces(torch.autograd.Function):
    """``values`` (B, T) as a tensor in the graph whose backward calls ``backward_fn(grad)``.

    ``anchor`` is any scalar that requires grad (it puts the output in the graph; it gets no gradient).
    ``backward_fn`` runs the model's backward itself (``completion_logps`` with ``grad``), the way reentrant
    activation checkpointing does, and the parameters' gradients accumulate as in any backward.
    """

    @staticmethod
    def forward(ctx, anchor: Tensor, values: Tensor, backward_fn: Callable[[Tensor], None]) -> Tensor:
        ctx.backward_fn = backward_fn
        return values.detach().clone()

    @staticmethod
    def backward(ctx, grad: Tensor):
        ctx.backward_fn(grad)
        return None, None, None
