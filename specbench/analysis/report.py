"""Everything an experiment's records.parquet gives: figures (PNG + PDF), Table 1, CSV summaries.

Loads no model and writes every file atomically; figures that do not apply to the records
(no K sweep, no autoregressive pairs, no scoring profile) are skipped and logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from .. import contrasts, stats
from ..records import (
    AUDIT,
    AUDIT_TOKENS,
    CALIBRATION,
    ITERATIONS,
    PROFILE,
    RECORDS,
    atomic_write,
    write_table,
    write_text,
)
from .aggregate import drafting, normalize, summary
from .audit import audit_figure, verdict_table
from .draft_figures import acceptance_position_figure, accepted_length_figure
from .engine_figures import engines_in, throughput_figure
from .figures import (
    acceptance_figure,
    loop_latency_figure,
    pair_caption,
    scoring_profile_figure,
    speedup_figure,
    time_vs_k_figure,
)
from .perf import COMPARED, comparisons, time_split
from .tables import format_table1, table1, to_markdown
from .theory import predicted_vs_measured

log = logging.getLogger(__name__)
FIGURE_FORMATS = ("png", "pdf")
K_FIGURES: dict[str, Callable[[pd.DataFrame], Figure]] = {
    "time_vs_k": time_vs_k_figure,
    "acceptance_vs_k": acceptance_figure,
    "loop_latency_vs_k": loop_latency_figure,
}


def save_figure(fig: Figure, base: Path) -> list[Path]:
    """base.png and base.pdf, each written atomically."""
    paths = []
    for fmt in FIGURE_FORMATS:
        path = base.with_suffix(f".{fmt}")
        atomic_write(path, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, dpi=150))
        paths.append(path)
    return paths


def has_k_sweep(records: pd.DataFrame) -> bool:
    """Whether some drafting method on some (task, sampling) ran at two or more K."""
    rows = drafting(normalize(records))
    keys = ["task", "sampling", "method"]
    return bool(len(rows)) and rows.groupby(keys).k.nunique().max() >= 2


def write_tables(records: pd.DataFrame, out: Path) -> list[Path]:
    """table1.csv/.md, summary.csv, and where they apply vs_hf, best_k (a K sweep's best K
    against its smallest and largest, paired within prompt), multidraft_vs_single (n drafts
    against one), multidraft_rules (i.i.d. against without replacement), method_contrasts (two
    drafting methods against each other), time_split, theory and acceptance_by_position CSVs."""
    table = table1(records)
    write_table(out / "table1.csv", table)
    caption = f"\nTable 1 analogue. {pair_caption(records)}.\n"
    write_text(out / "table1.md", to_markdown(format_table1(table)) + caption)
    write_table(out / "summary.csv", summary(records))
    written = [out / "table1.csv", out / "table1.md", out / "summary.csv"]
    iterations = out / ITERATIONS
    by_position = (
        stats.acceptance_by_position(pd.read_parquet(iterations))
        if iterations.is_file()
        else pd.DataFrame()
    )
    optional = {
        "vs_hf.csv": comparisons(records),
        "best_k.csv": contrasts.k_contrasts(normalize(records)),
        "multidraft_vs_single.csv": contrasts.draft_contrasts(normalize(records)),
        "multidraft_rules.csv": contrasts.rule_contrasts(normalize(records)),
        "method_contrasts.csv": contrasts.method_contrasts(normalize(records), skip=COMPARED),
        "time_split.csv": time_split(records),
        "acceptance_by_position.csv": by_position,
    }
    for name, table in optional.items():
        if not table.empty:
            write_table(out / name, table)
            written.append(out / name)
    theory = predicted_vs_measured(records)
    if theory.empty:
        log.info("skipping theory.csv: no drafting method with a timed baseline")
    else:
        write_table(out / "theory.csv", theory)
        written.append(out / "theory.csv")
    return written


def write_engine_figure(records: pd.DataFrame, out: Path) -> list[Path]:
    """figures/engines (tokens/s by engine and method) when the records time two engines."""
    if len(engines_in(records)) < 2:
        return []
    return save_figure(throughput_figure(records), out / "engines")


def write_figures(records: pd.DataFrame, out: Path) -> list[Path]:
    """The vs-K figures when K was swept (out's parent holds the experiment's tables); the
    speedup figure needs AR/SpS pairs too, and overlays the calibration's prediction if any;
    the engines figure when two engines were timed."""
    if not has_k_sweep(records):
        log.info("skipping the figures vs K: no task and sampling mode has two or more K")
        return write_engine_figure(records, out)
    figures = dict(K_FIGURES)
    tables = {name: out.parent / name for name in (ITERATIONS, CALIBRATION)}
    if stats.paired_runs(normalize(records)).empty:
        log.info("skipping speedup_vs_k: no drafting run has its baseline timed")
    else:
        calibration = tables[CALIBRATION]
        before = pd.read_parquet(calibration) if calibration.is_file() else None
        figures["speedup_vs_k"] = lambda frame: speedup_figure(frame, before)
    if tables[ITERATIONS].is_file():
        loops = pd.read_parquet(tables[ITERATIONS])
        figures["accepted_length"] = lambda frame: accepted_length_figure(frame, loops)
        figures["acceptance_by_position"] = lambda frame: acceptance_position_figure(frame, loops)
    written = write_engine_figure(records, out)
    for name, make in figures.items():
        written += save_figure(make(records), out / name)
    return written


def write_profile_figure(records: pd.DataFrame | None, experiment_dir: Path) -> list[Path]:
    """The scoring-profile figure when the experiment has a scoring_profile.parquet."""
    path = experiment_dir / PROFILE
    if not path.is_file():
        log.info("skipping scoring_profile: no %s", path)
        return []
    profile = pd.read_parquet(path)
    own = any(c in profile for c in ("target", "draft", "device_name"))
    text = None if own or records is None else pair_caption(records)
    fig = scoring_profile_figure(profile, text)
    return save_figure(fig, experiment_dir / "figures" / "scoring_profile")


def write_audit(experiment_dir: Path) -> list[Path]:
    """audit_verdicts.{csv,md} and figures/audit when the experiment has an audit.parquet."""
    if not (experiment_dir / AUDIT).is_file():
        return []
    tests = pd.read_parquet(experiment_dir / AUDIT)
    tokens = pd.read_parquet(experiment_dir / AUDIT_TOKENS)
    verdicts = verdict_table(tests)
    write_table(experiment_dir / "audit_verdicts.csv", verdicts)
    write_text(experiment_dir / "audit_verdicts.md", to_markdown(verdicts) + "\n")
    written = [experiment_dir / "audit_verdicts.csv", experiment_dir / "audit_verdicts.md"]
    return written + save_figure(audit_figure(tests, tokens), experiment_dir / "figures" / "audit")


CALIBRATION_COLUMNS = [
    "cpu_kind", "backend", "task", "sampling", "k", "target_step_ms", "scoring_cost",
    "scoring_measured", "c", "alpha", "decode_speedup", "predicted_speedup",
]  # fmt: skip


def calibration_table(calibration: pd.DataFrame) -> pd.DataFrame:
    """The calibration's predictions per K, the columns a reader needs, rounded."""
    return calibration[stats.present(calibration, CALIBRATION_COLUMNS)].round(3)


def write_calibration(experiment_dir: Path) -> list[Path]:
    """calibration.{csv,md} when the experiment has a calibration.parquet."""
    if not (experiment_dir / CALIBRATION).is_file():
        return []
    table = calibration_table(pd.read_parquet(experiment_dir / CALIBRATION))
    write_table(experiment_dir / "calibration.csv", table)
    write_text(experiment_dir / "calibration.md", to_markdown(table) + "\n")
    return [experiment_dir / "calibration.csv", experiment_dir / "calibration.md"]


def report(experiment_dir: Path) -> list[Path]:
    """Write tables into experiment_dir and figures into experiment_dir/figures; list them.

    A scoring-profile or audit experiment may have no records.parquet: then only its own
    figures and tables are written.
    """
    experiment_dir = Path(experiment_dir)
    path = experiment_dir / RECORDS
    own = [experiment_dir / name for name in (PROFILE, AUDIT, CALIBRATION)]
    if not path.is_file() and not any(p.is_file() for p in own):
        names = ", ".join(p.name for p in [path, *own])
        raise FileNotFoundError(f"none of {names} in {experiment_dir}")
    if not path.is_file():
        log.info("no %s: the scoring profile, audit and calibration only", path)
        return (
            write_profile_figure(None, experiment_dir)
            + write_audit(experiment_dir)
            + write_calibration(experiment_dir)
        )
    records = pd.read_parquet(path)
    if records.empty:
        raise ValueError(f"{path} has no rows")
    written = write_tables(records, experiment_dir)
    written += write_figures(records, experiment_dir / "figures")
    written += write_profile_figure(records, experiment_dir)
    return written + write_audit(experiment_dir) + write_calibration(experiment_dir)
