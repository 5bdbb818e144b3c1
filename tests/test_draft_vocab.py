"""draft_vocab: a draft that proposes among a subset of ids keeps speculative sampling exact."""

import pytest
import torch
from stats_helpers import chi2_pvalue
from test_exactness import V, exact_joint
from test_quantize import greedy_parity, joint_counts

from specbench import SamplingParams
from specbench.config import BackendConfig, ConfigError, ModelConfig, TinySpec
from specbench.draft_vocab import ROWS_MULTIPLE, SubsetHead, subset_ids
from specbench.models import load_model
from specbench.quantize import Int4Linear, quantize_linears
from specbench.tiny import byte_tokenizer, perturbed_copy, tiny_model


def test_subset_ids_are_the_lowest_ids_plus_every_special_token():
    tok = byte_tokenizer()
    ids = subset_ids(tok, 100, width=300)
    assert len(ids) == 128 and len(ids) % ROWS_MULTIPLE == 0
    specials = set(tok.added_tokens_decoder)
    assert specials and specials <= set(ids.tolist())
    plain = [i for i in ids.tolist() if i not in specials]
    assert plain == list(range(len(plain)))  # the lowest ids fill the rest
    assert len(subset_ids(tok, 10_000, width=300)) == 300  # never wider than the head


def test_subset_head_matches_the_full_head_on_its_ids():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 40, bias=False)
    ids = torch.tensor([0, 3, 4, 17, 39])
    x = torch.randn(2, 3, 16)
    out = SubsetHead(head, ids)(x)
    assert out.shape == (2, 3, 40)
    assert torch.allclose(out[..., ids], head(x)[..., ids])
    rest = torch.ones(40, dtype=torch.bool).index_fill_(0, ids, False)
    assert torch.isneginf(out[..., rest]).all()


def narrowed(draft: torch.nn.Module, ids: list[int]) -> torch.nn.Module:
    draft.set_output_embeddings(SubsetHead(draft.get_output_embeddings(), torch.tensor(ids)))
    return draft


def test_narrow_draft_keeps_the_target_law():
    # The draft never proposes token 4 (nor 0): those come only from the residual or the bonus.
    target = tiny_model("qwen2", vocab=V, seed=1, std=0.2)
    draft = narrowed(perturbed_copy(target, noise=0.2, seed=2), [1, 2, 3])
    counts = joint_counts(target, draft, seed=7)
    assert chi2_pvalue(counts, exact_joint(target, SamplingParams(1.0))) > 0.01
    assert counts.reshape(V, V, V)[4].sum() > 0  # a token the draft cannot propose still occurs


def test_narrow_int4_draft_greedy_equals_target_greedy():
    target = tiny_model("qwen2", seed=4)
    draft = narrowed(perturbed_copy(target, noise=0.3, seed=5), list(range(0, 259, 2))[:128])
    quantize_linears(draft, "int4")
    assert isinstance(draft.get_output_embeddings().proj, Int4Linear)  # 128 rows: int4 takes it
    assert greedy_parity(target, draft)


def test_draft_vocab_is_a_model_config_knob():
    cfg = ModelConfig(name="d", loader="tiny", draft_vocab=100, quantize="int8")
    model = load_model(cfg, BackendConfig())
    head = model.get_output_embeddings()
    assert isinstance(head, SubsetHead) and head.out_features == 259 and len(head.ids) == 128
    with pytest.raises(ConfigError, match="draft_vocab must be >= 1"):
        ModelConfig(name="d", loader="tiny", tiny=TinySpec(), draft_vocab=0)
