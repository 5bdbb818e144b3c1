"""benchmarks/gpu_targets.py keeps every line it measured: a toy CPU run, cut short, killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from specbench.decoding.common import RECOMPILE_LIMIT, compiled_call
from specbench.tiny import tiny_model

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_targets.py"
ENV = os.environ | {"HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
EAGER = ["--no-compile", "--ks", "4", "2"]  # compiling on CPU costs ~30 s a graph


def script(out: Path, *args: str) -> list[str]:
    return [sys.executable, str(SCRIPT), "--tiny", "--out", str(out), *args]


def run(out: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        script(out, *args), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def read_rows(out: Path) -> list[dict]:
    """Every line whole and valid JSON, each with the device it ran on."""
    text = (out / "gpu_targets.jsonl").read_text()
    assert text.endswith("\n")
    rows = [json.loads(line) for line in text.splitlines()]
    expected = "cuda" if torch.cuda.is_available() else "cpu"  # --tiny picks it by itself
    assert all(row["device_name"] and row["device"] == expected for row in rows)
    return rows


def test_toy_run_measures_every_eager_phase(tmp_path):
    run(tmp_path, *EAGER)
    rows = read_rows(tmp_path)
    assert {row["kind"] for row in rows} == {"measure"}
    draft = "llama_68m"
    assert [row["phase"] for row in rows] == [
        "bandwidth",
        "autoregressive_eager",
        f"speculative_eager_{draft}_k4",
        f"hf_assisted_eager_{draft}_k4",
        "profile_target",
        f"profile_draft_{draft}",
        f"speculative_eager_{draft}_k2",
        f"hf_assisted_eager_{draft}_k2",
    ]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["device_name"] == rows[0]["device_name"]
    assert summary[f"speculative_eager_{draft}_k4_vs_hf"] > 0
    assert summary["autoregressive_eager_over_floor"] > 0


def test_a_tiny_budget_stops_cleanly_and_keeps_its_lines(tmp_path):
    """Compiled phases on: the budget either skips them or the deadline stops one midway."""
    run(tmp_path, "--budget-s", "4")
    rows = read_rows(tmp_path)
    kinds = [row["kind"] for row in rows]
    assert set(kinds) <= {"measure", "skipped", "stopped"}
    assert "skipped" in kinds or kinds[-1] == "stopped"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["measured"] == kinds.count("measure")


def test_killed_halfway_leaves_the_lines_measured_so_far(tmp_path):
    lines = tmp_path / "gpu_targets.jsonl"
    proc = subprocess.Popen(
        script(tmp_path, *EAGER), cwd=ROOT, env=ENV,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        give_up = time.monotonic() + 180
        while not lines.exists() or lines.read_text().count("\n") < 3:
            assert proc.poll() is None, "it finished before it could be killed"
            assert time.monotonic() < give_up, "no lines after 180 s"
            time.sleep(0.02)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    rows = read_rows(tmp_path)
    assert 3 <= len(rows) < 8  # the full toy run writes 8
    summary = json.loads(run(tmp_path, "--summarize").stdout)
    assert summary["measured"] == len(rows)
    assert summary["autoregressive_eager_ms_per_token"] > 0


def test_compiled_call_is_one_per_model_and_lifts_dynamo_recompile_limit():
    """Target and draft share dynamo's cache (nn.Module.__call__): 8 graphs fail at K = 4."""
    # dynamo's own patch: pytest's monkeypatch undoes by delattr on torch's config module,
    # which hides the option from every later test.
    with torch._dynamo.config.patch(recompile_limit=8):
        model = tiny_model("llama", seed=1)
        step = compiled_call(model)
        assert torch._dynamo.config.recompile_limit == RECOMPILE_LIMIT
        assert compiled_call(model) is step
