"""Exact next-token samplers over a batch of logits: pure functions, no model.

Why not ``softmax`` + ``torch.multinomial``: on CPU, multinomial over a vocabulary of tens of thousands
of tokens can cost as much as the rest of a small model's decode step, and the inverse-CDF draw below
is a small fraction of that (see docs/EVALUATION.md). The draws here follow the same distribution:

    temperature sampling  p_j ∝ exp(z_j / T)                                         (1)
    inverse CDF           j = min{ j : C_j > u },  C_j = Σ_{i≤j} p̃_i,  u ~ U[0, C_V)  (2)
    nucleus (top-p)       keep the most probable tokens, in order, while the mass
                          strictly before a token is < top_p (HF's TopPLogitsWarper)   (3)

(2) needs no normalisation (u is scaled by the total). Cumulative sums run in float64 over short rows
(blocks, then one block) so that rounding cannot move mass between tokens: a float32 cumsum over 49k
terms would blur the mass of a late, rare token by up to one ulp of the running total.
"""

from __future__ import annotations

import torch


def _inverse_cdf(weights: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Single-level eq. 2 with a float64 cumulative sum. weights: (rows, k). Returns (rows,) int64."""
    cdf = weights.to(torch.float64).cumsum_(-1)  # (rows, k)
    total = cdf[:, -1:]  # (rows, 1)
    u = torch.rand(total.shape, generator=generator, device=weights.device, dtype=torch.float64) * total
    idx = torch.searchsorted(cdf, u, right=True)  # first j with C_j > u
    # u < total holds mathematically; guard the index against a rounding of u up to total.
    return idx.clamp_max_(weights.shape[-1] - 1).squeeze(-1)


def inverse_cdf_sample(
    weights: torch.Tensor, generator: torch.Generator | None = None, block: int = 256
) -> torch.Tensor:
    """Draw one index per row with probability proportional to ``weights`` (eq. 2).

    For a large vocabulary the draw has two exact stages, P(j) = P(block b) · P(j | b):
    pick a block of ``block`` tokens in proportion to its mass, then a token inside it. Both
    cumulative sums are short and run in float64, so no float32 cumsum over the whole vocabulary
    (which would blur the mass of late, rare tokens) and no float64 copy of the (rows, V) tensor.
    weights: (rows, V), non-negative, each row with a positive sum. Returns (rows,) int64.
    """
    rows, vocab = weights.shape
    if vocab <= 4 * block:
        return _inverse_cdf(weights, generator)
    pad = (-vocab) % block
    padded = torch.nn.functional.pad(weights, (0, pad)) if pad else weights
    blocks = padded.view(rows, -1, block)  # (rows, n_blocks, block)
    block_mass = blocks.sum(-1)  # (rows, n_blocks)
    b = _inverse_cdf(block_mass, generator)  # (rows,) chosen block
    inner = blocks[torch.arange(rows, device=weights.device), b]  # (rows, block)
    j = _inverse_cdf(inner, generator)  # (rows,) position inside the block
    return (b * block + j).clamp_max_(vocab - 1)


def nucleus_keep_mask(sorted_probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Which tokens of a descending-sorted distribution are in the nucleus (eq. 3).

    sorted_probs: (rows, k) normalised probabilities sorted in descending order (k may be a prefix of
    the vocabulary). Returns a bool mask (rows, k): token j is kept when the mass strictly before it is
    below ``top_p``; the most probable token is always kept.
    """
    mass_before = sorted_probs.cumsum(-1) - sorted_probs  # (rows, k)
    keep = mass_before < top_p
    keep[:, 0] = True
    return keep


def sample_top_p(
    scaled_logits: torch.Tensor, top_p: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Nucleus sampling from temperature-scaled logits without sorting the whole vocabulary.

    A partial sort (``torch.topk``) over k candidates suffices once the top-k mass of every row
    reaches ``top_p``: then no token outside the top k can be in the nucleus. k starts at 64 and grows
    ×8 until that holds (at worst k = V, a full sort).
    scaled_logits: (rows, V) float32. Returns (rows,) int64 token ids.
    """
    vocab = scaled_logits.shape[-1]
    full_probs = torch.softmax(scaled_logits, dim=-1)  # (rows, V), eq. 1
    k = min(64, vocab)
    while True:
        probs, top_idx = torch.topk(full_probs, k, dim=-1)  # (rows, k), descending
        if k == vocab or bool((probs.sum(-1) >= top_p).all()):
            break
        k = min(vocab, k * 8)
    keep = nucleus_keep_mask(probs, top_p)
    choice = inverse_cdf_sample(probs * keep, generator)  # (rows,) position among the k
    return top_idx.gather(1, choice[:, None]).squeeze(1)


def sample_next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row: greedy when ``temperature == 0``, else temperature (+ nucleus) sampling.

    logits: (rows, V), any float dtype (computed in float32). Returns (rows,) int64.
    """
    if temperature == 0:
        return logits.argmax(-1)
    z = logits.float() / temperature  # (rows, V), eq. 1
    if top_p < 1.0:
        return sample_top_p(z, top_p, generator)
    return inverse_cdf_sample(torch.softmax(z, dim=-1), generator)


def reference_probs(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """The target distribution of :func:`sample_next_token`, by a full sort (for tests and checks).

    logits: (rows, V). Returns (rows, V) float64 probabilities (zero outside the nucleus).
    """
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = nucleus_keep_mask(sorted_probs, top_p)
    keep = torch.zeros_like(keep_sorted).scatter_(1, order, keep_sorted)
    kept = probs * keep
    return kept / kept.sum(-1, keepdim=True)
