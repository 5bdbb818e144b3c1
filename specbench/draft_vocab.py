"""A draft that proposes among N token ids only: a narrower lm_head, the same law elsewhere.

The 0.5B draft's lm_head (151,936 x 896) is about a quarter of its bytes per token. Keeping N
rows cuts that share; the draft then gives probability 0 outside the subset, and verification
stays exact (tokens outside can still come from the residual or the bonus, drawn from the
target). The subset is chosen from the tokenizer alone, never from task data: the N lowest ids
(byte-level BPE ids follow merge order, so low ids are the frequent pieces) plus every added /
special token (chat markers, EOS).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

ROWS_MULTIPLE = 64  # subset sizes rounded up to whole kernel tiles (int4 needs rows % 16 == 0)


def subset_ids(tokenizer: Any, n: int, width: int) -> torch.Tensor:
    """Sorted ids (M,) with M >= n, M % ROWS_MULTIPLE == 0 (or M = width): the lowest ids and
    every added or special token below the lm_head's width."""
    special = {i for i in tokenizer.added_tokens_decoder if i < width}
    special |= {i for i in tokenizer.all_special_ids if i is not None and 0 <= i < width}
    size = min(width, -(-max(n, len(special)) // ROWS_MULTIPLE) * ROWS_MULTIPLE)
    ids, low = set(special), 0
    while len(ids) < size:  # the lowest ids fill what the specials leave
        ids.add(low)
        low += 1
    return torch.tensor(sorted(ids), dtype=torch.long)


class SubsetHead(nn.Module):
    """lm_head over `ids` only; logits are -inf at every other id (shape unchanged: (..., V))."""

    def __init__(self, head: nn.Linear, ids: torch.Tensor) -> None:
        super().__init__()
        rows = head.weight.detach()[ids].clone()  # (M, hidden); a tied embedding stays intact
        self.proj = nn.Linear(head.in_features, len(ids), bias=head.bias is not None)
        self.proj.to(device=rows.device, dtype=rows.dtype)
        self.proj.weight = nn.Parameter(rows, requires_grad=False)
        if head.bias is not None:
            self.proj.bias = nn.Parameter(head.bias.detach()[ids].clone(), requires_grad=False)
        self.register_buffer("ids", ids.to(rows.device))
        self.in_features, self.out_features = head.in_features, head.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sub = self.proj(x)  # (..., M)
        full = sub.new_full((*sub.shape[:-1], self.out_features), float("-inf"))  # (..., V)
        return full.index_copy_(-1, self.ids, sub)


def narrow_vocab(model: nn.Module, tokenizer: Any, n: int) -> nn.Module:
    """Replace the model's lm_head by a SubsetHead over subset_ids(tokenizer, n), in place."""
    head = model.get_output_embeddings()
    ids = subset_ids(tokenizer, n, head.out_features)
    if len(ids) < head.out_features:
        model.set_output_embeddings(SubsetHead(head, ids))
    return model
