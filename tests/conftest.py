"""Shared fixtures: Hydra compose against conf/, a CLI runner, a pool that must not load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from tokenizers import Tokenizer, models, pre_tokenizers

from specbench.methods.registry import register_configs

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"


def pytest_configure(config) -> None:
    """Under pytest-xdist, each worker (and the CLI runs it starts) gets its share of the cores
    as torch threads, so parallel workers do not oversubscribe the CPU."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        import torch

        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


@pytest.fixture
def compose_cfg():
    """compose_cfg([...overrides], base="+experiment=smoke") -> DictConfig, as the CLI builds it.

    The base defaults to the tiny-model smoke experiment so no test touches the offline pair.
    """
    register_configs()

    def _compose(overrides: list[str] | None = None, base: str | None = "+experiment=smoke"):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(
                config_name="config", overrides=[base or "", *(overrides or [])][not base :]
            )

    return _compose


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m specbench ARGS` in the repo root, offline."""
    env = os.environ | {"HF_HUB_OFFLINE": "1", "WANDB_SILENT": "true", "TQDM_DISABLE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "specbench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


class NoLoadPool:
    """A ModelPool stand-in that fails the test if a model is requested."""

    loads = 0

    def get(self, *args, **kwargs):
        raise AssertionError("a model was loaded although the config was invalid")


@pytest.fixture
def no_load_pool():
    return NoLoadPool()


@pytest.fixture(scope="session")
def saved_tiny_dirs(tmp_path_factory):
    """Tiny models saved with save_pretrained, loaded back through the hub path (offline).

    'same' has the target's byte tokenizer; 'other' has a tokenizer with a permuted vocabulary.
    """
    from transformers import PreTrainedTokenizerFast

    from specbench.tiny import byte_tokenizer, tiny_model

    root = tmp_path_factory.mktemp("saved")
    good = byte_tokenizer()
    vocab = good.get_vocab()
    permuted = {tok: len(vocab) - 1 - i for tok, i in vocab.items()}
    raw = Tokenizer(models.BPE(vocab=permuted, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    other = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<eos>", bos_token="<bos>")
    for name, tok in (("same", good), ("other", other)):
        tiny_model(seed=1).save_pretrained(root / name)
        tok.save_pretrained(root / name)
    return {"same": root / "same", "other": root / "other"}
