"""Models of a named published shape with random weights: no download, no checkpoint.

Cost is a property of the shape and the hardware, acceptance a property of the trained pair and
the task. A random-weight model has the right cost but a meaningless (near-uniform) acceptance,
so shape models are meant for `decoder=replay`, which takes the accepted counts from a trace
recorded with the real pair (see specbench/decoding/replay.py).

Tokenizer: by default the byte tokenizer of specbench.tiny (259 ids, valid for every shape, no
files). Prompts then encode one token per byte, so prefill is longer than with the model's own
tokenizer, and sampling runs over 259 logits (the lm_head still computes the full vocabulary).
For prompt lengths as the recorded pair saw them, set `tokenizer:` to that pair's tokenizer
(a packaged model name, hub id or local dir) on a shape with the same vocabulary (`qwen25_*`
for the offline Qwen2.5-Coder pair).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

ARCHITECTURES = {"llama": LlamaConfig, "qwen2": Qwen2Config}


@dataclass(frozen=True)
class Shape:
    """A published checkpoint's architecture, as transformers config fields."""

    family: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    extra: dict[str, Any] = field(default_factory=dict)

    def config(self, overrides: dict[str, Any] | None = None) -> Any:
        fields = {k: v for k, v in vars(self).items() if k not in ("family", "extra")}
        return ARCHITECTURES[self.family](**(fields | self.extra | dict(overrides or {})))


QWEN = {"max_position_embeddings": 32768, "rope_theta": 1_000_000.0, "tie_word_embeddings": False}
SHAPES: dict[str, Shape] = {
    "llama_68m": Shape("llama", 768, 3072, 2, 12, 12, 32000),  # JackFram/llama-68m
    "llama_160m": Shape("llama", 768, 3072, 12, 12, 12, 32000),  # JackFram/llama-160m
    "tinyllama_1b": Shape("llama", 2048, 5632, 22, 32, 4, 32000),  # TinyLlama-1.1B
    "llama2_7b": Shape("llama", 4096, 11008, 32, 32, 32, 32000),
    "llama2_13b": Shape("llama", 5120, 13824, 40, 40, 40, 32000),
    "llama2_70b": Shape("llama", 8192, 28672, 80, 64, 8, 32000),
    "qwen25_05b": Shape("qwen2", 896, 4864, 24, 14, 2, 151936, QWEN),
    "qwen25_15b": Shape("qwen2", 1536, 8960, 28, 12, 2, 151936, QWEN),
    "qwen25_7b": Shape("qwen2", 3584, 18944, 28, 28, 4, 152064, QWEN),
}


def lookup_shape(name: str) -> Shape:
    if name not in SHAPES:
        # Imported here: config pulls hydra, which shape models (benchmarks/gpu_targets.py on a
        # bare GPU machine) do without.
        from .config import ConfigError

        raise ConfigError(f"unknown model shape {name!r}; choose one of {sorted(SHAPES)}")
    return SHAPES[name]


def shape_model(
    name: str,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
    attn_implementation: str = "sdpa",
) -> torch.nn.Module:
    """Random weights of shape `name` (fields changed by `overrides`), built on `device` in
    `dtype` directly: the full-size fp32 copy on the host is never made."""
    config = lookup_shape(name).config(overrides)
    gen_devices = [device] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=gen_devices), torch.device(device):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(
            config, dtype=dtype, attn_implementation=attn_implementation
        )
    return model.eval()


def parameter_count(name: str, overrides: dict[str, Any] | None = None) -> int:
    """Parameters of the shape, counted without building it (embeddings and lm_head included)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(lookup_shape(name).config(overrides))
    return sum(p.numel() for p in model.parameters())
