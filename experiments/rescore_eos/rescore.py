"""Re-score committed records with every EOS id honoured (issue 13).

    python experiments/rescore_eos/rescore.py results/paper_humaneval results/bench_vs_hf ...

Committed completions were decoded with special tokens dropped and cut only at the tokenizer's
EOS (<|im_end|>), so text generated after <|endoftext|> was glued on. The ids are not stored,
so a row is suspect when re-tokenizing its completion does not give back its new_tokens count
(a dropped special token, or a non-canonical tokenization). Each suspect row is regenerated with
its own method and seed (the runner's code, the job's resolved config.yaml, the model configs'
current EOS ids); the regenerated text must equal the stored completion, then it is cut at the
first EOS, re-scored and written back with the raw text. Rows that are not suspect hold no
special token, so the cut cannot change them. Each row's `eos_rescore` says which it was:
"clean" (not suspect), "rescored", or "unreproducible" (a sampled bf16 run made on another CPU
diverges when regenerated here: its score stands, and may count text past an EOS).
"""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

import pandas as pd
import torch
from omegaconf import OmegaConf

from specbench.config import SpecBenchConfig
from specbench.methods import method
from specbench.models import ModelPool
from specbench.prepare import generate, prepare
from specbench.records import RECORDS, gather, write_table
from specbench.runner import to_config
from specbench.timing import cut_at_eos

CONF = Path(__file__).resolve().parents[2] / "conf"


def job_config(job_dir: Path):
    """The job's resolved config, with its models' EOS ids as the model configs now state."""
    saved = OmegaConf.load(job_dir / "config.yaml")
    schema = method(saved.decoder.name).config
    # a job written before the method registry has the old flat decoder (max_q, trace, ...):
    # keep the keys its method's schema still has
    known = {f.name for f in fields(schema)}
    saved.decoder = {key: value for key, value in saved.decoder.items() if key in known}
    cfg = OmegaConf.merge(
        OmegaConf.structured(SpecBenchConfig), {"decoder": OmegaConf.structured(schema)}, saved
    )
    for role in ("target", "draft"):
        current = CONF / "model" / f"{cfg[role].name}.yaml"
        if current.is_file():
            cfg[role].eos_token_ids = OmegaConf.load(current).get("eos_token_ids", [])
    return to_config(cfg)


def suspects(records: pd.DataFrame, tokenizer) -> pd.Series:
    count = records.completion.map(lambda c: len(tokenizer(c, add_special_tokens=False).input_ids))
    return count != records.new_tokens


def rescore_job(job_dir: Path, pool: ModelPool) -> dict[str, int]:
    job = job_config(job_dir)
    prep = prepare(job)
    records = pd.read_parquet(job_dir / RECORDS)
    if "eos_rescore" not in records:  # a rerun keeps what an earlier pass re-scored
        records["eos_rescore"] = "clean"
    if "completion_raw" not in records:
        records["completion_raw"] = None
    mask = suspects(records, prep.tokenizer) & (records.eos_rescore != "rescored")
    stats = {"rows": len(records), "suspect": int(mask.sum()), "changed": 0, "unreproduced": 0}
    if mask.any():
        models = pool.get(job.target, job.draft if prep.uses_draft else None, job.backend)
        by_id = {p.id: (i, p) for i, p in enumerate(prep.prompts)}
        for index in records.index[mask]:
            stats = stats | _redo(records, index, prep, models, by_id, stats)
    write_table(job_dir / RECORDS, records)
    return stats


def _redo(records, index, prep, models, by_id, stats) -> dict[str, int]:
    row = records.loc[index]
    _, prompt = by_id[row.prompt_id]
    ids = prep.tokenizer(prompt.text, return_tensors="pt").input_ids.to(prep.job.backend.device)
    gen = torch.Generator(prep.job.backend.device).manual_seed(int(row.seed))
    res = generate(row.method, prep, models, ids, gen, int(row.new_tokens))
    if prep.tokenizer.decode(res.tokens, skip_special_tokens=True) != row.completion:
        print(f"  {row.job} {row.method} {row.prompt_id}: regeneration differs; row left as is")
        records.loc[index, "eos_rescore"] = "unreproducible"
        return {"unreproduced": stats["unreproduced"] + 1}
    completion = prep.tokenizer.decode(cut_at_eos(res.tokens, prep.eos_token_ids), True)
    scores = prep.score(prep.job.task, prompt, completion)
    changed = completion != row.completion
    records.loc[index, ["completion", "completion_raw", "eos_rescore"]] = [
        completion, prep.tokenizer.decode(res.tokens), "rescored",
    ]  # fmt: skip
    for name, value in scores.items():
        records.loc[index, name] = value
    print(f"  {row.job} {row.method} {row.prompt_id}: {dict(scores)} changed={changed}")
    return {"changed": stats["changed"] + int(changed)}


def main(experiment_dirs: list[str]) -> None:
    pool = ModelPool()
    for experiment in map(Path, experiment_dirs):
        for job_dir in sorted(p.parent for p in experiment.glob(f"*/{RECORDS}")):
            print(job_dir, rescore_job(job_dir, pool), flush=True)
        gather(experiment)


if __name__ == "__main__":
    main(sys.argv[1:])
