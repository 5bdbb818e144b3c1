"""Multi-draft speculative sampling: the node rules are exact (by enumeration and by 200k draws),
the two known-biased variants are caught, the tree is scored like its paths, and whole
generations follow the target's law."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from conftest import run_cli
from stats_helpers import chi2_pvalue
from test_exactness import PROMPT, SAMPLES, M, V, exact_joint

from specbench import SamplingParams, speculative_generate
from specbench.config import ConfigError
from specbench.decoding.common import CachedLM
from specbench.decoding.multidraft import Tree, TreeDrafter, multidraft_generate
from specbench.profile import branches, profile_model
from specbench.runner import to_config
from specbench.sampling import residual, verify_node
from specbench.tiny import perturbed_copy, tiny_model

DRAWS = 200_000
NODE_V = 6


def node_laws(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A target law P and a draft law q on NODE_V tokens, far apart, q > 0 everywhere."""
    gen = torch.Generator().manual_seed(seed)
    target = torch.rand(NODE_V, generator=gen, dtype=torch.float64) ** 3
    draft = torch.rand(NODE_V, generator=gen, dtype=torch.float64) + 0.05
    return target / target.sum(), draft / draft.sum()


def draw(draft: torch.Tensor, m: int, without_replacement: bool, gen) -> torch.Tensor:
    """(DRAWS, m) children per node: i.i.d. from q, or Gumbel-top-m (without replacement)."""
    if not without_replacement:
        return torch.multinomial(draft.expand(DRAWS, -1), m, replacement=True, generator=gen)
    u = torch.rand(DRAWS, NODE_V, generator=gen, dtype=torch.float64)
    return torch.topk(draft.log() - torch.log(-torch.log(u)), m, dim=-1).indices


def output_counts(tokens: torch.Tensor) -> np.ndarray:
    return np.bincount(tokens.numpy(), minlength=NODE_V).astype(float)


def exact_rule_law(target, draft, m: int, without_replacement: bool) -> np.ndarray:
    """The node rule's output law by exact enumeration of every draw sequence."""
    out = np.zeros(NODE_V)
    for draws in itertools.product(range(NODE_V), repeat=m):
        if without_replacement and len(set(draws)) < m:
            continue
        q, chance = draft.clone(), 1.0  # the chance of this draw sequence
        for x in draws:
            chance *= float(q[x])
            if without_replacement:
                q[x] = 0
                q = q / q.sum()
        p, q, reach = target.clone(), draft.clone(), chance  # the rule, given these draws
        for x in draws:
            accept = min(1.0, float(p[x] / q[x]))
            out[x] += reach * accept
            reach *= 1 - accept
            p = residual(p, q)
            if without_replacement:
                q = q.clone()
                q[x] = 0
                q = q / q.sum()
        out += reach * p.numpy()
    return out


@pytest.mark.parametrize("without_replacement", [False, True])
def test_node_rule_is_exact_by_enumeration(without_replacement):
    target, draft = node_laws()
    law = exact_rule_law(target, draft, 3, without_replacement)
    assert np.abs(law - target.numpy()).max() < 1e-12


@pytest.mark.parametrize("without_replacement", [False, True])
def test_node_rule_is_exact_in_200k_draws(without_replacement):
    target, draft = node_laws()
    gen = torch.Generator().manual_seed(7)
    draws = draw(draft, 3, without_replacement, gen)
    rows = (DRAWS, NODE_V)
    index, tokens = verify_node(
        draws, draft.expand(rows), target.expand(rows), gen, without_replacement
    )
    assert chi2_pvalue(output_counts(tokens), target.numpy()) > 1e-3
    assert {-1, 0, 1, 2} <= set(index.unique().tolist())  # every path ran, fallback included


def test_merged_duplicates_and_no_residual_update_are_caught():
    """The two biased variants the shared note measured: each fails at node level."""
    target, draft = node_laws()
    gen = torch.Generator().manual_seed(8)
    draws = draw(draft, 2, False, gen)
    rows = (DRAWS, NODE_V)
    q, p = draft.expand(rows), target.expand(rows)
    same = draws[:, 0] == draws[:, 1]  # duplicates merged into one child: verify it once
    _, merged_pair = verify_node(draws, q, p, gen)
    _, merged_one = verify_node(draws[:, :1], q, p, gen)
    merged = torch.where(same, merged_one, merged_pair)
    assert chi2_pvalue(output_counts(merged), target.numpy()) < 1e-6
    # No residual update between children: each draw tested against the original P.
    u = torch.rand(DRAWS, 2, generator=gen, dtype=torch.float64)
    passed = u * q.gather(-1, draws) < p.gather(-1, draws)  # (DRAWS, 2)
    first = torch.where(passed[:, 0], 0, torch.where(passed[:, 1], 1, -1))
    fallback = torch.multinomial(residual(target, draft).float(), DRAWS, True, generator=gen)
    chosen = draws.gather(-1, first.clamp(min=0)[:, None])[:, 0]
    naive = torch.where(first >= 0, chosen, fallback)
    assert chi2_pvalue(output_counts(naive), target.numpy()) < 1e-6


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("qwen2", vocab=V, seed=1, std=0.2)
    return target, perturbed_copy(target, noise=0.2, seed=2)


def test_tree_scoring_matches_each_path(pair):
    """One call with the tree mask and positions gives every node its path's logits."""
    target, _ = pair
    tree = Tree(tokens=[2])
    for node, token in [(0, 1), (0, 3), (1, 4), (2, 0), (2, 4)]:
        tree.add(node, token)
    lm = CachedLM(target, V)
    with torch.no_grad():
        lm.forward(PROMPT[:, :-1], keep=1)
        past = lm.length
        mask = tree.attention(past, torch.float32, torch.device("cpu"))
        positions = torch.tensor([tree.depth]) + past
        logits = lm.forward(torch.tensor([tree.tokens]), keep=len(tree.tokens),
                            position_ids=positions, attention_mask=mask)[0]  # fmt: skip
        for node in range(len(tree.tokens)):
            path, up = [], node
            while up >= 0:
                path.insert(0, tree.tokens[up])
                up = tree.parent[up]
            full = target(torch.cat([PROMPT[:, :-1], torch.tensor([path])], 1)).logits[0, -1]
            assert torch.allclose(logits[node], full, atol=1e-4), node


def path_tokens(tree: Tree, node: int) -> list[int]:
    """Tokens from the root down to `node`, the root's included."""
    path = []
    while node >= 0:
        path.insert(0, tree.tokens[node])
        node = tree.parent[node]
    return path


@pytest.mark.parametrize("drafts", ["iid", "without_replacement"])
def test_tree_drafting_on_one_cache_gives_each_node_its_path_law(pair, drafts):
    """Each depth's nodes drafted in one call on the shared cache get their own path's draft
    law; keeping a path leaves the cache of a plain prefill of that path (other branches gone)."""
    _, draft = pair
    drafter = TreeDrafter(draft, V, n_drafts=3, mode=drafts)
    params, gen = SamplingParams(1.0), torch.Generator().manual_seed(5)
    n = PROMPT.shape[1]
    tree = drafter.propose(PROMPT.clone(), n, 3, params, gen)
    assert len(tree.laws) > 3  # the tree branched
    with torch.no_grad():
        for node, law in tree.laws.items():
            ids = torch.cat([PROMPT[:, :-1], torch.tensor([path_tokens(tree, node)])], 1)
            full = torch.softmax(draft(ids).logits[0, -1, :V].double(), -1).to(law.dtype)
            assert torch.allclose(law, full, atol=1e-5), node
        deep = max(tree.laws, key=lambda node: tree.depth[node])  # a node at depth K - 1
        drafter.keep_path(tree, deep)
        ids = torch.cat([PROMPT[:, :-1], torch.tensor([path_tokens(tree, deep)])], 1)
        fresh = CachedLM(draft, V)
        fresh.forward(ids, keep=1)
    assert drafter.lm.length == ids.shape[1] == n + tree.depth[deep]
    for kept, ref in zip(cached_kv(drafter.lm), cached_kv(fresh), strict=True):
        assert torch.allclose(kept, ref, atol=1e-5)


def cached_kv(lm: CachedLM) -> list[torch.Tensor]:
    """Every layer's cached keys and values, valid positions only (lean or transformers' cache)."""
    if lm.lean is not None:
        parts = [*lm.cache.keys, *lm.cache.values]
        return [part[:, :, : lm.length] for part in parts]
    return [
        *(layer.keys for layer in lm.cache.layers),
        *(layer.values for layer in lm.cache.layers),
    ]


def test_scoring_profile_times_token_trees_beside_chains(pair):
    """profile.trees: n branches of depth K scored in one call, 1 + n*K nodes, after the chains;
    the cache is cropped back after each call."""
    target, _ = pair
    rows = profile_model(target, PROMPT, 3, 2, trees=[(1, 2), (2, 2)])
    shapes = {(r["shape"], r["q"]) for r in rows}
    assert shapes == {("chain", 1), ("chain", 2), ("chain", 3), ("tree n=1 K=2", 3),
                      ("tree n=2 K=2", 5)}  # fmt: skip
    assert all(r["ms"] > 0 for r in rows) and len(rows) == 3 * 2 + 2 * 2
    tree = branches(2, 2, V)
    assert tree.depth == [0, 1, 2, 1, 2] and tree.parent == [-1, 0, 1, 0, 3]


def test_token_tree_profile_needs_a_dynamic_cache(compose_cfg):
    with pytest.raises(ConfigError, match="dynamic cache"):
        to_config(compose_cfg(["backend=cpu_compiled", "profile.trees=[[2,4]]"]))


@pytest.mark.parametrize("n, drafts", [(3, "iid"), (2, "without_replacement")])
def test_multidraft_matches_target_joint(pair, n, drafts):
    target, draft = pair
    params = SamplingParams(1.0)
    gen = torch.Generator().manual_seed(99)
    counts = np.zeros(V**M)
    for _ in range(SAMPLES // 2):
        res = multidraft_generate(target, draft, PROMPT, k=2, n_drafts=n, drafts=drafts,
                                  max_new_tokens=M, sampling=params, generator=gen)  # fmt: skip
        counts[np.ravel_multi_index(res.tokens[:M], [V] * M)] += 1
    assert chi2_pvalue(counts, exact_joint(target, params)) > 0.01
    assert chi2_pvalue(counts, exact_joint(draft, params)) < 1e-4


@pytest.mark.parametrize("n, drafts", [(3, "without_replacement"), (2, "iid")])
def test_greedy_multidraft_is_the_greedy_target(pair, n, drafts):
    target, draft = pair
    greedy = SamplingParams(0.0)
    ref = speculative_generate(target, draft, PROMPT, k=1, max_new_tokens=12, sampling=greedy,
                               generator=None)  # fmt: skip
    res = multidraft_generate(target, draft, PROMPT, k=3, n_drafts=n, drafts=drafts,
                              max_new_tokens=12, sampling=greedy, generator=None)  # fmt: skip
    assert res.tokens == ref.tokens and res.target_calls < 12


def test_audit_tiny_passes_for_both_draft_modes(tmp_path):
    """One multirun audits both rules: no "biased" verdict."""
    out = run_cli("+experiment=audit_tiny", "-m", "decoder=multidraft", "decoder.n_drafts=3",
                  "decoder.drafts=iid,without_replacement", "audit.num_samples=100",
                  "bench.num_prompts=1", f"results_dir={tmp_path}", timeout=400)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    jobs = sorted(p.parent.name for p in (tmp_path / "audit_tiny").glob("*/summary.json"))
    assert len(jobs) == 2 and any("without_replacement" in j for j in jobs)
    verdicts = (tmp_path / "audit_tiny" / "audit_verdicts.csv").read_text()
    assert "multidraft" in verdicts and "biased" not in verdicts


def test_block_design_over_n_and_k(tmp_path):
    """decoder.n_sweep x decoder.k_sweep in one job: every (n, K) on each prompt's seed, all
    paired with the one baseline run; n = 1 is speculative sampling's own path."""
    import pandas as pd

    from specbench import stats

    sweep = ("decoder=multidraft", "decoder.k=2", "decoder.k_sweep=[1,2]", "decoder.n_sweep=[1,2]")
    out = run_cli("+experiment=smoke", *sweep, "bench.repeats=1", f"results_dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-3000:]
    records = pd.read_parquet(next(tmp_path.glob("smoke/*/records.parquet")))
    drafted = records[records.method == "multidraft"]
    assert sorted(set(zip(drafted.n_drafts, drafted.k, strict=True))) == [
        (1, 1),
        (1, 2),
        (2, 1),
        (2, 2),
    ]
    assert (records.method == "autoregressive").sum() == 2
    table = stats.speedups(records)
    assert len(table) == 4 and (table.speedup_n_prompts == 2).all()
