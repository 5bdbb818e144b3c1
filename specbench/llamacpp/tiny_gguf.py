"""A tiny Qwen2 model (specbench.tiny) and the byte tokenizer written as a GGUF file, so tests
serve the same weights through llama.cpp and through transformers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

# transformers' Qwen2 parameter names -> GGUF tensor names (qwen2: NEOX rope, no permutation)
LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}  # fmt: skip
TOP = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def gguf_name(name: str) -> str:
    """The GGUF tensor name of a Qwen2ForCausalLM parameter."""
    if name in TOP:
        return TOP[name]
    _, _, index, rest = name.split(".", 3)  # model.layers.<i>.<rest>
    return f"blk.{index}.{LAYER[rest]}"


def write_tiny_gguf(
    model: torch.nn.Module, tokenizer, path: Path, merges: list[str] | None = None
) -> Path:
    """model (a tiny Qwen2ForCausalLM) and tokenizer (specbench.tiny's byte tokenizer, maybe with
    added tokens) as an f32 GGUF at path; `merges` are the BPE merges ("a b")."""
    import gguf  # the offline extra's GGUF reader/writer

    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    special = set(tokenizer.all_special_tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    )
    # llama.cpp refuses a BPE vocabulary without merges (and the writer drops an empty list):
    # by default one merge of the two rarest bytes (the last two byte tokens), which no test
    # text holds
    writer.add_token_merges(merges or [f"{tokens[254]} {tokens[255]}"])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)
    for name, tensor in model.state_dict().items():
        writer.add_tensor(gguf_name(name), tensor.detach().float().numpy().astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
