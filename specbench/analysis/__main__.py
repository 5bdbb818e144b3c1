"""`python -m specbench.analysis gather|figures results/<experiment>`: tables, figures."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..records import gather


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The two subcommands, each taking an experiment directory."""
    parser = argparse.ArgumentParser(
        prog="python -m specbench.analysis",
        description="Work on the records of an experiment; loads no model.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    gather_cmd = commands.add_parser(
        "gather", help="concatenate complete jobs into records.parquet / records.csv"
    )
    gather_cmd.add_argument("experiment_dir", type=Path, help="e.g. results/smoke")
    figures_cmd = commands.add_parser(
        "figures", help="figures (PNG + PDF), table1, summary and theory CSVs from records.parquet"
    )
    figures_cmd.add_argument("experiment_dir", type=Path, help="e.g. results/paper_xsum_greedy")
    return parser.parse_args(argv)


def run_gather(experiment_dir: Path) -> int:
    for name, table in gather(experiment_dir).items():
        jobs = table.job.nunique() if "job" in table else "?"
        print(f"{name}: {len(table)} rows from {jobs} jobs -> {experiment_dir}")
    return 0


def run_figures(experiment_dir: Path) -> int:
    from .report import report  # matplotlib and scipy only when drawing

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    written = report(experiment_dir)
    for path in written:
        print(path)
    print(f"{len(written)} files written under {experiment_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    command = run_gather if args.command == "gather" else run_figures
    try:
        return command(args.experiment_dir)
    except FileNotFoundError as err:
        print(f"specbench.analysis: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
