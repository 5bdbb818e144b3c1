"""Sequence-level multi-draft speculative sampling: n draft sequences of depth K, merged into a
token tree, scored in one target call (tree attention mask and positions), verified node by
node from the root (`sampling.verify_node`): exactly the target's law.

Drafting is batched by tree node: one draft forward per depth scores every distinct prefix's
newest node (at most n) as one sequence under a tree mask against the draft's one KV cache (the
shared prefix is never copied per branch), and every draw at a node comes from that node's one
law, so the i.i.d. rule's premise holds bitwise. `drafts="iid"`: each sequence's
tokens drawn independently (SpecInfer); `"without_replacement"`: the draws at a node are distinct
(Gumbel-top-m; Recursive Speculative Decoding), so the n sequences part at the root. Greedy
decoding proposes each node's top-m draft tokens and accepts the target's argmax.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..sampling import (
    SamplingParams,
    expected_acceptance,
    logits_to_probs,
    next_token,
    sample,
    sample_without_replacement,
    verify_node,
)
from .common import CachedLM, Clock, GenerationResult, StopCondition, model_device
from .speculative import draft_and_verify, pair_vocab_size

DRAFT_MODES = ("iid", "without_replacement")


@dataclass
class Tree:
    """A drafted token tree. Node 0 is the root (the newest emitted token); every other node
    holds one drafted token; nodes are numbered breadth first (a parent before its children)."""

    tokens: list[int]
    parent: list[int] = field(default_factory=lambda: [-1])
    depth: list[int] = field(default_factory=lambda: [0])
    draws: dict[int, torch.Tensor] = field(default_factory=dict)  # node -> (m,) draws, in order
    laws: dict[int, torch.Tensor] = field(default_factory=dict)  # node -> (V,) law of its draws
    child: dict[tuple[int, int], int] = field(default_factory=dict)  # (node, token) -> node

    def add(self, node: int, token: int) -> int:
        """The child of `node` holding `token`, created on first use (duplicates share it)."""
        if (node, token) not in self.child:
            self.child[node, token] = len(self.tokens)
            self.tokens.append(token)
            self.parent.append(node)
            self.depth.append(self.depth[node] + 1)
        return self.child[node, token]

    def ancestor(self, node: int, depth: int) -> int:
        while self.depth[node] > depth:
            node = self.parent[node]
        return node

    def attention(
        self, past: int, dtype: torch.dtype, device: torch.device, prefix: int = 0
    ) -> torch.Tensor:
        """(1, 1, P+N, past+P+N) additive mask for `prefix` new tokens of the sequence (causal)
        followed by the N tree nodes: a node sees the cache, the prefix, its ancestors, itself."""
        size = len(self.tokens)
        allowed = torch.zeros(size, size, dtype=torch.bool)
        for node in range(size):
            up = node
            while up >= 0:
                allowed[node, up] = True
                up = self.parent[up]
        causal = torch.ones(prefix, prefix, dtype=torch.bool).tril()
        rows = prefix + size
        full = torch.zeros(rows, past + rows, dtype=torch.bool)
        full[:, :past] = True
        full[:prefix, past : past + prefix] = causal
        full[prefix:, past : past + prefix] = True
        full[prefix:, past + prefix :] = allowed
        mask = torch.zeros(full.shape, dtype=dtype).masked_fill_(~full, torch.finfo(dtype).min)
        return mask[None, None].to(device)


def proposal_law(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """(R, V) -> (R, V) the law drafts are drawn from: the sampling transform, or under greedy
    decoding the untempered softmax (its top-m are the candidates; any law keeps greedy exact)."""
    if sampling.greedy:
        return torch.softmax(logits.float(), dim=-1)
    return logits_to_probs(logits, sampling)


def draw_children(
    law: torch.Tensor, m: int, sampling: SamplingParams, mode: str, generator
) -> torch.Tensor:
    """(V,) -> (m,) draws at one node: top-m under greedy, else i.i.d. or without replacement."""
    if sampling.greedy:
        return torch.topk(law, m).indices
    if mode == "without_replacement":
        return sample_without_replacement(law, min(m, int((law > 0).sum())), generator)
    return sample(law.expand(m, -1), generator)


def level_mask(
    past: int, base: int, ancestors: list[list[int]], dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """(1, 1, R, past+R) additive mask for R tree nodes of one depth fed after `past` cached
    positions: row r sees the committed positions [0, base), its ancestors' cached positions
    `ancestors[r]` and itself."""
    rows = len(ancestors)
    allowed = torch.zeros(rows, past + rows, dtype=torch.bool)
    allowed[:, :base] = True
    for row, slots in enumerate(ancestors):
        allowed[row, slots] = True
        allowed[row, past + row] = True
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None].to(device)


class TreeDrafter:
    """A draft model proposing n sequences of depth K as a tree: one forward per depth, the
    depth's nodes as one sequence under a tree mask on the draft's single KV cache."""

    def __init__(self, draft: torch.nn.Module, vocab: int, n_drafts: int, mode: str) -> None:
        if mode not in DRAFT_MODES:
            raise ValueError(f"drafts must be one of {DRAFT_MODES}, got {mode!r}")
        self.lm = CachedLM(draft, vocab)
        self.n, self.mode = n_drafts, mode
        self.base = 0  # committed positions in the draft cache before the tree's nodes
        self.slot: dict[int, int] = {}  # tree node -> its position in the draft cache

    @property
    def calls(self) -> int:
        return self.lm.calls

    def propose(self, ids: torch.Tensor, n: int, k: int, sampling: SamplingParams, gen) -> Tree:
        """The tree after ids[:, :n] (node 0 = ids[:, n-1]), n sequences of depth k."""
        tree = Tree(tokens=[int(ids[0, n - 1])])
        device = model_device(self.lm.model)
        groups = {0: list(range(self.n))}  # node -> the sequences through it
        logits = self.lm.forward(ids[:, self.lm.length : n].to(device), keep=1)[0]  # (1, V)
        self.base, self.slot = n, {0: n - 1}
        frontier, chain = [0], True  # chain: every depth so far had one node (no mask needed)
        for depth in range(k):
            laws = proposal_law(logits, sampling).to(ids.device)  # (rows, V)
            after: dict[int, list[int]] = {}
            for row, node in enumerate(frontier):
                tree.laws[node] = laws[row]
                draws = draw_children(laws[row], len(groups[node]), sampling, self.mode, gen)
                tree.draws[node] = draws
                for seq, token in zip(groups[node], draws.tolist(), strict=False):
                    after.setdefault(tree.add(node, token), []).append(seq)
            if depth == k - 1:
                break
            frontier, groups = sorted(after), after  # breadth-first node order
            logits = self._score_level(tree, frontier, chain, device)  # (rows, V)
            chain = chain and len(frontier) == 1
        return tree

    def _score_level(
        self, tree: Tree, nodes: list[int], chain: bool, device: torch.device
    ) -> torch.Tensor:
        """Draft logits (R, V) after each of one depth's R nodes, fed as one sequence."""
        past = self.lm.length
        tokens = torch.tensor([[tree.tokens[c] for c in nodes]], device=device)  # (1, R)
        for row, node in enumerate(nodes):
            self.slot[node] = past + row
        if chain and len(nodes) == 1:  # the cache is the node's own path: a plain step
            return self.lm.forward(tokens, keep=1)[0]
        ancestors = [self._ancestor_slots(tree, tree.parent[c]) for c in nodes]
        positions = torch.tensor([[self.base + tree.depth[c] - 1 for c in nodes]], device=device)
        dtype = next(self.lm.model.parameters()).dtype
        mask = level_mask(past, self.base, ancestors, dtype, device)  # (1, 1, R, past + R)
        logits = self.lm.forward(
            tokens, keep=len(nodes), position_ids=positions, attention_mask=mask
        )  # (1, R, V)
        return logits[0]

    def _ancestor_slots(self, tree: Tree, node: int) -> list[int]:
        """Cache positions of `node` and its ancestors below the root (the root is committed)."""
        slots = []
        while node > 0:
            slots.append(self.slot[node])
            node = tree.parent[node]
        return slots

    def keep_path(self, tree: Tree, node: int) -> None:
        """Keep the committed positions and the accepted path's nodes the draft cache holds
        (depths 1..K-1); drop every other branch."""
        held = [self.slot[p] for p in tree_path(tree, node) if p in self.slot]  # ascending
        self.lm.keep_positions(self.base, [slot - self.base for slot in held])
        self.slot = {}

    def rollback(self, keep: int) -> None:
        self.lm.rollback(self.lm.length - keep)


def tree_path(tree: Tree, node: int) -> list[int]:
    """The nodes from the root's child down to `node` (empty for the root)."""
    path = []
    while node > 0:
        path.append(node)
        node = tree.parent[node]
    return path[::-1]


def walk(
    tree: Tree, target_probs: torch.Tensor, sampling: SamplingParams, mode: str, generator
) -> tuple[list[int], torch.Tensor, list[torch.Tensor]]:
    """Verify the tree from the root: target_probs (N, V), one row per node ->
    (accepted path nodes, the next token (), beta at each tested node)."""
    node, path, betas = 0, [], []
    while node in tree.draws:
        law, target = tree.laws[node], target_probs[node]
        betas.append(expected_acceptance(target, law))
        index, token = verify_node(
            tree.draws[node][None], law[None], target[None], generator,
            mode == "without_replacement",
        )  # fmt: skip
        if int(index) < 0:
            return path, token[0], betas
        node = tree.child[node, int(token)]
        path.append(node)
    return path, next_token(target_probs[node], sampling, generator), betas  # the bonus


def tree_step(
    tlm: CachedLM, drafter: TreeDrafter, ids: torch.Tensor, n: int, k_max: int,
    sampling: SamplingParams, generator, _verify, clock: Clock,
) -> tuple[int, int, torch.Tensor]:  # fmt: skip
    """One iteration after ids[:, :n]: draft a tree, score it in one target call (the cache
    holds ids[:, :n-1]; node 0 is ids[:, n-1]), walk it, keep both caches on the accepted
    path, write path + next token. -> (accepted, depth K', beta per tested node)."""
    tree = drafter.propose(ids, n, k_max, sampling, generator)
    clock.lap("draft")
    device, past = model_device(tlm.model), tlm.length
    prefix = ids[0, past : n - 1].tolist()  # not yet in the target's cache (the prompt, first)
    tokens = torch.tensor([prefix + tree.tokens], device=device)  # (1, P + N)
    depth = [*range(len(prefix)), *(len(prefix) + d for d in tree.depth)]
    positions = torch.tensor([depth], device=device) + past  # (1, P + N)
    dtype = next(tlm.model.parameters()).dtype
    mask = tree.attention(past, dtype, device, len(prefix))  # (1, 1, P + N, past + P + N)
    logits = tlm.forward(
        tokens, keep=len(tree.tokens), position_ids=positions, attention_mask=mask
    )  # (1, N, V)
    clock.lap("target")
    target_probs = logits_to_probs(logits[0], sampling)  # (N, V)
    path, token, betas = walk(tree, target_probs, sampling, drafter.mode, generator)
    tlm.keep_positions(past + len(prefix), [0, *path])
    drafter.keep_path(tree, path[-1] if path else 0)
    ids[0, n : n + len(path)] = torch.tensor([tree.tokens[p] for p in path], dtype=ids.dtype)
    ids[0, n + len(path)] = token
    return len(path), k_max, torch.stack(betas) if betas else torch.empty(0)


def multidraft_generate(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    k: int,
    n_drafts: int,
    drafts: str,
    max_new_tokens: int,
    sampling: SamplingParams,
    generator: torch.Generator | None,
    stop: StopCondition | None = None,
    vocab_size: int | None = None,
) -> GenerationResult:
    """Multi-draft speculative sampling: n_drafts sequences of depth k per target call, on
    dynamic caches (the tree's branches are dropped from them after each call)."""
    if n_drafts < 1:
        raise ValueError(f"n_drafts must be >= 1, got {n_drafts}")
    vocab = pair_vocab_size(target, draft, vocab_size)
    drafter = TreeDrafter(draft, vocab, n_drafts, drafts)
    return draft_and_verify(
        target, drafter, input_ids, k=k, max_new_tokens=max_new_tokens, sampling=sampling,
        generator=generator, vocab_size=vocab, stop=stop, step_fn=tree_step,
    )  # fmt: skip
