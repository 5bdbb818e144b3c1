"""Mean ROUGE-1/2/L over the xsum_rouge documents, with a bootstrap interval over documents.

python experiments/xsum_rouge/summarize.py [results]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from specbench.analysis.quality import ROUGE, rouge_means
from specbench.stats import bootstrap_ci


def main(results: Path) -> None:
    records = pd.read_parquet(results / "xsum_rouge" / "records.parquet")
    print(rouge_means(records, ["method"]).round(4).to_string(index=False))
    for name in ROUGE:
        low, high = bootstrap_ci(records[name].to_numpy(), np.mean)
        print(f"{name}: mean {records[name].mean():.4f}, 95% bootstrap CI [{low:.4f}, {high:.4f}]")
    print(records.stopped_by.value_counts().to_string())


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results"))
