"""llama.cpp as a comparison engine: the request's law, the server's life (a stand-in server),
a job through the registry, and (when llama-server is built) the real binary on a tiny GGUF
against transformers on the same weights."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from conftest import run_cli

from specbench import SamplingParams
from specbench.config import ConfigError, ModelConfig
from specbench.decoding import autoregressive_generate
from specbench.llamacpp.build import find_binary, require_binary
from specbench.llamacpp.server import LlamaServer, ServerError
from specbench.llamacpp.tiny_gguf import write_tiny_gguf
from specbench.methods import llamacpp
from specbench.tiny import byte_tokenizer, tiny_model

FAKE = Path(__file__).with_name("fake_llama_server.py")
NUCLEUS = SamplingParams(temperature=0.8, top_p=0.95)


def test_request_sets_our_sampling_and_leaves_every_other_sampler_neutral():
    body = llamacpp.request([5, 6], 8, NUCLEUS, 7, None)
    assert body["samplers"] == ["temperature", "top_k", "top_p"]
    assert (body["temperature"], body["top_p"], body["top_k"], body["seed"]) == (0.8, 0.95, 0, 7)
    assert body["min_p"] == 0 and body["repeat_penalty"] == 1 and body["dry_multiplier"] == 0
    assert body["ignore_eos"] and not body["cache_prompt"] and body["prompt"] == [5, 6]
    assert llamacpp.request([5], 8, SamplingParams(0.0), 7, None)["temperature"] == 0.0


def test_speculative_server_fixes_k(tmp_path, compose_cfg):
    from specbench.runner import to_config

    files = [tmp_path / "t.gguf", tmp_path / "d.gguf"]
    for f in files:
        f.write_bytes(b"")
    job = to_config(compose_cfg(["decoder=llamacpp_speculative", "decoder.k=3"]))
    paths = {"model_file": str(files[0]), "draft_file": str(files[1])}
    cfg = llamacpp.LlamaCppSpeculativeConfig(k=3, **paths)
    args = llamacpp.server_args(cfg, job)
    expected = {"--spec-draft-n-max": "3", "--spec-draft-n-min": "3", "--draft-p-min": "0",
                "--spec-type": "draft-simple", "-md": str(files[1]),
                "-m": str(files[0])}  # fmt: skip
    for flag, value in expected.items():
        assert args[args.index(flag) + 1] == value


def test_weight_repacking_is_off_on_amx_cpus_unless_asked(monkeypatch, tmp_path):
    """llama.cpp's AMX path for Q4_K weights segfaults (llama.cpp#20824): --no-repack there."""
    model = tmp_path / "t.gguf"
    model.write_bytes(b"")
    for flags, expected in (({"avx2", "avx512f", "amx_bf16"}, False), ({"avx2"}, True)):
        monkeypatch.setattr(llamacpp, "cpu_flags", lambda flags=flags: flags)
        assert llamacpp.repack(None) is expected
        args = llamacpp.server_args(llamacpp.LlamaCppConfig(model_file=str(model)), job=None)
        assert ("--no-repack" not in args) is expected
    cfg = llamacpp.LlamaCppConfig(model_file=str(model), repack=True)
    assert "--no-repack" not in llamacpp.server_args(cfg, job=None)


def test_a_model_llama_cpp_cannot_read_is_a_config_error():
    with pytest.raises(ConfigError, match="GGUF"):
        job = SimpleNamespace(target=ModelConfig(name="x", loader="hf", source="gpt2"))
        llamacpp.model_path("", job, "target")


def test_missing_binary_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="python -m specbench.llamacpp.build"):
        require_binary()


def test_server_starts_answers_and_stops(tmp_path):
    log = tmp_path / "server.log"
    with LlamaServer(FAKE, ["-m", "x.gguf"], log, threads=1) as server:
        proc = server.proc
        reply = server.post("/completion", llamacpp.request([1, 2], 3, NUCLEUS, 1, None))
        assert reply["tokens"] == [1, 2, 1]
    assert proc.poll() is not None  # stopped on exit
    assert "fake llama-server" in log.read_text()


def test_a_dying_server_fails_in_one_line_naming_its_log(tmp_path):
    with pytest.raises(ServerError, match=r"exited \(code 3\).*failed to load model"):
        LlamaServer(FAKE, ["-m", "die.gguf"], tmp_path / "server.log", threads=1).__enter__()


def test_a_job_times_both_llama_cpp_methods_through_the_registry(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMA_SERVER", str(FAKE))
    model = write_tiny_gguf(tiny_model("qwen2"), byte_tokenizer(), tmp_path / "t.gguf")
    out = run_cli(
        "+experiment=smoke", "decoder=llamacpp_speculative", "decoder.k=2",
        f"decoder.model_file={model}", f"decoder.draft_file={model}", "bench.num_prompts=1",
        "bench.repeats=1", f"results_dir={tmp_path}", timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    records = pd.read_parquet(next(tmp_path.rglob("records.parquet")))
    spec = records[records.method == "llamacpp_speculative"].iloc[0]
    assert set(records.method) == {"llamacpp", "llamacpp_speculative"}
    assert spec.paired_with == "llamacpp" and spec.k == 2 and spec.proposed == 16
    assert spec.accepted == 15 and spec.engine_predicted_n == 16 and spec.engine_prompt_ids_match
    assert (spec["dtype"], spec["draft"], spec["draft_dtype"]) == ("all_f32", "t", "all_f32")
    plain = records[records.method == "llamacpp"].iloc[0]  # its own server: no draft model
    assert plain.proposed == 0 and plain["draft"] == "" and plain.k == 0
    assert len(list(tmp_path.rglob("*.engine.log"))) == 2


requires_server = pytest.mark.skipif(
    find_binary() is None, reason="llama-server not built (python -m specbench.llamacpp.build)"
)


@pytest.fixture(scope="module")
def tiny_served(tmp_path_factory):
    """A tiny Qwen2 model, its GGUF, and llama-server serving it as target and as draft."""
    model = tiny_model("qwen2", seed=1, std=0.2)
    path = write_tiny_gguf(model, byte_tokenizer(), tmp_path_factory.mktemp("gguf") / "t.gguf")
    cfg = llamacpp.LlamaCppSpeculativeConfig(k=3, model_file=str(path), draft_file=str(path))
    args = llamacpp.server_args(cfg, job=None)  # files given: the job's models are not read
    log = path.with_suffix(".log")
    with LlamaServer(require_binary(), args, log, threads=min(2, os.cpu_count() or 1)) as server:
        yield model, server


@requires_server
def test_real_server_greedy_is_transformers_greedy_on_the_same_weights(tiny_served):
    """llama.cpp's speculative decoding (the model as its own draft, K = 3), greedy, gives the
    tokens transformers' float32 greedy decoding gives from the same weights."""
    model, server = tiny_served
    prompt = [10, 20, 30, 40, 50]
    ids = torch.tensor([prompt])
    ours = autoregressive_generate(
        model, ids, max_new_tokens=24, sampling=SamplingParams(0.0), generator=None
    )
    ours = ours.tokens
    start = time.perf_counter()
    reply = server.post("/completion", llamacpp.request(prompt, 24, SamplingParams(0.0), 0, None))
    res = llamacpp.result(reply, time.perf_counter() - start, 3)
    assert res.tokens == ours
    assert res.engine["proposed"] > 0 and res.engine["accepted"] >= res.engine["proposed"] - 3
    assert llamacpp.prompt_parity(server, prompt)["engine_prompt_ids_match"]


def test_the_baseline_is_not_the_speculative_schema(compose_cfg):
    """llama.cpp's speculative schema extends its autoregressive one; the baseline timed beside
    it must still get the plain schema (no draft model, no K)."""
    from specbench.methods import method
    from specbench.runner import to_config

    job = to_config(compose_cfg(["decoder=llamacpp_speculative"]))
    baseline = method("llamacpp").config_from(job.decoder)
    assert type(baseline) is llamacpp.LlamaCppConfig
    assert not isinstance(baseline, llamacpp.LlamaCppSpeculativeConfig)
