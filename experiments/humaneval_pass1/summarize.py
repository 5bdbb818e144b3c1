"""pass@1 (Wilson 95%), greedy parity and stop reasons from the humaneval_pass1 records.

    python experiments/humaneval_pass1/summarize.py [results]

Reads results/humaneval_pass1 (and results/humaneval_pass1_parity, the autoregressive baseline
on the first problems, when present), writes
results/humaneval_pass1/pass_at_1.csv and prints the tables the README quotes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from specbench.analysis.quality import greedy_parity, pass_at_1
from specbench.records import write_table


def main(results: Path) -> None:
    records = pd.read_parquet(results / "humaneval_pass1" / "records.parquet")
    if "prompt_format" not in records:
        records["prompt_format"] = None
    # rows written before records carried prompt_format are the chat runs (the default then)
    records["prompt_format"] = records.prompt_format.fillna("chat")
    table = pass_at_1(records, ["prompt_format", "method"])
    write_table(results / "humaneval_pass1" / "pass_at_1.csv", table)
    print(table.round(3).to_string(index=False))
    print(records.groupby("prompt_format").stopped_by.value_counts().to_string())
    print(records.groupby("prompt_format").new_tokens.describe().to_string())
    parity_dir = results / "humaneval_pass1_parity"
    if (parity_dir / "records.parquet").is_file():
        # The autoregressive baseline on the first problems, against this run's speculative rows.
        baseline = pd.read_parquet(parity_dir / "records.parquet")
        chat = records[(records.prompt_format == "chat") & (records.method == "speculative")]
        pairs = pd.concat([baseline, chat[chat.prompt_id.isin(baseline.prompt_id)]])
        print(
            "parity (speculative vs autoregressive, greedy):", greedy_parity(pairs, "speculative")
        )
        print(pass_at_1(pairs, ["method"]).round(3).to_string(index=False))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results"))
