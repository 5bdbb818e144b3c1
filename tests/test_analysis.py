"""Analysis on a synthetic records table whose every number is known in closed form."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from specbench import contrasts, stats
from specbench.analysis import __main__ as analysis_cli
from specbench.analysis import figures, tables, theory
from specbench.analysis.aggregate import normalize, summary
from specbench.analysis.report import report
from specbench.stats import bootstrap_ci

ROOT = Path(__file__).resolve().parent.parent
TASKS, SAMPLINGS, KS = ("xsum", "humaneval"), ("greedy", "t1"), (1, 2, 3, 4)
PROMPTS, REPEATS, N = 5, 2, 64
T_MS, C = 20.0, 0.1  # autoregressive ms per target call; draft call cost / target call cost
ALPHA = {"greedy": 0.8, "t1": 0.6}
ROUGE2_AR = [0.10, 0.20, 0.30, 0.40, 0.50]  # per prompt; SpS differs on prompt 0 only
ROUGE2_SPS = [0.15, 0.20, 0.30, 0.40, 0.50]
PASSED_AR, PASSED_SPS = [1, 0, 1, 0, 1], [1, 0, 1, 1, 1]


def scoring_cost(k: int) -> float:
    return 1.0 + 0.05 * k


def drift(prompt: int) -> float:
    """A per-prompt speed factor shared by both methods: ms/token varies, speedups do not."""
    return 1.0 + 0.01 * prompt


def ar_row(prompt: int) -> dict:
    calls, seconds = N, N * T_MS * drift(prompt) / 1e3
    return {"method": "autoregressive", "k": 0, "target_calls": calls, "draft_calls": 0,
            "accepted": 0, "proposed": 0, "alpha": np.nan, "draft_s": 0.0, "target_s": seconds,
            "overhead_s": 0.0, "wall_s": seconds}  # fmt: skip


def sps_row(prompt: int, k: int, alpha: float) -> dict:
    """Exactly Thm 3.8: N / E[tokens per loop] loops, each K draft calls and one scoring call."""
    calls = N / theory.expected_tokens_per_loop(alpha, k)
    ms = T_MS * drift(prompt)
    draft_s, target_s = calls * k * C * ms / 1e3, calls * scoring_cost(k) * ms / 1e3
    return {"method": "speculative", "target_calls": calls, "draft_calls": calls * k,
            "accepted": N - calls, "proposed": calls * k, "alpha": alpha, "draft_s": draft_s,
            "target_s": target_s, "overhead_s": 0.0, "wall_s": draft_s + target_s}  # fmt: skip


def quality(task: str, method: str, prompt: int) -> dict:
    if task == "xsum":
        return {"rouge2": (ROUGE2_SPS if method == "speculative" else ROUGE2_AR)[prompt]}
    return {"passed": (PASSED_SPS if method == "speculative" else PASSED_AR)[prompt]}


def synthetic_records(ks=KS, with_quality: bool = True) -> pd.DataFrame:
    rows = []
    for task, sampling, k, prompt, repeat in np.ndindex(2, 2, len(ks), PROMPTS, REPEATS):
        task, sampling, k = TASKS[task], SAMPLINGS[sampling], ks[k]
        shared = {"experiment": "synthetic", "job": f"{task}.{sampling}.k={k}", "task": task,
                  "sampling": sampling, "decoder": "speculative", "k": k, "prompt_id": f"p{prompt}",
                  "repeat": repeat, "seed": prompt * 10 + repeat, "new_tokens": N,
                  "max_new_tokens": N, "target": "tiny-target", "draft": "tiny-draft",
                  "device_name": "synthetic CPU", "dtype": "float32", "git_sha": "0123456789abcdef",
                  "stopped_by": "length", "completion": "text"}  # fmt: skip
        for row in (ar_row(prompt), sps_row(prompt, k, ALPHA[sampling])):
            if with_quality:
                row |= quality(task, row["method"], prompt)
            row["ms_per_token"] = 1e3 * row["wall_s"] / N
            row["tokens_per_call"] = N / row["target_calls"]
            rows.append(shared | row)
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def records() -> pd.DataFrame:
    return synthetic_records()


def true_speedup(sampling: str, k: int) -> float:
    return theory.expected_speedup(ALPHA[sampling], k, C, scoring_cost(k))


# --- theory ---------------------------------------------------------------------------------


def test_thm_3_8_hand_values():
    assert theory.expected_speedup(0.8, 8, 0.05) == pytest.approx(3.09, abs=0.01)
    assert theory.expected_speedup(0.0, 3, 0.2) == pytest.approx(1 / (3 * 0.2 + 1))
    assert theory.expected_speedup(1.0, 4, 0.1) == pytest.approx(5 / 1.4)
    assert theory.expected_speedup(1 - 1e-12, 4, 0.1) == pytest.approx(5 / 1.4)
    assert theory.expected_speedup(0.5, 2, 0.1, scoring_cost=2.0) == pytest.approx(1.75 / 2.2)
    assert theory.expected_tokens_per_loop(0.5, 2) == pytest.approx(1.75)
    np.testing.assert_allclose(theory.expected_tokens_per_loop(np.array([0.0, 1.0]), 3), [1, 4])


def test_optimal_k():
    assert theory.optimal_k(0.0, 0.1) == 1
    assert theory.optimal_k(0.99, 0.0) == 16
    speedups = [theory.expected_speedup(0.8, k, 0.05) for k in range(1, 17)]
    assert theory.optimal_k(0.8, 0.05) == 1 + int(np.argmax(speedups))
    assert theory.optimal_k(0.8, 0.05, {2: 1.0, 3: 5.0}) == 2
    with pytest.raises(ValueError):
        theory.optimal_k(0.8, 0.05, {32: 1.0})


def test_summary_recovers_alpha_c_and_scoring_cost(records):
    table = summary(records)
    mine = table[(table.task == "xsum") & (table.sampling == "t1") & (table.k > 0)]
    np.testing.assert_allclose(mine.alpha, 0.6)
    np.testing.assert_allclose(mine.c, C)
    np.testing.assert_allclose(mine.scoring_cost, [scoring_cost(k) for k in mine.k])


def test_predicted_vs_measured(records):
    frame = theory.predicted_vs_measured(records)
    assert len(frame) == len(TASKS) * len(SAMPLINGS) * len(KS)
    np.testing.assert_allclose(frame.ratio, 1.0, rtol=1e-9)
    expected = [true_speedup(s, k) for s, k in zip(frame.sampling, frame.k, strict=True)]
    np.testing.assert_allclose(frame.predicted, expected)


# --- aggregate ------------------------------------------------------------------------------


def test_paired_runs(records):
    pairs = stats.paired_runs(normalize(records))
    assert len(pairs) == len(TASKS) * len(SAMPLINGS) * len(KS) * PROMPTS * REPEATS
    expected = [true_speedup(s, k) for s, k in zip(pairs.sampling, pairs.k, strict=True)]
    np.testing.assert_allclose(pairs.ratio, expected)
    assert set(pairs.columns) >= {"base_ms_per_token", "ms_per_token", "ratio", "task"}


def test_one_baseline_serves_a_k_sweep_and_cpu_kinds_never_pair(records):
    """A block design: the baseline timed once per run in its own job serves every K; rows
    of another CPU kind are never paired with it."""
    xsum = normalize(records[(records.task == "xsum") & (records.sampling == "greedy")])
    base = xsum[(xsum.method == "autoregressive") & (xsum.k == 0)].drop_duplicates(stats.RUN)
    block = pd.concat([base.assign(job="baseline"), xsum[xsum.method == "speculative"]])
    pairs = stats.paired_runs(block)
    assert len(pairs) == len(KS) * PROMPTS * REPEATS
    np.testing.assert_allclose(pairs.ratio, [true_speedup("greedy", k) for k in pairs.k])
    other = block.assign(cpu_kind=np.where(block.method == "speculative", "avx2", "amx"))
    assert stats.paired_runs(other).empty


def test_speedup_over_the_fastest_baseline_of_any_backend(records):
    """Two backends: each method row is compared with the faster of the two baselines of its
    run, so a slower backend's own baseline never flatters its speedup."""
    one = normalize(records[(records.task == "xsum") & (records.sampling == "greedy")])
    one = one[one.k.isin([0, 4])]
    slow = one.assign(backend="eager", job=one.job + ".eager")
    slow.loc[slow.method == "autoregressive", "ms_per_token"] *= 2.0  # a slow eager baseline
    both = pd.concat([one.assign(backend="compiled"), slow], ignore_index=True)
    own = stats.speedups(both).set_index("backend")
    fair = stats.speedups(both, across=("backend",)).set_index("backend")
    assert fair.loc["eager", "speedup"] == pytest.approx(true_speedup("greedy", 4))
    assert fair.loc["compiled", "speedup"] == pytest.approx(true_speedup("greedy", 4))
    assert own.loc["eager", "speedup"] == pytest.approx(2 * true_speedup("greedy", 4))
    assert own.loc["compiled", "speedup"] == pytest.approx(true_speedup("greedy", 4))


def test_summary(records):
    table = summary(records).set_index(["task", "sampling", "method", "k"])
    row = table.loc[("humaneval", "greedy", "speculative", 3)]
    tokens = theory.expected_tokens_per_loop(0.8, 3)
    assert row.acceptance_per_loop == pytest.approx(tokens / 4)
    assert row.alpha == pytest.approx(0.8)
    assert row.loop_ms == pytest.approx(np.mean([T_MS * drift(p) for p in range(5)]) * 1.45)
    assert row.speedup == pytest.approx(true_speedup("greedy", 3))
    assert row.speedup_low == pytest.approx(row.speedup) == pytest.approx(row.speedup_high)
    assert row.speedup_interval == stats.RANGE and row.mean_accepted_length == pytest.approx(tokens)
    ar = table.loc[("humaneval", "greedy", "autoregressive", 0)]
    assert ar.time_s == pytest.approx(np.mean([N * T_MS * drift(p) / 1e3 for p in range(5)]))
    assert row.n_prompts == PROMPTS and row.n_runs == PROMPTS * REPEATS


def test_bootstrap_ci_basics():
    assert bootstrap_ci([2.0] * 10) == (2.0, 2.0)
    low, high = bootstrap_ci([1.0, 2.0, 3.0, np.nan], np.mean, groups=["a", "b", "c", "d"])
    assert 1.0 <= low <= 2.0 <= high <= 3.0
    low, high = bootstrap_ci([1.0, 1.0, 5.0], np.mean, groups=["a", "a", "b"])  # unbalanced
    assert 1.0 <= low <= high <= 5.0
    assert np.isnan(bootstrap_ci([])[0])


def test_bootstrap_ci_covers_the_true_speedup():
    """Lognormal noise around a true paired speedup of 2: the 95% CI of the median covers 2."""
    prompts, repeats, covered = 20, 2, 0
    groups = np.repeat(np.arange(prompts), repeats)
    for seed in range(100):
        rng = np.random.default_rng(seed)
        prompt_effect = np.repeat(rng.normal(0, 0.1, prompts), repeats)
        ar_ms = 30 * np.exp(prompt_effect + rng.normal(0, 0.05, prompts * repeats))
        sps_ms = 15 * np.exp(prompt_effect + rng.normal(0, 0.05, prompts * repeats))
        low, high = bootstrap_ci(ar_ms / sps_ms, np.median, n_boot=1000, seed=seed, groups=groups)
        covered += low <= 2.0 <= high
    assert covered >= 88


# --- tables ---------------------------------------------------------------------------------


def test_table1_values(records):
    table = tables.table1(records)
    assert len(table) == len(TASKS) * len(SAMPLINGS) * (1 + len(KS))
    key = ["method", "task", "sampling", "k"]
    sps = table[table.method == "speculative"].set_index(key)
    ar = table[table.method == "autoregressive"].set_index(["task", "sampling"])
    xsum = sps.loc[("speculative", "xsum", "greedy", 2)]
    assert xsum.metric == "ROUGE-2" and xsum.quality == pytest.approx(np.mean(ROUGE2_SPS))
    assert xsum.quality_low <= xsum.quality <= xsum.quality_high
    assert xsum.quality_diff == pytest.approx(0.01)
    assert xsum.test == tables.WILCOXON and xsum.p_value == pytest.approx(1.0)
    assert xsum.speedup == pytest.approx(true_speedup("greedy", 2))
    per_token = (2 * C + scoring_cost(2)) / theory.expected_tokens_per_loop(0.8, 2)
    ms = [per_token * T_MS * drift(p) for p in range(PROMPTS)]
    assert xsum.ms_per_token == pytest.approx(np.median(ms))
    code = sps.loc[("speculative", "humaneval", "t1", 4)]
    assert code.metric == "pass@1" and code.quality == pytest.approx(0.8)
    assert code.quality_diff == pytest.approx(0.2)
    assert code.test == tables.SIGN and code.p_value == pytest.approx(1.0)  # 1 discordant prompt
    assert ar.loc[("humaneval", "t1")].quality == pytest.approx(0.6)
    assert ar.loc[("xsum", "t1")].ms_per_token == pytest.approx(T_MS * drift(2))
    assert ar.k.isna().all() and np.isnan(ar.speedup).all()


def test_table1_keeps_each_backends_baseline_apart(records):
    """A run with a kernel and an eager baseline: one autoregressive row per backend, each with
    its own median ms per token, not the two pooled."""
    one = normalize(records[(records.task == "xsum") & (records.sampling == "greedy")])
    eager = one[one.method == "autoregressive"].assign(backend="eager", job="eager")
    eager["ms_per_token"] *= 2.0
    both = pd.concat([one.assign(backend="kernel"), eager], ignore_index=True)
    table = tables.table1(both)
    ar = table[table.method == "autoregressive"].set_index("backend")
    assert sorted(ar.index) == ["eager", "kernel"]
    assert ar.loc["eager", "ms_per_token"] == pytest.approx(2 * ar.loc["kernel", "ms_per_token"])
    assert (table[table.method == "speculative"].backend == "kernel").all()
    assert set(tables.format_table1(table).Backend) == {"eager", "kernel"}


def test_paired_test_detects_a_difference():
    diffs = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(12)], "diff_": [1.0] * 12})
    name, p = tables.paired_test(diffs, "passed")
    assert name == tables.SIGN and p == pytest.approx(2 * 0.5**12)
    diffs["diff_"] = np.linspace(0.01, 0.12, 12)
    name, p = tables.paired_test(diffs, "rouge2")
    assert name == tables.WILCOXON and p < 0.001


def test_to_markdown(records):
    frame = pd.DataFrame({"name": ["a|b", None], "x": [1.23456, np.nan], "n": [1, 2]})
    text = tables.to_markdown(frame, floatfmt=".3g")
    assert text.splitlines() == [
        "| name | x | n |",
        "| --- | ---: | ---: |",
        "| a\\|b | 1.23 | 1 |",
        "|  |  | 2 |",
    ]
    display = tables.format_table1(tables.table1(records))
    lines = tables.to_markdown(display).splitlines()
    assert len(lines) == 2 + len(display) and all(line.startswith("| ") for line in lines)
    assert "speculative (K=2)" in display.Method.values
    assert "autoregressive" in display.Method.values


# --- figures and report ---------------------------------------------------------------------

FIGURE_FUNCTIONS = [
    figures.time_vs_k_figure,
    figures.acceptance_figure,
    figures.loop_latency_figure,
    figures.speedup_figure,
]


@pytest.mark.parametrize("make", FIGURE_FUNCTIONS, ids=lambda f: f.__name__)
def test_figures(records, make):
    fig = make(records)
    assert isinstance(fig, Figure)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == len(TASKS) * len(SAMPLINGS)
    titles = {f"{t} | {s} | CPU unrecorded" for t in TASKS for s in SAMPLINGS}
    assert {ax.get_title() for ax in axes} == titles
    for ax in axes:
        assert ax.get_xlabel().startswith("K") and ax.get_ylabel()
        assert ax.get_legend() is not None
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "tiny-target" in texts and "tiny-draft" in texts and "float32" in texts
    assert fig._suptitle is not None and fig._suptitle.get_text()


def test_speedup_figure_draws_the_theory(records):
    ax = figures.speedup_figure(records).axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert any("Thm 3.8" in label for label in labels)


def scoring_profile() -> pd.DataFrame:
    rows = [{"model": m, "q": q, "repeat": r, "ms": base * (1 + 0.02 * (q - 1)) + 0.01 * r}
            for m, base in (("target", 10.0), ("draft", 2.0)) for q in range(1, 17)
            for r in range(3)]  # fmt: skip
    return pd.DataFrame(rows)


def test_scoring_profile_figure():
    fig = figures.scoring_profile_figure(scoring_profile(), "target X / draft Y | cpu | fp32")
    (ax,) = fig.axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert "free parallel scoring (y = 1)" in labels
    assert any(label.startswith("target: median") for label in labels)
    assert any(label.startswith("draft: median") for label in labels)
    assert ax.get_xlabel().startswith("q") and "relative to q = 1" in ax.get_ylabel()


def write_experiment(tmp_path: Path, frame: pd.DataFrame, profile: bool = False) -> Path:
    out = tmp_path / "synthetic"
    out.mkdir()
    frame.to_parquet(out / "records.parquet", index=False)
    if profile:
        scoring_profile().to_parquet(out / "scoring_profile.parquet", index=False)
    return out


def test_report_writes_everything(tmp_path, records):
    out = write_experiment(tmp_path, records, profile=True)
    written = report(out)
    names = {p.relative_to(out).as_posix() for p in written}
    stems = ["time_vs_k", "acceptance_vs_k", "loop_latency_vs_k", "speedup_vs_k", "scoring_profile"]
    figs = {f"figures/{s}.{ext}" for s in stems for ext in ("png", "pdf")}
    tables = {"table1.csv", "table1.md", "summary.csv", "theory.csv", "time_split.csv"}
    assert names == tables | {"best_k.csv"} | figs
    assert all(p.is_file() and p.stat().st_size > 0 for p in written)
    rows = len(TASKS) * len(SAMPLINGS) * (1 + len(KS))  # the baseline and each K
    assert pd.read_csv(out / "summary.csv").shape[0] == rows
    assert pd.read_csv(out / "theory.csv").ratio.sub(1).abs().max() < 1e-9
    assert (out / "table1.md").read_text().startswith("| Method |")
    assert not list(out.rglob("*.tmp"))


def test_report_skips_what_does_not_apply(tmp_path):
    one_k = synthetic_records(ks=(4,), with_quality=False)
    out = write_experiment(tmp_path, one_k)
    names = {p.name for p in report(out)}
    assert names == {"table1.csv", "table1.md", "summary.csv", "theory.csv", "time_split.csv"}
    assert pd.read_csv(out / "table1.csv").quality.isna().all()


def test_report_profile_only(tmp_path):
    out = tmp_path / "scoring_profile"
    out.mkdir()
    profile = scoring_profile().assign(target="tiny-target", draft="tiny-draft", dtype="float32")
    profile.to_parquet(out / "scoring_profile.parquet", index=False)
    names = {p.relative_to(out).as_posix() for p in report(out)}
    assert names == {"figures/scoring_profile.png", "figures/scoring_profile.pdf"}
    with pytest.raises(FileNotFoundError):
        report(tmp_path)


def test_cli_gather(tmp_path, records, capsys):
    job = tmp_path / "exp" / "job0"
    job.mkdir(parents=True)
    records.to_parquet(job / "records.parquet", index=False)
    (job / "summary.json").write_text("{}")
    assert analysis_cli.main(["gather", str(tmp_path / "exp")]) == 0
    assert f"records.parquet: {len(records)} rows" in capsys.readouterr().out
    assert len(pd.read_parquet(tmp_path / "exp" / "records.parquet")) == len(records)


def small_sweep(records: pd.DataFrame) -> pd.DataFrame:
    """One task and sampling mode at K = 1, 2: the least that every figure applies to."""
    return records[(records.task == "xsum") & (records.sampling == "greedy") & (records.k <= 2)]


def test_cli_figures(tmp_path, records, capsys):
    out = write_experiment(tmp_path, small_sweep(records))
    command = [sys.executable, "-m", "specbench.analysis", "figures", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "14 files written" in done.stdout
    assert (out / "figures" / "speedup_vs_k.pdf").is_file() and (out / "table1.md").is_file()
    assert analysis_cli.main(["figures", str(tmp_path / "missing")]) == 2
    assert "error" in capsys.readouterr().err


def execute_notebook(results: Path, experiment: str, monkeypatch) -> list:
    """Run notebooks/figures.ipynb on results/<experiment>; its outputs, errors asserted away."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(ROOT / "notebooks" / "figures.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code")
    monkeypatch.setenv("SPECBENCH_RESULTS", str(results))
    monkeypatch.setenv("SPECBENCH_EXPERIMENT", experiment)
    nbclient.NotebookClient(
        notebook, timeout=120, resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 4
    return outputs


def test_notebook_runs(tmp_path, records, monkeypatch):
    results = tmp_path / "results"
    results.mkdir()
    write_experiment(results, small_sweep(records))
    outputs = execute_notebook(results, "synthetic", monkeypatch)
    printed = json.dumps([o.get("text", "") for o in outputs])
    assert "No records" not in printed and "synthetic CPU" in printed


@pytest.mark.parametrize("experiment", ["paper_xsum_greedy", "paper_humaneval_bf16_draft"])
def test_notebook_runs_on_committed_results(experiment, monkeypatch):
    """The notebook walks through the reference results committed under results/."""
    if not (ROOT / "results" / experiment / "records.parquet").is_file():
        pytest.skip(f"no committed results/{experiment}")
    execute_notebook(ROOT / "results", experiment, monkeypatch)


def test_ratio_interval_names_its_method():
    few = stats.ratio_interval(np.log([1.1, 1.5, 1.3]))
    assert few["ratio_interval"] == stats.RANGE and few["n_prompts"] == 3
    assert (few["ratio_low"], few["ratio_median"], few["ratio_high"]) == pytest.approx(
        (1.1, 1.3, 1.5)
    )
    assert few["ratio"] == pytest.approx((1.1 * 1.5 * 1.3) ** (1 / 3))
    many = stats.ratio_interval(np.log(np.linspace(1.0, 2.0, 12)))
    assert many["ratio_interval"] == stats.HEADLINE
    assert 1.0 < many["ratio_low"] < many["ratio"] < many["ratio_high"] < 2.0


def test_geometric_mean_t_interval_covers_the_true_ratio():
    # 400 synthetic experiments of 20 prompts, log-normal speedups around a known geometric
    # mean 1.5, two noisy repeats per prompt averaged on the log scale: the t interval should
    # cover 1.5 about 95% of the time (>= 91% allows for 400 trials' noise).
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(400):
        prompt = rng.normal(0, 0.15, size=20)
        runs = pd.DataFrame({
            "prompt_id": np.repeat(np.arange(20), 2),
            "ratio": 1.5 * np.exp(np.repeat(prompt, 2) + rng.normal(0, 0.05, size=40)),
        })  # fmt: skip
        out = stats.ratio_interval(stats.per_prompt_log_ratio(runs))
        hits += out["ratio_low"] <= 1.5 <= out["ratio_high"]
    assert hits / 400 >= 0.91


def test_prompts_needed_for_a_half_width():
    # sd of log ratios 0.13 at a 2x speedup: +-0.05x needs (1.96 * 0.13 * 2 / 0.05)^2 ~ 104
    assert stats.prompts_needed(0.13, 0.05, 2.0) == 104
    assert stats.prompts_needed(0.13, 0.10, 2.0) == 26


def sweep_base(prompt: int, sampling: str) -> dict:
    """The setting and run columns every row of a synthetic sweep shares."""
    return {"experiment": "x", "job": "j", "task": "xsum", "sampling": sampling,
            "prompt_id": f"p{prompt}", "repeat": 0, "seed": prompt, "max_new_tokens": N,
            "new_tokens": N, "target": "t", "draft": "d", "dtype": "float32"}  # fmt: skip


def sweep_with_noise(prompts: int = 12) -> pd.DataFrame:
    """One setting, K = 1..4, per-prompt noise around Thm 3.8's speedups (K = 3 best here)."""
    rng = np.random.default_rng(0)
    rows = []
    for prompt in range(prompts):
        base = sweep_base(prompt, "greedy")
        rows.append(base | ar_row(prompt) | {"ms_per_token": T_MS})
        for k in KS:
            ms = T_MS / true_speedup("greedy", k) * float(np.exp(rng.normal(0, 0.01)))
            rows.append(base | sps_row(prompt, k, 0.8) | {"k": k, "ms_per_token": ms})
    return pd.DataFrame(rows)


def test_k_contrasts_tell_the_best_k_from_the_ends():
    frame = normalize(sweep_with_noise())
    best = max(KS, key=lambda k: true_speedup("greedy", k))
    table = contrasts.k_contrasts(frame)
    assert set(table.best_k) == {best} and set(table.other_k) == set(KS) - {best} & {1, 4}
    vs_one = table[table.other_k == 1].iloc[0]
    ratio = true_speedup("greedy", best) / true_speedup("greedy", 1)
    assert vs_one.distinguishable and abs(np.log(vs_one.ratio / ratio)) < 0.02
    few = contrasts.k_contrasts(normalize(sweep_with_noise(prompts=5)))
    assert not few.distinguishable.any()  # n < 10: a range, never a claim


def multidraft_sweep(prompts: int = 12) -> pd.DataFrame:
    """One setting: AR, then n in {1, 2} x K in {2, 4} (2 x 4 is 10% faster than 1 x 4, the
    single draft's best K), per-prompt noise of 1%."""
    rng = np.random.default_rng(1)
    speed = {(1, 2): 1.5, (1, 4): 1.6, (2, 2): 1.55, (2, 4): 1.76}
    rows = []
    for prompt in range(prompts):
        base = sweep_base(prompt, "t1")
        rows.append(base | ar_row(prompt) | {"ms_per_token": T_MS})
        for (n, k), s in speed.items():
            ms = T_MS / s * float(np.exp(rng.normal(0, 0.01)))
            rows.append(base | sps_row(prompt, k, 0.8) | {
                "method": "multidraft", "k": k, "n_drafts": n, "drafts_mode": "iid",
                "ms_per_token": ms})  # fmt: skip
    return pd.DataFrame(rows)


def test_draft_contrasts_pair_multi_draft_with_the_single_drafts_best_k():
    table = contrasts.draft_contrasts(normalize(multidraft_sweep()))
    assert set(zip(table.n_drafts, table.k, table.against, table.single_k, strict=True)) == {
        (2, 2, "best K", 4),
        (2, 2, "same K", 2),
        (2, 2, "same budget", 4),  # 2 x 2 nodes against one chain of 4 (no 1 x 8 swept)
        (2, 4, "best K", 4),
        (2, 4, "same K", 4),
    }
    row = table[(table.k == 4) & (table.against == "best K")].iloc[0]
    assert row.distinguishable and abs(row.ratio / 1.1 - 1) < 0.02
    slower = table[(table.k == 2) & (table.against == "best K")].iloc[0]
    assert slower.ratio < 1 and slower.n_prompts == 12
    assert contrasts.draft_contrasts(normalize(sweep_with_noise())).empty  # no multi-draft
    labels = set(tables.format_table1(tables.table1(multidraft_sweep())).Method)
    assert {"multidraft (K=4)", "multidraft (n=2, K=4)", "autoregressive"} <= labels


def test_rule_contrasts_pair_the_two_draft_rules_over_their_own_baselines():
    """Two jobs on the same prompts, one per rule, each with its own AR run (the second job's
    baseline 5% slower); the iid 2 x 4 is 1.76x and without replacement's 1.6x: 1.1x."""
    iid = multidraft_sweep()
    wor = multidraft_sweep().assign(job="j2", drafts_mode="without_replacement")
    wor.loc[wor.method == "autoregressive", "ms_per_token"] *= 1.05
    wor.loc[(wor.n_drafts == 2) & (wor.k == 4), "ms_per_token"] *= 1.1 * 1.05
    wor.loc[(wor.n_drafts == 2) & (wor.k == 2), "ms_per_token"] *= 1.05
    table = contrasts.rule_contrasts(normalize(pd.concat([iid, wor], ignore_index=True)))
    assert set(zip(table.n_drafts, table.k, table.drafts_mode, table.against, strict=True)) == {
        (2, 2, "iid", "without_replacement"),
        (2, 4, "iid", "without_replacement"),
    }
    row = table[table.k == 4].iloc[0]
    assert row.distinguishable and abs(row.ratio / 1.1 - 1) < 0.02 and row.n_prompts == 12
    assert abs(table[table.k == 2].iloc[0].ratio - 1) < 0.02
    assert contrasts.rule_contrasts(normalize(iid)).empty  # one rule: nothing to contrast


def test_speedup_figure_overlays_the_calibration_and_the_contrast():
    frame = sweep_with_noise()
    calibration = pd.DataFrame(
        {
            "task": "xsum",
            "sampling": "greedy",
            "k": list(KS),
            "predicted_speedup": [1.1, 1.2, 1.25, 1.2],
        }
    )
    ax = figures.speedup_figure(frame, calibration).axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert any("predicted before timing" in label for label in labels)
    assert any(label.startswith("best K") for label in labels)  # its own legend line


def test_draft_figures_from_iterations():
    from specbench.analysis.draft_figures import acceptance_position_figure, accepted_length_figure

    frame = sweep_with_noise(prompts=3)
    loops = pd.DataFrame([
        {"job": "j", "method": "speculative", "prompt_id": f"p{p}", "repeat": 0, "iteration": i,
         "k": k - (i == 5), "run_k": k, "accepted": (i + p) % k}
        for p in range(3) for k in KS for i in range(6)])  # fmt: skip
    fig = accepted_length_figure(frame, loops)  # the short last loop of each run left out
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == [f"K = {k} (15 loops)" for k in KS]
    fig = acceptance_position_figure(frame, loops)
    assert [line.get_label() for line in fig.axes[0].get_lines()] == [f"K = {k}" for k in KS]


def test_method_contrasts_set_two_drafting_methods_against_each_other():
    """Prompt lookup 1.2x faster than speculative sampling on the same prompts and baseline;
    a method swept over knobs (multi-draft) and the pairs told to skip are left out."""
    rng = np.random.default_rng(2)
    rows = []
    for prompt in range(12):
        base = sweep_base(prompt, "greedy") | {"k": 4}
        rows.append(base | ar_row(prompt) | {"k": 0, "ms_per_token": T_MS})
        spec = T_MS / 1.5 * float(np.exp(rng.normal(0, 0.01)))
        for method, ms in (("speculative", spec), ("prompt_lookup", spec / 1.2),
                           ("hf_prompt_lookup", spec / 1.1)):  # fmt: skip
            rows.append(base | sps_row(prompt, 4, 0.8) | {"method": method, "ms_per_token": ms})
        for n in (2, 4):
            rows.append(base | sps_row(prompt, 4, 0.8) | {
                "method": "multidraft", "n_drafts": n, "ms_per_token": spec})  # fmt: skip
    skip = {frozenset(("prompt_lookup", "hf_prompt_lookup"))}
    table = contrasts.method_contrasts(normalize(pd.DataFrame(rows)), skip=skip)
    pairs = set(zip(table.method, table.against, strict=True))
    assert pairs == {("hf_prompt_lookup", "speculative"), ("prompt_lookup", "speculative")}
    row = table[table.method == "prompt_lookup"].iloc[0]
    assert row.distinguishable and abs(row.ratio / 1.2 - 1) < 0.01 and row.n_prompts == 12


def test_detectable_difference_sizes_table1():
    """What n paired prompts can detect: ~940 problems for a 5-point pass@1 change (sd 0.55)."""
    assert abs(stats.detectable_difference(0.55, 940) - 0.05) < 0.001
    assert np.isnan(stats.detectable_difference(0.5, 1))
    shown = tables.format_table1(tables.table1(synthetic_records()))
    assert "Detectable quality difference (80% power)" in shown
    assert shown["Detectable quality difference (80% power)"].str.startswith("±").any()


def test_rows_timed_beside_other_work_are_flagged():
    frame = synthetic_records().assign(cpu_cores=2, load_1m=2.1)
    frame.loc[frame.index[:3], "load_1m"] = 3.4
    assert stats.busy_rows(frame).sum() == 3
    assert "3 of" in figures.caption(frame) and "beside other work" in figures.caption(frame)


def test_caption_says_when_runs_stop_at_the_task_stops():
    """A run to the task's stops states the cap and the mean length, not 'N = cap'."""
    frame = synthetic_records().assign(max_new_tokens=128, fixed_length=True, new_tokens=40)
    assert "N = 128 new tokens" in figures.caption(frame)
    stops = figures.caption(frame.assign(fixed_length=False))
    assert "up to 128 new tokens (task stops; mean 40)" in stops


def test_caption_names_every_commit_the_rows_come_from():
    """Rows pooled from several commits name each (8 hex digits), not the first one cut short."""
    frame = synthetic_records()
    frame.loc[frame.index[:3], "git_sha"] = "fedcba9876543210"
    assert "git 01234567, fedcba98 |" in figures.caption(frame) + " |"


def test_quality_brackets_are_ranges_under_ten_prompts():
    """Under 10 prompts a quality bracket is the range of per-prompt means and says so; from
    10 on it is the bootstrap over prompts."""
    few = stats.prompt_interval([0.1, 0.3, 0.2, 0.6, 0.5], ["a", "a", "b", "b", "c"])
    assert few == (0.2, 0.5, stats.RANGE)
    values = np.linspace(0, 1, 24)
    low, high, label = stats.prompt_interval(values, np.repeat(np.arange(12), 2))
    assert label == stats.BOOTSTRAP and low < values.mean() < high
