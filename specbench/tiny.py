"""Tiny random causal LMs and a byte-level tokenizer, built in-process: no download, no files."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

FAMILIES = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}
SPECIALS = ("<bos>", "<eos>", "<pad>")  # ids 256, 257, 258 after the 256 byte tokens
BYTE_VOCAB = 256 + len(SPECIALS)
# A plain-text chat template, so chat-format prompts run on tiny models too.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}"
    "{% if not (loop.last and m['role'] == 'assistant') %}<eos>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (one token per UTF-8 byte, no merges) for any text."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab.update({tok: 256 + i for i, tok in enumerate(SPECIALS)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SPECIALS[0], eos_token=SPECIALS[1], pad_token=SPECIALS[2]
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_model(
    family: str = "qwen2",
    *,
    vocab: int = BYTE_VOCAB,
    seed: int = 0,
    layers: int = 2,
    hidden: int = 32,
    std: float = 0.5,
) -> torch.nn.Module:
    """A small random model; a large init std keeps its distributions far from uniform."""
    if family not in FAMILIES:
        raise ValueError(f"unknown tiny family {family!r}; choose one of {sorted(FAMILIES)}")
    config_cls, model_cls = FAMILIES[family]
    specials = (256, 257, 258) if vocab >= BYTE_VOCAB else (None, None, None)
    config = config_cls(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=std,
        tie_word_embeddings=False,
        bos_token_id=specials[0],
        eos_token_id=specials[1],
        pad_token_id=specials[2],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_cls(config).eval()


def perturbed_copy(model: torch.nn.Module, noise: float, seed: int = 0) -> torch.nn.Module:
    """A draft that agrees with `model` often but not always: its weights plus Gaussian noise."""
    draft = type(model)(model.config).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p, q in zip(model.parameters(), draft.parameters(), strict=True):
            q.copy_(p + noise * p.std() * torch.randn(p.shape, generator=gen))
    return draft
