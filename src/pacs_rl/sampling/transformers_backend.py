"""Sampling with a plain ``transformers`` causal LM, faster than ``model.generate`` on CPU.

Same output distribution as ``generate(do_sample=True, num_return_sequences=n)`` in fp32; what
differs is the work done per token:

- each prompt is prefilled once and its KV cache expanded to its n samples (``generate`` prefills
  every prompt n times); the tokens that every prompt of a chunk starts with (a chat template's system
  prompt) are prefilled once for the whole chunk; the prefill computes the LM head for the last
  position only;
- the KV cache is allocated once for the chunk's final length and written in place, instead of being
  re-concatenated at every step (``DynamicCache`` copies the whole cache of every layer per token);
- the next token is drawn by an exact inverse-CDF sampler (``ops.sample_next_token``) instead of
  ``softmax`` + ``torch.multinomial``, and top-p uses a partial sort (``topk``) instead of a full sort;
- rows that produced a stop token leave the batch (the cache is compacted) instead of being padded
  to the longest sample;
- in fp32 on a CPU, the LM head runs through oneDNN instead of MKL's sgemm (``onednn.py``: faster on a
  decode step's few rows, same results to float32 rounding; ``onednn=False`` turns it off);
- optional bf16 (``dtype="bfloat16"``) for CPUs with bf16 matmul instructions (AVX512-BF16, AMX): on a CPU the
  sampler decodes with a bf16 copy of the fp32 weights, refreshed from the model at every call (autocast would
  cast every weight again at every decode step: measured slower than fp32 there; the copy, faster), on a GPU
  under autocast. It changes numerics, so the same-distribution statement holds for fp32 only. A CPU without
  those instructions emulates bf16 matmuls, several times slower than fp32 (``cpu_has_native_bf16``; a warning
  says so).

Determinism: with the same seed, model weights, prompts, ``SamplingParams``, ``batch_size``, dtype,
``onednn``, device and torch thread count, the samples are identical. Changing the batch composition (other
prompts, another batch_size or n) changes which random numbers each row receives, so individual
samples differ while their distribution does not.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Callable, Sequence

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from pacs_rl import stopping
from pacs_rl.models import cache_keyword
from pacs_rl.progress import advancing
from pacs_rl.sampling.onednn import onednn_lm_head
from pacs_rl.sampling.ops import sample_next_token
from pacs_rl.sampling.params import Sample, SamplingParams

Piece = tuple[int, int, int]  # (prompt index, first sample index, number of samples)


def plan_chunks(lengths: Sequence[int], n: int, batch_size: int) -> list[list[Piece]]:
    """Split prompts × n samples into chunks of at most ``batch_size`` sequences.

    Prompts are taken longest first, so prompts of similar length share a chunk (less left padding)
    and the largest chunk comes first (an out-of-memory error shows at once). A prompt with more than
    ``batch_size`` samples is split into several pieces (each prefills the prompt once).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    chunks: list[list[Piece]] = []
    current: list[Piece] = []
    used = 0
    for i in order:
        for start in range(0, n, batch_size):
            count = min(batch_size, n - start)
            if used + count > batch_size:
                chunks.append(current)
                current, used = [], 0
            current.append((i, start, count))
            used += count
    if current:
        chunks.append(current)
    return chunks


def left_pad(prompt_ids: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id lists into (input_ids, attention_mask), both (batch, max_len) int64."""
    width = max(len(p) for p in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for row, ids in enumerate(prompt_ids):
        input_ids[row, width - len(ids) :] = torch.as_tensor(ids, dtype=torch.long)
        mask[row, width - len(ids) :] = 1
    return input_ids, mask


def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bf16 dot-product instructions (AVX512-BF16 or AMX) that make bf16 matmuls faster
    than fp32. Without them (e.g. AVX2 only) oneDNN/torch emulate bf16 and a matmul runs several times slower
    than in fp32 (docs/TRAINING.md has the measurement)."""
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def cpu_capability() -> str:
    """The vector instructions torch's CPU kernels dispatch to here and whether bf16 ones exist, e.g. "AVX512,
    no bf16 instructions". Speed on a CPU depends on it (an AVX-512 host ran this project's fp32 workloads
    ~1.9x faster than an AVX2 one of the same core count), so benchmarks record it beside their figures."""
    simd = torch.backends.cpu.get_cpu_capability()
    return f"{simd}, {'bf16 instructions' if cpu_has_native_bf16() else 'no bf16 instructions'}"


BF16_SLOW_WARNING = (
    "{what}: this CPU has no bf16 matmul instructions (AVX512-BF16 or AMX), so bf16 runs several times slower "
    "than fp32 here; set {setting} for fp32."
)


def common_prefix_length(prompt_ids: Sequence[Sequence[int]]) -> int:
    """Number of leading tokens that every prompt shares, leaving each prompt at least one token of its own
    (the prefill needs each row's last prompt position)."""
    first, limit = prompt_ids[0], min(len(p) for p in prompt_ids) - 1
    n = 0
    while n < limit and all(p[n] == first[n] for p in prompt_ids):
        n += 1
    return n


class PreallocatedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys/values live in a buffer of ``capacity`` positions, written in place.

    ``update`` returns views of the filled part, so a decode step appends one position instead of copying
    the whole cache (``DynamicLayer`` concatenates). Grows by doubling if ever filled. Inference only: the
    returned views change meaning when later positions are written.
    """

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        b, _, _, _ = key_states.shape
        self._k = key_states.new_empty((b, key_states.shape[1], self.capacity, key_states.shape[-1]))
        self._v = value_states.new_empty((b, value_states.shape[1], self.capacity, value_states.shape[-1]))
        self._views(0)
        self.is_initialized = True

    def _views(self, length: int) -> None:
        self.keys, self.values = self._k[:, :, :length], self._v[:, :, :length]

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, new = self.keys.shape[-2], key_states.shape[-2]
        if (
            start + new > self._k.shape[-2]
        ):  # full: double the buffer (not expected: capacity is the final size)
            grow = max(start + new, 2 * self._k.shape[-2]) - self._k.shape[-2]
            self._k = torch.nn.functional.pad(self._k, (0, 0, 0, grow))
            self._v = torch.nn.functional.pad(self._v, (0, 0, 0, grow))
        self._k[:, :, start : start + new] = key_states
        self._v[:, :, start : start + new] = value_states
        self._views(start + new)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        length = self.get_seq_length()
        self._k, self._v = self._k[indices], self._v[indices]
        self._views(length)

    def batch_repeat_interleave(self, repeats: int) -> None:
        length = self.get_seq_length()
        self._k = self._k.repeat_interleave(repeats, dim=0)
        self._v = self._v.repeat_interleave(repeats, dim=0)
        self._views(length)


def preallocated_cache(config, capacity: int) -> DynamicCache:
    """A ``DynamicCache`` whose plain full-attention layers are ``PreallocatedLayer``s of ``capacity``
    positions; other layer kinds (sliding windows, linear attention) keep their own class."""
    cache = DynamicCache(config=config)
    cache.layers = [PreallocatedLayer(capacity) if type(x) is DynamicLayer else x for x in cache.layers]
    return cache


def default_stop_ids(model, tokenizer) -> list[int]:
    """The tokenizer's eos id plus the model's generation_config eos id(s), deduplicated."""
    ids: list[int] = []
    candidates = [getattr(tokenizer, "eos_token_id", None)]
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    candidates += list(gen_eos) if isinstance(gen_eos, (list, tuple)) else [gen_eos]
    for t in candidates:
        if t is not None and int(t) not in ids:
            ids.append(int(t))
    return ids


class TransformersSampler:
    """Sample n completions per prompt from a ``transformers`` causal LM (see module docstring).

    model: any causal LM whose forward takes ``past_key_values``/``position_ids`` (Llama, Qwen, ...,
    also a PEFT wrapper). It is used in place, never copied: a model under training can be sampled
    between optimizer steps; its train/eval mode is restored afterwards.
    dtype: None/"float32" runs as the model is; "bfloat16" decodes in bf16: on a CPU with a bf16 copy of fp32
    weights (kept here, refreshed from the model at each call: the model itself is never changed), else (a GPU,
    or weights already in another dtype) under autocast.
    batch_size: sequences (prompts × samples) decoded together; bounds memory.
    onednn: in fp32 on a CPU, run the model's LM head through oneDNN while sampling (faster than the
    default GEMM there; no effect under bf16 or on a GPU).
    """

    def __init__(
        self,
        model,
        tokenizer,
        dtype: str | None = None,
        batch_size: int = 64,
        progress: bool = False,
        onednn: bool = True,
    ):
        if dtype not in (None, "float32", "fp32", "bfloat16", "bf16"):
            raise ValueError(f"TransformersSampler dtype={dtype!r}: use None, 'float32' or 'bfloat16'")
        if batch_size < 1:
            raise ValueError(f"TransformersSampler batch_size={batch_size!r}: need >= 1 sequences")
        self.model = model
        self.tokenizer = tokenizer
        self.autocast_dtype = torch.bfloat16 if dtype in ("bfloat16", "bf16") else None
        if (
            self.autocast_dtype is not None
            and _model_device(model).type == "cpu"
            and not cpu_has_native_bf16()
        ):
            warnings.warn(
                BF16_SLOW_WARNING.format(what=f"TransformersSampler(dtype={dtype!r})", setting="dtype=None"),
                stacklevel=2,
            )
        self.batch_size = batch_size
        self.progress = progress
        self.onednn = onednn
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None)
        self.pad_id = int(pad) if pad is not None else 0
        self._logits_to_keep_ok = True
        self._cache_kw = cache_keyword(model)  # "cache" from transformers 5.24, "past_key_values" before
        # Test hook: called as hook(step, row_ids, logits) with the (rows, V) logits of every step.
        self._step_hook: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None
        self._bf16_copy: torch.nn.Module | None = None  # dtype="bfloat16" on a CPU: the weights in bf16
        self._run = model  # what decodes during a call: the model or its bf16 copy

    # ------------------------------------------------------------------------------------------
    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Sample]]:
        """prompts: already chat-templated text (no special tokens are added). Returns, per prompt,
        a list of ``params.n`` Samples."""
        if isinstance(prompts, str):
            raise TypeError("TransformersSampler.generate takes a list of prompts, got one str")
        enc = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        return self.generate_ids(enc, params)

    def generate_ids(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        """prompt_ids: token ids per prompt. Returns, per prompt, a list of ``params.n`` Samples."""
        params.validate()
        for i, ids in enumerate(prompt_ids):
            if len(ids) == 0:
                raise ValueError(f"prompt {i} has no tokens; every prompt needs at least one token")
        stop_ids = (
            list(params.stop_token_ids)
            if params.stop_token_ids is not None
            else default_stop_ids(self.model, self.tokenizer)
        )
        device = _model_device(self.model)
        seed = params.seed if params.seed is not None else int(torch.randint(0, 2**62, (1,)).item())
        generator = torch.Generator(device=device).manual_seed(seed)
        results: list[list[Sample | None]] = [[None] * params.n for _ in prompt_ids]
        chunks = plan_chunks([len(p) for p in prompt_ids], params.n, self.batch_size)

        was_training = self.model.training
        self.model.eval()
        self._run = self._decoder(device)
        try:
            with (
                torch.inference_mode(),
                self._autocast(device),
                onednn_lm_head(self._run, self.onednn),  # a no-op on GPU and in bf16
                _progress(self.progress, chunks) as bar,
            ):
                for chunk in chunks:
                    rows = self._generate_chunk(prompt_ids, chunk, params, stop_ids, generator, device)
                    for (i, start, count), row_samples in zip(chunk, _split(rows, chunk), strict=True):
                        results[i][start : start + count] = row_samples
                    bar(sum(c for _, _, c in chunk))
        finally:
            self.model.train(was_training)
            self._run = self.model
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------------------------------
    def _decoder(self, device: torch.device):
        """The module that decodes this call: with dtype="bfloat16" on a CPU and fp32 weights, a bf16 copy of the
        model's current weights (made once, then refreshed in place: the model may have stepped since); else the
        model. Only parameters are cast: buffers (rotary frequencies) stay as they are."""
        params = list(self.model.parameters())
        if (
            self.autocast_dtype is None
            or device.type != "cpu"
            or not params
            or any(p.dtype != torch.float32 for p in params)
        ):
            return self.model
        with torch.no_grad():
            if self._bf16_copy is None:
                # each parameter enters the copy already in bf16 (no fp32 copy of the model on the way), without
                # its gradient
                memo = {id(p): torch.nn.Parameter(p.to(torch.bfloat16), requires_grad=False) for p in params}
                self._bf16_copy = copy.deepcopy(self.model, memo)
                for module in self._bf16_copy.modules():
                    # a forward wrapped per instance (accelerate's mixed precision: autocast and fp32 outputs)
                    # would run the bf16 weights under autocast again: the class's forward instead
                    module.__dict__.pop("forward", None)
            else:
                for mine, theirs in zip(self._bf16_copy.parameters(), params, strict=True):
                    mine.copy_(theirs)
        self._bf16_copy.eval()
        return self._bf16_copy

    def _autocast(self, device: torch.device):
        if self.autocast_dtype is None or self._run is not self.model:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)

    def _forward(self, **kw):
        """model(**kw).logits[:, -1] as float32; asks for the last position's logits only when the
        model supports ``logits_to_keep`` (saves the LM head over the whole prompt at prefill)."""
        if self._logits_to_keep_ok:
            try:
                return self._run(**kw, logits_to_keep=1).logits[:, -1].float()
            except TypeError as e:
                if "logits_to_keep" not in str(e):
                    raise
                self._logits_to_keep_ok = False
        return self._run(**kw).logits[:, -1].float()

    def _generate_chunk(
        self,
        prompt_ids: list[list[int]],
        chunk: list[Piece],
        params: SamplingParams,
        stop_ids: list[int],
        generator: torch.Generator,
        device: torch.device,
    ) -> list[Sample]:
        """Decode one chunk; returns its Samples in chunk order (piece by piece, sample by sample)."""
        logits, mask, next_pos, cache = self._prefill(prompt_ids, chunk, params, device)
        rows = len(next_pos)
        max_new = params.max_new_tokens
        out = torch.full((rows, max_new), self.pad_id, dtype=torch.long)  # generated ids, on CPU
        out_lp = torch.zeros((rows, max_new), dtype=torch.float32) if params.logprobs else None
        out_ent = torch.zeros((rows, max_new), dtype=torch.float32) if params.logprobs else None
        length = torch.zeros(rows, dtype=torch.long)
        stopped = torch.zeros(rows, dtype=torch.bool)
        stop_t = torch.tensor(stop_ids, dtype=torch.long, device=device)
        row_ids = torch.arange(rows, device=device)  # batch row -> chunk row
        live = torch.ones(rows, dtype=torch.bool, device=device)  # rows still generating

        for step in range(max_new):
            stopping.check()  # a stop asked for by a signal lands between decoding steps (pacs_rl.stopping)
            if self._step_hook is not None:
                self._step_hook(step, row_ids[live].cpu(), logits[live])
            token = sample_next_token(logits, params.temperature, params.top_p, generator)  # (B,)
            ids_live = row_ids[live].cpu()
            out[ids_live, step] = token[live].cpu()
            if out_lp is not None:
                z = logits if params.logprob_temperature == 1.0 else logits / params.logprob_temperature
                z, log_z = z[live], torch.logsumexp(z[live], -1)
                out_lp[ids_live, step] = (z.gather(1, token[live].unsqueeze(1)).squeeze(1) - log_z).cpu()
                out_ent[ids_live, step] = (log_z - (torch.softmax(z, -1) * z).sum(-1)).cpu()
            length[ids_live] = step + 1
            hit = torch.isin(token, stop_t) & live
            if hit.any():
                stopped[row_ids[hit].cpu()] = True
                live &= ~hit
            if step == max_new - 1 or not live.any():
                break
            # Compact: drop finished rows once they are >= 1/8 of the batch (a copy of the cache
            # costs about as much as one step's cache append; a dead row costs 1/B of every step).
            dead = int((~live).sum())
            if dead and dead * 8 >= len(live):
                keep = live.nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                token, mask, next_pos = token[keep], mask[keep], next_pos[keep]
                row_ids, live = row_ids[keep], live[keep]
            mask = torch.cat([mask, mask.new_ones(len(mask), 1)], dim=1)
            logits = self._forward(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=next_pos[:, None],
                **{self._cache_kw: cache},
                use_cache=True,
            )
            next_pos = next_pos + 1
        return self._samples(out, out_lp, out_ent, length, stopped)

    def _prefill(
        self, prompt_ids: list[list[int]], chunk: list[Piece], params: SamplingParams, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, DynamicCache]:
        """Prefill a chunk's prompts: the shared prefix once, each prompt's own tokens once, then give each of
        its samples a copy of its cache row. Returns, one row per sample (R = the chunk's samples), the first
        step's logits (R, V), the attention mask (R, L), the next position ids (R,) and the KV cache."""
        counts = torch.tensor([c for _, _, c in chunk])
        ids = [prompt_ids[i] for i, _, _ in chunk]
        shared = common_prefix_length(ids)
        suffix_ids, suffix_mask = left_pad([p[shared:] for p in ids], self.pad_id)
        # [shared prefix][left padding][own tokens]: padding in the middle is masked like padding on the left.
        mask = torch.cat([suffix_mask.new_ones(len(ids), shared), suffix_mask], dim=1).to(device)  # (P, L)
        position_ids = (mask.cumsum(-1) - 1).clamp_min_(0)  # (P, L), as generate does
        cache = preallocated_cache(self.model.config, mask.shape[1] + params.max_new_tokens)
        if shared:
            self._forward(
                input_ids=torch.tensor([ids[0][:shared]], device=device),
                position_ids=position_ids[:1, :shared],
                **{self._cache_kw: cache},
                use_cache=True,
            )
            cache.batch_repeat_interleave(len(ids))
        logits = self._forward(
            input_ids=suffix_ids.to(device),
            attention_mask=mask,
            position_ids=position_ids[:, shared:],
            **{self._cache_kw: cache},
            use_cache=True,
        )  # (P, V)
        expand = torch.repeat_interleave(torch.arange(len(chunk)), counts).to(device)  # (R,)
        if len(expand) != len(chunk):
            cache.batch_select_indices(expand)
        return logits[expand], mask[expand], position_ids[expand, -1] + 1, cache

    def _samples(
        self,
        out: torch.Tensor,
        out_lp: torch.Tensor | None,
        out_ent: torch.Tensor | None,
        length: torch.Tensor,
        stopped: torch.Tensor,
    ) -> list[Sample]:
        """The chunk's Samples from its decode buffers: each row's first ``length`` tokens, decoded in one
        batch, with their log-probs and entropies when recorded."""
        rows = len(out)
        token_lists = [out[r, : length[r]].tolist() for r in range(rows)]
        texts = self.tokenizer.batch_decode(token_lists, skip_special_tokens=True)
        return [
            Sample(
                text=texts[r],
                token_ids=token_lists[r],
                finish_reason="stop" if bool(stopped[r]) else "length",
                logprobs=out_lp[r, : length[r]].tolist() if out_lp is not None else None,
                entropies=out_ent[r, : length[r]].tolist() if out_ent is not None else None,
            )
            for r in range(rows)
        ]


def _split(rows: list[Sample], chunk: list[Piece]) -> list[list[Sample]]:
    """Cut a chunk's flat Samples back into its pieces."""
    parts, at = [], 0
    for _, _, count in chunk:
        parts.append(rows[at : at + count])
        at += count
    return parts


def _model_device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


@contextlib.contextmanager
def _progress(enabled: bool, chunks: list[list[Piece]]):
    """Yield advance(n_sequences): a rich progress bar over sequences when enabled, else a no-op."""
    with advancing("sampling", sum(c for chunk in chunks for _, _, c in chunk), enabled=enabled) as advance:
        yield advance
