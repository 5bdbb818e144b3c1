"""llama.cpp as a comparison engine: its autoregressive and speculative decoding through
llama-server, on the same GGUF files, prompts (as token ids), budget, sampling and seeds.

Sampling: temperature, top-k, top-p in specbench's order; every other llama.cpp sampler neutral.
In fixed-length runs llama.cpp is told to ignore EOS (it then never samples an EOS; specbench's
own methods generate past one instead); the audit sets decoder.ignore_eos=false. Rows carry
llama.cpp's own timings and draft counts (`engine_*`, accepted, proposed) beside specbench's
wall clock around each request.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError, DecoderConfig, ModelConfig, SpecBenchConfig
from ..decoding.common import GenerationResult, StopCondition
from ..llamacpp.build import require_binary
from ..llamacpp.server import LlamaServer
from ..packaged import gguf_file
from ..provenance import cpu_flags, cpu_kind
from ..sampling import SamplingParams
from .base import DecodeOptions, Generate, Models

# Samplers left neutral: only temperature, top-k and top-p shape the law, as in specbench.
NEUTRAL = {
    "min_p": 0.0, "typical_p": 1.0, "top_n_sigma": -1.0, "xtc_probability": 0.0,
    "repeat_penalty": 1.0, "repeat_last_n": 0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
    "dry_multiplier": 0.0, "mirostat": 0, "dynatemp_range": 0.0, "n_probs": 0,
}  # fmt: skip
SAMPLERS = ["temperature", "top_k", "top_p"]  # specbench's order (sampling.logits_to_probs)
TIMINGS = ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms")  # llama.cpp's own clocks
STOPPED_BY = {"eos": "eos", "word": "stop_string", "limit": "length"}


@dataclass
class LlamaCppConfig(DecoderConfig):
    """llama.cpp decoding the target alone."""

    name: str = "llamacpp"
    model_file: str = ""  # a GGUF path; "" = the target's packaged GGUF file
    threads: int = 0  # 0: backend.num_threads, else every core
    context: int = 4096  # llama-server -c
    # With no stop condition (fixed-length timing, the audit): true = never end at EOS (llama.cpp
    # then never samples one); false = an EOS ends the generation, the law intact (the audit).
    ignore_eos: bool = True
    # llama.cpp's weight repacking (interleaved / AMX layouts); null = on, except on CPUs with
    # AMX, where this build's AMX path for Q4_K weights segfaults on the first forward
    # (llama.cpp#20824; measured on a Xeon with AMX, 2026-12-06). false = --no-repack.
    repack: bool | None = None


@dataclass
class LlamaCppSpeculativeConfig(LlamaCppConfig):
    """llama.cpp's speculative decoding: K fixed (draft min = max = K, no early stop on draft
    confidence), a draft model or one of its model-free draft types."""

    name: str = "llamacpp_speculative"
    draft_file: str = ""  # a GGUF path; "" = the draft's packaged GGUF file
    draft_type: str = "draft-simple"  # --spec-type: draft-simple (a draft model), ngram-simple


def model_path(given: str, job: SpecBenchConfig | None, role: str) -> Path:
    """The GGUF a llama.cpp method reads: the one given, else the job's packaged `role` model's
    own file."""
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise ConfigError(f"llama.cpp {role} GGUF not found: {given}")
        return path
    model: ModelConfig = getattr(job, role)
    if model.loader != "packaged":
        raise ConfigError(
            f"llama.cpp reads GGUF files: {role} {model.name!r} is loader={model.loader}; use a "
            f"packaged model or set decoder.{'draft' if role == 'draft' else 'model'}_file"
        )
    return gguf_file(model.source)


def repack(given: bool | None) -> bool:
    """Whether llama.cpp repacks weights: as given, else on unless this CPU has AMX."""
    return given if given is not None else cpu_kind(cpu_flags(), "") != "amx"


def server_args(cfg: LlamaCppConfig, job: SpecBenchConfig | None) -> list[str]:
    """llama-server's model and decoding flags for one method at one K (the job's models are
    read only for files not given)."""
    args = ["-m", str(model_path(cfg.model_file, job, "target")), "-c", str(cfg.context),
            "--parallel", "1", "--no-webui", "--cache-ram", "0"]  # fmt: skip
    if not repack(cfg.repack):
        args.append("--no-repack")
    if isinstance(cfg, LlamaCppSpeculativeConfig):
        k = str(cfg.k)
        args += ["--spec-type", cfg.draft_type, "--spec-draft-n-max", k, "--spec-draft-n-min", k,
                 "--draft-p-min", "0"]  # fmt: skip
        if cfg.draft_type.startswith("draft"):
            args += ["-md", str(model_path(cfg.draft_file, job, "draft"))]
    return args


@dataclass(frozen=True)
class Served:
    """A running llama-server and the row columns that say what it serves."""

    server: LlamaServer
    columns: dict  # dtype / draft / draft_dtype as llama.cpp runs them (GGUF file types)


def gguf_type(path: Path) -> str:
    """The GGUF's weight type ('q4_k_m', 'f32', ...) from its general.file_type."""
    from gguf import GGUFReader, LlamaFileType

    field = GGUFReader(path).fields.get("general.file_type")
    if field is None:
        return "gguf"
    return LlamaFileType(int(field.parts[field.data[0]][0])).name.lower().removeprefix("mostly_")


def model_columns(args: list[str]) -> dict:
    """Rows' dtype, draft and draft_dtype for llama.cpp (its GGUF files, not the job's torch
    models) and whether it repacked the weights."""
    target = Path(args[args.index("-m") + 1])
    draft = Path(args[args.index("-md") + 1]) if "-md" in args else None
    columns = {"dtype": gguf_type(target), "draft": draft.stem if draft else ""}
    columns["engine_repack"] = "--no-repack" not in args
    return columns | {"draft_dtype": gguf_type(draft) if draft else ""}


@contextlib.contextmanager
def engine(cfg: LlamaCppConfig, job: SpecBenchConfig, log_path: Path) -> Iterator[Served]:
    """One llama-server for this method at this K, for the whole job."""
    threads = cfg.threads or job.backend.num_threads or os.cpu_count() or 1
    args = server_args(cfg, job)
    with LlamaServer(require_binary(), args, log_path, threads) as server:
        yield Served(server, model_columns(args))


def request(
    ids: list[int], n: int, sampling: SamplingParams, seed: int, stop, ignore_eos: bool = True
) -> dict:
    """/completion's body: the prompt as token ids, our budget, sampling and seed."""
    return NEUTRAL | {
        "prompt": ids, "n_predict": n, "seed": seed, "cache_prompt": False,
        "return_tokens": True, "stream": False, "samplers": SAMPLERS,
        "temperature": 0.0 if sampling.greedy else sampling.temperature,
        "top_k": sampling.top_k, "top_p": sampling.top_p,
        "ignore_eos": stop is None and ignore_eos, "stop": list(stop.stop_strings) if stop else [],
    }  # fmt: skip


def result(reply: dict, wall_s: float, k: int) -> GenerationResult:
    """A GenerationResult from llama-server's reply, its own counters in `engine` (drafts:
    drafting iterations, from its draft count at a fixed K)."""
    timings = reply.get("timings", {})
    tokens = list(reply.get("tokens", []))
    drafted, accepted = int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0))
    return GenerationResult(
        tokens=tokens,
        wall_s=wall_s,
        target_calls=max(len(tokens) - accepted, 1),  # one per emitted non-draft token
        stopped_by=STOPPED_BY.get(reply.get("stop_type", ""), "length"),
        engine={
            "accepted": accepted,
            "proposed": drafted,
            "drafts": -(-drafted // k) if k else 0,
            **{f"engine_{name}": timings.get(name) for name in TIMINGS},
        },
    )


def prompt_parity(server: LlamaServer, ids: list[int]) -> dict:
    """Whether llama.cpp's tokenizer gives back the prompt's ids (HF's) from its own text
    (/detokenize, then /tokenize with specials parsed): a mismatch is named, not hidden."""
    text = server.post("/detokenize", {"tokens": ids})["content"]
    theirs = server.post("/tokenize", {"content": text, "add_special": False})["tokens"]
    diff = next((i for i, (a, b) in enumerate(zip(ids, theirs, strict=False)) if a != b), None)
    same = theirs == ids
    first = None if same else (diff if diff is not None else min(len(ids), len(theirs)))
    return {"engine_prompt_ids_match": same, "engine_prompt_ids_first_diff": first}


def bind(cfg: LlamaCppConfig, models: Models, opt: DecodeOptions, served: Served) -> Generate:
    stop: StopCondition | None = opt.stop
    k = cfg.k if isinstance(cfg, LlamaCppSpeculativeConfig) else 0
    checked: dict[tuple[int, ...], dict] = {}  # prompt ids -> tokenizer parity (once each)

    def generate(ids, max_new_tokens, generator):
        prompt, server = ids[0].tolist(), served.server
        if tuple(prompt) not in checked:  # before the clock
            checked[tuple(prompt)] = prompt_parity(server, prompt)
        seed = int(generator.initial_seed()) % (2**32 - 1) if generator is not None else 0
        body = request(prompt, max_new_tokens, opt.sampling, seed, stop, cfg.ignore_eos)
        start = time.perf_counter()
        reply = server.post("/completion", body)
        res = result(reply, time.perf_counter() - start, k)
        res.engine.update(checked[tuple(prompt)] | served.columns)
        return res

    return generate
