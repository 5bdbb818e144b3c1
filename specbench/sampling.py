"""The sampling math of speculative sampling, as small pure tensor functions.

Notation: `target_probs` is the large model's distribution (Chen et al.'s q, Leviathan's p),
`draft_probs` the small model's (Chen's p, Leviathan's q). B = batch, K = drafted tokens,
V = vocabulary. Nothing here touches a model, a file or a global random state: every random
draw takes an explicit `torch.Generator`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """Temperature, then top-k, then top-p; temperature 0 means greedy (argmax)."""

    temperature: float = 1.0
    top_k: int = 0  # 0 disables top-k
    top_p: float = 1.0  # 1.0 disables nucleus sampling

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not (isinstance(self.top_k, int) and self.top_k >= 0):
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """(..., V) logits -> (..., V) float32 probabilities after temperature, top-k, top-p."""
    logits = logits.float()
    if params.greedy:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        probs = _top_p_filter(probs, params.top_p)
    return probs


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p; renormalise."""
    sorted_probs, order = _nucleus_candidates(probs, top_p)  # (..., C), descending
    mass_before = sorted_probs.cumsum(-1) - sorted_probs  # mass of strictly better tokens
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    filtered = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return filtered / filtered.sum(-1, keepdim=True)


# Top-p needs the likeliest tokens in order, not a full sort: on CPU, sorting a 152k vocabulary
# costs ~12 ms per row against ~0.7 ms for the top 1024 (benchmarks/draft_variants.py).
NUCLEUS_CANDIDATES = 1024


def _nucleus_candidates(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., V) -> the likeliest tokens' (probs, ids) in descending order (..., C): the top
    NUCLEUS_CANDIDATES when they hold top_p of every row's mass (then every later token is cut
    anyway, so the filter is the same), else all V sorted. The check is a host sync, so only
    CPU takes the shortcut; on a GPU the full sort is cheap."""
    if probs.device.type == "cpu" and probs.shape[-1] > NUCLEUS_CANDIDATES:
        top, order = torch.topk(probs, NUCLEUS_CANDIDATES, dim=-1)  # sorted descending
        if bool((top.sum(-1) >= top_p).all()):
            return top, order
    return torch.sort(probs, dim=-1, descending=True)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """(..., V) probabilities -> (...) int64 token ids, by inverse CDF (one uniform per row, no
    host sync). The CDF is accumulated in float64 (float32 on MPS), so even a 1e-9 token keeps
    its own step over a 150k vocabulary; a zero-probability token has none and is never drawn."""
    wide = torch.float32 if probs.device.type == "mps" else torch.float64
    cdf = probs.to(wide).cumsum(-1)  # (..., V)
    u = torch.rand((*probs.shape[:-1], 1), generator=generator, device=probs.device, dtype=wide)
    ids = torch.searchsorted(cdf, u * cdf[..., -1:], right=True)  # (..., 1): first cdf > u
    return ids.clamp_(max=probs.shape[-1] - 1).squeeze(-1)


def next_token(
    probs: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> torch.Tensor:
    """(..., V) -> (...): the argmax when greedy (no random draw), else a sample."""
    return probs.argmax(-1) if params.greedy else sample(probs, generator)


def residual(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, target - draft)) over the last dim; falls back to target where it is 0.

    The fallback only fires when target <= draft everywhere, i.e. the two are equal up to float
    error, so a rejection there had probability ~0 and the target itself is the right law.
    """
    diff = (target_probs - draft_probs).clamp_(min=0.0)  # (..., V)
    mass = diff.sum(-1, keepdim=True)  # (..., 1)
    degenerate = mass <= 1e-12
    diff = torch.where(degenerate, target_probs, diff)
    return diff / torch.where(degenerate, target_probs.sum(-1, keepdim=True), mass)


def expected_acceptance(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """beta = sum_x min(target(x), draft(x)), the chance a draft token passes. (..., V) -> (...)"""
    return torch.minimum(target_probs, draft_probs).sum(-1)


def verify(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Modified rejection sampling (Chen et al. 2023, Alg. 2), vectorised over B and K.

    draft_tokens (B, K), draft_probs (B, K, V), target_probs (B, K+1, V) ->
    (n_accepted (B,), next_token (B,)). Token x_i is accepted when u_i * draft(x_i) < target(x_i)
    with u_i ~ U[0, 1), i.e. with probability min(1, target/draft), and correctly also when
    draft(x_i) = 0. n_accepted counts the leading accepted tokens; next_token is drawn from the
    residual at the first rejection, or from target_probs[:, K] (the bonus) if all K pass.
    """
    batch, k = draft_tokens.shape
    index = draft_tokens.unsqueeze(-1)  # (B, K, 1)
    target_at = target_probs[:, :k].gather(-1, index).squeeze(-1)  # (B, K)
    draft_at = draft_probs.gather(-1, index).squeeze(-1)  # (B, K)
    u = torch.rand(
        (batch, k), generator=generator, device=draft_probs.device, dtype=draft_probs.dtype
    )
    accepted = u * draft_at < target_at  # (B, K)
    n_accepted = accepted.long().cumprod(-1).sum(-1)  # (B,)
    # A zero draft row at position K turns "the residual at position n" into the bonus law.
    padded_draft = torch.nn.functional.pad(draft_probs, (0, 0, 0, 1))  # (B, K+1, V)
    rows = torch.arange(batch, device=draft_tokens.device)
    next_law = residual(target_probs[rows, n_accepted], padded_draft[rows, n_accepted])  # (B, V)
    return n_accepted, sample(next_law, generator)


# --- multi-draft: one tree node, several children (sequence-level speculative sampling) -------


def sample_without_replacement(
    probs: torch.Tensor, n: int, generator: torch.Generator | None
) -> torch.Tensor:
    """(V,) probabilities -> (n,) distinct ids, drawn one after another without replacement
    (Gumbel-top-n on log probs; a zero-probability token is never drawn). n <= nonzero ids."""
    support = int((probs > 0).sum())
    if n > support:
        raise ValueError(f"cannot draw {n} distinct tokens from a law with {support} nonzero")
    u = torch.rand(probs.shape, generator=generator, device=probs.device, dtype=torch.float64)
    gumbel = -torch.log(-torch.log(u.clamp_(min=1e-300)))  # (V,)
    keys = torch.where(probs > 0, probs.double().log() + gumbel, float("-inf"))
    return torch.topk(keys, n).indices  # (n,) descending keys: the order of the draws


def verify_node(
    draws: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
    without_replacement: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-draft rejection at a tree node (SpecInfer's multi-step rule; Recursive Speculative
    Decoding's with `without_replacement`), vectorised over B independent nodes: exactly one
    token of target_probs per node.

    draws (B, m) each node's children in draw order, every draw its own child even when ids
    repeat (i.i.d. from draft_probs, or distinct, without replacement); draft_probs (B, V) the
    one law a node's draws came from; target_probs (B, V). For i = 1..m: accept x_i with
    probability min(1, P(x_i) / q(x_i)); on rejection P <- normalize(max(0, P - q)) and,
    without replacement, then q <- q with x_i zeroed, renormalised. All rejected: a fallback
    draw from the final P. -> (index of the accepted draw, -1 if none (B,), token (B,)).
    """
    batch, m = draws.shape
    target, draft = target_probs.double(), draft_probs.double()  # (B, V)
    u = torch.rand((batch, m), generator=generator, device=draws.device, dtype=torch.float64)
    index = torch.full((batch,), -1, dtype=torch.long, device=draws.device)  # (B,)
    for i in range(m):
        token = draws[:, i : i + 1]  # (B, 1)
        passed = (u[:, i : i + 1] * draft.gather(-1, token) < target.gather(-1, token))[:, 0]
        index = torch.where((index < 0) & passed, i, index)
        open_ = (index < 0)[:, None]  # (B, 1): still rejecting
        target = torch.where(open_, residual(target, draft), target)
        if without_replacement:
            zeroed = draft.scatter(-1, token, 0.0)
            mass = zeroed.sum(-1, keepdim=True)
            draft = torch.where(open_ & (mass > 0), zeroed / mass.clamp(min=1e-300), draft)
    fallback = sample(target.float(), generator)  # (B,): drawn for every node, used where -1
    chosen = draws.gather(-1, index.clamp(min=0)[:, None])[:, 0]
    return index, torch.where(index >= 0, chosen, fallback)
