"""Exactness audit: its statistics, its config, and its power on tiny models.

The negative control: a speculative decoder whose verifier accepts every draft token emits the
draft's law, and the audit must call it "biased"; the exact decoder and the plain target pass.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import run_cli

from specbench import SamplingParams, speculative_generate
from specbench.audit.checks import conclude
from specbench.audit.core import AuditedDecoder, audited_decoder
from specbench.audit.job import audit_samples
from specbench.audit.stats import (
    bootstrap_tv,
    bucket_counts,
    bucket_probs,
    chi_square,
    detectable_shift,
    holm,
    merge_small,
    null_tv,
    top_tokens,
    total_variation,
    verdict,
)
from specbench.config import AuditConfig, ConfigError
from specbench.methods import METHODS, Models, check_job
from specbench.runner import run, to_config
from specbench.sampling import residual, sample
from specbench.tiny import byte_tokenizer, perturbed_copy, tiny_model

# --- statistics -------------------------------------------------------------------------------


def test_buckets_are_top_m_plus_rest():
    probs = np.array([0.1, 0.5, 0.0, 0.3, 0.1])
    top = top_tokens(probs, 3)
    assert top.tolist() == [1, 3, 0]
    assert bucket_probs(probs, top) == pytest.approx([0.5, 0.3, 0.1, 0.1])
    assert bucket_counts(np.array([1, 1, 3, 4, 2, 0]), top).tolist() == [2, 1, 1, 2]
    assert top_tokens(np.array([0.0, 1.0, 0.0]), 3).tolist() == [1]  # zero-probability ids cut


def test_null_tv_matches_the_normal_approximation_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    n = 400
    # E|p_hat - p| ~ sqrt(2 p (1-p) / (pi n)) per cell, for large n
    formula = 0.5 * np.sqrt(2 * probs * (1 - probs) / (np.pi * n)).sum()
    assert null_tv(probs, n, 4000, rng).mean() == pytest.approx(formula, rel=0.05)
    assert null_tv(probs, 4 * n, 2000, rng).mean() < 0.6 * formula


def test_bootstrap_interval_covers_the_observed_tv():
    rng = np.random.default_rng(1)
    probs = np.array([0.5, 0.3, 0.2])
    counts = np.array([70, 20, 10])
    lo, hi = bootstrap_tv(counts, probs, 1000, rng)
    assert lo <= total_variation(counts / 100, probs) <= hi


def test_chi_square_pools_small_cells_and_rejects_impossible_outcomes():
    obs, exp = merge_small(np.array([50, 30, 3, 2, 1]), np.array([50.0, 30, 2, 2, 1]), 5.0)
    assert obs.tolist() == [50, 30, 6] and exp.tolist() == [50, 30, 5]
    obs, exp = merge_small(np.array([60, 30, 2]), np.array([60.0, 30, 2]), 5.0)
    assert obs.tolist() == [60, 32]  # a pool still too small joins the smallest cell
    assert chi_square(np.array([10, 0, 1]), np.array([0.9, 0.1, 0.0])).pvalue == 0.0
    assert chi_square(np.array([500, 500]), np.array([0.5, 0.5])).pvalue == pytest.approx(1.0)
    assert chi_square(np.array([600, 400]), np.array([0.5, 0.5])).pvalue < 1e-8


def test_holm_and_verdict():
    adjusted = holm(np.array([0.04, 0.01, 0.03]))
    assert adjusted == pytest.approx([0.06, 0.03, 0.06])  # 3*0.01, max(2*0.03, .), 1*0.04 -> .06
    assert verdict(np.array([0.005, 0.5]), 0.01, 0.1) == "biased"
    assert verdict(np.array([0.05, 0.5]), 0.01, 0.1) == "suspicious"
    assert verdict(np.array([0.2, 0.5]), 0.01, 0.1) == "pass"


# --- config ------------------------------------------------------------------------------------

TINY = "+experiment=audit_tiny"


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["bench.kind=bogus"], "bench.kind must be one of"),
        (["bench.kind=audit", "decoder=replay", "decoder.trace=x"], "audits one of"),
        (["bench.kind=audit", "decoder.k=1"], "decoder.k >= 2"),
        (["audit.num_samples=5"], "num_samples"),
        (["audit.alpha=0"], "audit.alpha"),
        (["audit.alpha=0.2", "audit.suspicious_alpha=0.1"], "suspicious_alpha"),
        (["audit.bootstrap=10"], "bootstrap"),
    ],
)
def test_bad_audit_configs_fail_early(compose_cfg, no_load_pool, tmp_path, overrides, match):
    cfg = compose_cfg(overrides, base=TINY)
    with pytest.raises(ConfigError, match=match):
        run(cfg, no_load_pool, tmp_path, "job")


def test_audit_kind_and_control_decoder(compose_cfg):
    job = to_config(compose_cfg(["decoder=autoregressive", "decoder.k=1"], base=TINY))
    assert job.bench.kind == "audit"  # k is irrelevant without a draft
    check_job(job)
    assert to_config(compose_cfg()).bench.kind == "time"
    assert to_config(compose_cfg(["bench.kind=profile"])).bench.kind == "profile"


# --- power on tiny models ----------------------------------------------------------------------

PARAMS = SamplingParams(1.0)
AUDIT = AuditConfig(num_samples=300, bootstrap=300)


def accept_everything(draft_tokens, draft_probs, target_probs, generator):
    """A broken verifier: every draft token passes, so the output follows the draft's law."""
    batch, k = draft_tokens.shape
    bonus = residual(target_probs[:, k], torch.zeros_like(target_probs[:, k]))  # (B, V)
    return torch.full((batch,), k), sample(bonus, generator)


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("qwen2", seed=1, std=0.5)
    draft = perturbed_copy(target, noise=0.03, seed=0)  # first-token TV to the target ~0.2
    ids = byte_tokenizer()("def fibonacci(n):\n", return_tensors="pt").input_ids
    return target, draft, ids


def audit(decoder: AuditedDecoder, pair) -> tuple[str, pd.DataFrame, np.ndarray]:
    target, _, ids = pair
    vocab = target.config.vocab_size
    samples, tests, _ = audit_samples(decoder, target, ids, PARAMS, vocab, AUDIT, seed=7)
    table, outcome = conclude(pd.DataFrame(tests), AUDIT.alpha, AUDIT.suspicious_alpha)
    return outcome, table, samples.accepted_first


def registered(name: str, pair, **knobs) -> AuditedDecoder:
    """The registry's method `name` bound to the tiny pair as the audit binds it."""
    entry = METHODS[name]
    cfg = entry.config(**knobs)
    models = Models(pair[0], pair[1] if entry.needs_draft else None)
    return audited_decoder(entry, cfg, models, PARAMS, pair[0].config.vocab_size)


def test_accept_everything_is_flagged_biased(pair):
    target, draft, _ = pair
    biased = partial(
        speculative_generate, target, draft, k=2, sampling=PARAMS, verify_fn=accept_everything
    )

    def generate(ids, n, gen):
        return biased(ids, max_new_tokens=n, generator=gen)

    outcome, table, _ = audit(AuditedDecoder(generate, 3, False), pair)
    assert outcome == "biased"
    assert table.tv.max() > table.tv_null_q95.max()


def test_exact_speculative_passes_on_every_path(pair):
    outcome, table, accepted = audit(registered("speculative", pair, k=2), pair)
    assert outcome == "pass", table[["position", "given", "n", "tv", "pvalue", "pvalue_holm"]]
    assert (table.position == 2).any()  # the second token was tested too
    assert {0, 1, 2} <= set(accepted.tolist())  # residual after 0 or 1 accepted, bonus after 2


def test_plain_target_control_passes(pair):
    outcome, table, _ = audit(registered("autoregressive", pair), pair)
    assert outcome == "pass", table


# --- CLI ---------------------------------------------------------------------------------------


def test_cli_audit_writes_tables_verdicts_and_figure(tmp_path):
    overrides = ["audit.num_samples=30", "audit.bootstrap=100", "bench.num_prompts=1"]
    out = run_cli("+experiment=audit_tiny", *overrides, f"results_dir={tmp_path}", timeout=240)
    assert out.returncode == 0, out.stderr
    root = tmp_path / "audit_tiny"
    tests = pd.read_parquet(root / "audit.parquet")
    assert set(tests.method) == {"speculative", "hf_assisted", "autoregressive"}
    assert {"tv", "tv_lo", "tv_hi", "tv_null_mean", "pvalue", "pvalue_holm", "verdict"} <= set(
        tests.columns
    )
    assert (tests.tv_lo <= tests.tv_hi).all() and tests.pvalue.between(0, 1).all()
    samples = pd.read_parquet(root / "audit_samples.parquet")
    assert samples.groupby("method").size().tolist() == [30, 30, 30]
    verdicts = pd.read_csv(root / "audit_verdicts.csv")
    assert set(verdicts.verdict) <= {"pass", "suspicious", "biased"}
    assert (root / "figures" / "audit.png").is_file()
    assert "exactness audit" in out.stdout


def test_detectable_shift_shrinks_with_n():
    rng = np.random.default_rng(2)
    probs = np.array([0.5, 0.3, 0.2])
    small, large = detectable_shift(probs, 100, 0.01, rng), detectable_shift(probs, 1600, 0.01, rng)
    assert 0 < large < small < 0.5
    assert large == pytest.approx(small / 4, rel=0.5)  # ~ 1 / sqrt(n)
