"""backend=cuda_multi placement: the target split by a device map, the draft whole on one device.

No GPU here: the device map spreads the target's modules over CPU entries, with accelerate's
hooks attached as they are across GPUs, and the loop must match the single-device run.
"""

from __future__ import annotations

import pytest
import torch
from accelerate import dispatch_model

from specbench.config import BackendConfig, ConfigError, ModelConfig
from specbench.decoding import autoregressive_generate, speculative_generate
from specbench.models import MODEL_LOADERS, ModelPool, draft_backend
from specbench.runner import to_config
from specbench.sampling import SamplingParams
from specbench.tiny import byte_tokenizer, perturbed_copy, tiny_model

GREEDY = SamplingParams(temperature=0.0)


def split_over_cpu(model: torch.nn.Module) -> torch.nn.Module:
    """Each top-level block its own device-map entry (all "cpu"), hooks forced on."""
    names = ["model.embed_tokens", "model.norm", "model.rotary_emb", "lm_head"]
    names += [f"model.layers.{i}" for i in range(model.config.num_hidden_layers)]
    return dispatch_model(model, device_map=dict.fromkeys(names, "cpu"), force_hooks=True)


def test_cuda_multi_places_the_target_only(compose_cfg):
    job = to_config(compose_cfg(["backend=cuda_multi"]))
    assert (job.backend.device, job.backend.device_map) == ("cuda", "auto")
    draft = draft_backend(job.backend)
    assert (draft.device, draft.device_map, draft.tp_plan) == ("cuda", None, None)
    tp = to_config(compose_cfg(["backend=cuda_multi", "backend.device_map=null",
                                "backend.tp_plan=auto"]))  # fmt: skip
    assert draft_backend(tp.backend).tp_plan is None
    with pytest.raises(ConfigError, match="not both"):
        BackendConfig(device_map="auto", tp_plan="auto")


def test_pool_maps_the_target_and_keeps_the_draft_whole(monkeypatch):
    seen: dict[str, BackendConfig] = {}

    def loader(cfg: ModelConfig, backend: BackendConfig) -> torch.nn.Module:
        seen[cfg.name] = backend
        return tiny_model("llama", seed=1)

    monkeypatch.setitem(MODEL_LOADERS, "hf", loader)
    target, draft = (ModelConfig(name=n, loader="hf", source="x") for n in ("target", "draft"))
    ModelPool().get(target, draft, BackendConfig(device_map="auto"))
    assert seen["target"].device_map == "auto" and seen["draft"].device_map is None
    ModelPool().get(target, draft, BackendConfig(tp_plan="auto"))
    assert seen["target"].tp_plan == "auto" and seen["draft"].tp_plan is None


@pytest.mark.parametrize("k", [1, 3])
def test_split_target_decodes_exactly_as_the_whole_one(k):
    target = tiny_model("llama", seed=1)
    draft = perturbed_copy(target, noise=0.2, seed=2)
    ids = byte_tokenizer()("def add(a, b):", return_tensors="pt").input_ids
    common = dict(max_new_tokens=24, sampling=GREEDY, generator=None)
    whole = autoregressive_generate(target, ids, **common).tokens
    split = split_over_cpu(tiny_model("llama", seed=1))
    assert hasattr(split.lm_head, "_hf_hook")  # accelerate moves tensors at each block
    assert speculative_generate(split, draft, ids, k=k, **common).tokens == whole
    assert autoregressive_generate(split, ids, **common).tokens == whole
