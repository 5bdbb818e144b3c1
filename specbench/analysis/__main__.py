"""`python -m specbench.analysis gather results/<experiment>`: rebuild the experiment's tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..records import gather


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specbench.analysis",
        description="Work on the records of an experiment; loads no model.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    gather_cmd = commands.add_parser(
        "gather", help="concatenate complete jobs into records.parquet / records.csv"
    )
    gather_cmd.add_argument("experiment_dir", type=Path, help="e.g. results/smoke")
    args = parser.parse_args(argv)
    try:
        records = gather(args.experiment_dir)
    except FileNotFoundError as err:
        print(f"specbench.analysis: error: {err}", file=sys.stderr)
        return 2
    print(f"{len(records)} rows from {records.job.nunique()} jobs -> {args.experiment_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
