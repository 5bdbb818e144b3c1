"""Load target/draft models and tokenizers by config, check the pair, keep a pair per process."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from .config import BackendConfig, ConfigError, ModelConfig
from .decoding.lean import disable_lean, lean_forward
from .draft_vocab import narrow_vocab
from .kernels import can_pack, cpu_linears, pack_linears
from .packaged import PACKAGED, locate_parts, lookup, materialize
from .quantize import int4_rows, int8_prompts, quantize_linears
from .shapes import lookup_shape, shape_model
from .tiny import byte_tokenizer, perturbed_copy, tiny_model

log = logging.getLogger(__name__)
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def check_device(backend: BackendConfig) -> None:
    """The backend's device exists in this torch on this machine; else what to do instead."""
    if backend.device == "cuda" and not torch.cuda.is_available():
        why = (
            f"this torch ({torch.__version__}) is built without CUDA"
            if torch.version.cuda is None
            else "no CUDA GPU is visible"
        )
        raise ConfigError(
            f"backend={backend.name} needs a CUDA GPU, but {why}; use backend=cpu_bf16 (or cpu), "
            "or on a GPU machine install a CUDA build of torch"
        )
    if backend.device == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(
            f"backend={backend.name} needs Apple's MPS, which this machine lacks; use "
            "backend=cpu_bf16 (or cpu)"
        )


def preflight(cfg: ModelConfig) -> None:
    """Cheap checks before anything heavy: packaged parts installed, local paths present."""
    if cfg.loader == "packaged":
        locate_parts(lookup(cfg.source))
    if cfg.loader == "shape":
        lookup_shape(cfg.source)
        if cfg.tokenizer in PACKAGED:
            locate_parts(lookup(cfg.tokenizer))
    local = cfg.loader == "hf" and cfg.source.startswith(("/", "./", "../", "~"))
    if local and not Path(cfg.source).expanduser().is_dir():
        raise ConfigError(f"model {cfg.name!r}: local checkpoint not found: {cfg.source}")


def _checkpoint(cfg: ModelConfig, dtype: str) -> str:
    """What from_pretrained reads: the hub id / local dir, or the packaged model's cache dir."""
    return str(materialize(cfg.source, dtype)) if cfg.loader == "packaged" else cfg.source


def load_tokenizer(cfg: ModelConfig, dtype: str = "bfloat16") -> Any:
    """The model's tokenizer (tiny models share an in-process byte tokenizer)."""
    if cfg.loader == "tiny" or (cfg.loader == "shape" and not cfg.tokenizer):
        return byte_tokenizer()
    from transformers import AutoTokenizer

    source = cfg.tokenizer or _checkpoint(cfg, dtype)
    if cfg.loader == "shape" and cfg.tokenizer in PACKAGED:  # a packaged pair's tokenizer
        source = str(materialize(cfg.tokenizer, dtype))
    return AutoTokenizer.from_pretrained(source, revision=cfg.revision)


def eos_token_ids(cfg: ModelConfig, tokenizer: Any, dtype: str = "bfloat16") -> tuple[int, ...]:
    """Every id that ends a generation: the tokenizer's EOS and its generation_config's (a list
    for many chat models: Qwen2.5 ends raw text with <|endoftext|>, chat turns with <|im_end|>)."""
    ids = set(_as_ids(tokenizer.eos_token_id)) | set(cfg.eos_token_ids)
    if cfg.loader == "tiny" or (cfg.loader == "shape" and not cfg.tokenizer):
        return tuple(sorted(ids))
    from transformers import GenerationConfig

    source = cfg.tokenizer or _checkpoint(cfg, dtype)
    if cfg.loader == "shape" and cfg.tokenizer in PACKAGED:
        source = str(materialize(cfg.tokenizer, dtype))
    try:
        generation = GenerationConfig.from_pretrained(source, revision=cfg.revision)
    except OSError:  # no generation_config.json: the tokenizer's EOS is all there is
        log.info("%s has no generation_config.json; EOS from the tokenizer only", cfg.name)
        return tuple(sorted(ids))
    return tuple(sorted(ids | set(_as_ids(generation.eos_token_id))))


def _as_ids(value: Any) -> list[int]:
    """None, an id or a list of ids -> a list of ids."""
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list | tuple) else [int(value)]


def _load_tiny(cfg: ModelConfig, backend: BackendConfig) -> torch.nn.Module:
    spec = cfg.tiny
    model = tiny_model(
        spec.family, seed=spec.seed, layers=spec.layers, hidden=spec.hidden, std=spec.std
    )
    return perturbed_copy(model, spec.noise, seed=spec.seed + 1) if spec.noise > 0 else model


def _load_hf(cfg: ModelConfig, backend: BackendConfig) -> torch.nn.Module:
    """Hub id, local directory, or a packaged model's converted cache: one from_pretrained path."""
    from transformers import AutoModelForCausalLM

    placement = {"tp_plan": backend.tp_plan} if backend.tp_plan else {}
    return AutoModelForCausalLM.from_pretrained(
        _checkpoint(cfg, cfg.torch_dtype_name(backend.dtype)),
        revision=cfg.revision,
        dtype=TORCH_DTYPES[cfg.torch_dtype_name(backend.dtype)],
        attn_implementation=backend.attn_implementation,
        device_map=backend.device_map,
        **placement,
    )


def _load_shape(cfg: ModelConfig, backend: BackendConfig) -> torch.nn.Module:
    """Random weights of a named shape, allocated on the backend's device in the model's dtype."""
    if not single_device(backend):
        raise ConfigError(
            f"model {cfg.name!r}: shape models are built on one device; drop "
            "backend.device_map / backend.tp_plan (or save one and load it with loader=hf)"
        )
    dtype = TORCH_DTYPES[cfg.torch_dtype_name(backend.dtype)]
    return shape_model(
        cfg.source,
        dtype=dtype,
        device=backend.device,
        overrides=cfg.shape,
        attn_implementation=backend.attn_implementation,
    )


MODEL_LOADERS: dict[str, Callable[[ModelConfig, BackendConfig], torch.nn.Module]] = {
    "tiny": _load_tiny,
    "hf": _load_hf,
    "packaged": _load_hf,
    "shape": _load_shape,
}


def single_device(backend: BackendConfig) -> bool:
    """Whether models go whole onto backend.device (no accelerate map, no tensor parallel)."""
    return backend.device_map is None and backend.tp_plan is None


def draft_backend(backend: BackendConfig) -> BackendConfig:
    """The draft's placement: whole on backend.device (cuda = cuda:0), never split or sharded."""
    return replace(backend, device_map=None, tp_plan=None)


def load_model(cfg: ModelConfig, backend: BackendConfig) -> torch.nn.Module:
    """Build or download the model, then place it on the backend's device and dtype."""
    log.info("loading %s (%s %s)", cfg.name, cfg.loader, cfg.source or cfg.tiny.family)
    model = MODEL_LOADERS[cfg.loader](cfg, backend)
    if single_device(backend):
        dtype = TORCH_DTYPES[cfg.torch_dtype_name(backend.dtype)]
        model = model.to(device=backend.device, dtype=dtype)
    if cfg.draft_vocab is not None:
        tokenizer = load_tokenizer(cfg, cfg.torch_dtype_name(backend.dtype))
        model = narrow_vocab(model, tokenizer, cfg.draft_vocab)
    rows = cfg.quantize == "int4" and int4_rows(backend, cfg.quantize_group)
    model = quantize_linears(model, cfg.quantize, rows, cfg.quantize_group)
    model = cpu_linears(model, backend.prompt_fp32, backend.rows_kernel).eval()
    model = model if backend.lean_decode else disable_lean(model)
    if can_pack(backend) or cfg.prompt_int8:
        lean_forward(model)  # fuses int4 projections from the float weights these move
    if cfg.prompt_int8:
        model = int8_prompts(model)
    if can_pack(backend):
        model = pack_linears(model, backend.pad_decode)
    return model


def check_tokenizers(target_tok: Any, draft_tok: Any) -> int:
    """The shared vocabulary size; a ConfigError if the two disagree on a shared id or on EOS."""
    size = min(len(target_tok), len(draft_tok))
    target_ids = {i: t for t, i in target_tok.get_vocab().items() if i < size}
    draft_ids = {i: t for t, i in draft_tok.get_vocab().items() if i < size}
    if target_ids != draft_ids:
        bad = min(
            i for i in set(target_ids) | set(draft_ids) if target_ids.get(i) != draft_ids.get(i)
        )
        raise ConfigError(
            f"the draft's tokenizer does not match the target's (id {bad} is "
            f"{target_ids.get(bad)!r} vs {draft_ids.get(bad)!r}); choose a draft from the "
            "target's model family"
        )
    return size


def check_eos(target_eos: tuple[int, ...], draft_eos: tuple[int, ...]) -> tuple[int, ...]:
    """The pair's EOS ids; a ConfigError if target and draft end generations differently."""
    if set(target_eos) != set(draft_eos):
        raise ConfigError(
            f"target and draft disagree on EOS ({list(target_eos)} vs {list(draft_eos)}); "
            "choose a draft from the target's model family"
        )
    return target_eos


class ModelPool:
    """Holds the last loaded (target, draft) for the life of a process: a sweep loads it once."""

    def __init__(self) -> None:
        self._key: str | None = None
        self._models: tuple[torch.nn.Module, torch.nn.Module | None] | None = None
        self.loads = 0

    def get(
        self, target: ModelConfig, draft: ModelConfig | None, backend: BackendConfig
    ) -> tuple[torch.nn.Module, torch.nn.Module | None]:
        key = repr((target, draft, backend))
        if key != self._key:
            self._key, self._models = None, None  # free the old pair; a failed load keeps none
            loaded_target = load_model(target, backend)
            loaded_draft = load_model(draft, draft_backend(backend)) if draft is not None else None
            self._key, self._models = key, (loaded_target, loaded_draft)
            self.loads += 1
        assert self._models is not None
        return self._models
