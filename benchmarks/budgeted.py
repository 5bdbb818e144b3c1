"""Measurements that survive being cut short, for the one-shot device scripts (gpu_targets.py).

Phases run in the order given, each only if its estimate fits in what is left of a wall budget,
and each becomes one JSON line, appended and printed the moment it exists. At the budget's end
(SIGALRM) or on SIGTERM the running phase is abandoned and a `stopped` line closes the run; a
phase that raises is kept as an `error` line and the next one runs. Every line carries the same
shared columns (run id, device, provenance), so a file read at any moment is a valid record.
"""

from __future__ import annotations

import json
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class Stop(BaseException):
    """The budget's end or SIGTERM: not an Exception, so no `except Exception` on the way
    (ours or a library's) catches it."""


def on_signal(signum: int, _frame: object) -> None:
    raise Stop(signal.Signals(signum).name)


@dataclass
class Log:
    """Appends rows to one JSON-lines file, one write per line, and echoes them to stdout."""

    path: Path
    shared: dict[str, Any]  # columns of every row: run id, device name, provenance
    start: float = field(default_factory=time.monotonic)

    def write(self, row: dict[str, Any]) -> None:
        """One whole line in the file (a kill never leaves half of one); stdout gets the row's
        own fields, without the shared columns and raw tables."""
        row |= {"elapsed_s": round(time.monotonic() - self.start, 2)}
        line = (json.dumps(self.shared | row) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        print(json.dumps({k: v for k, v in row.items() if k != "raw"}), flush=True)


@dataclass
class Phase:
    name: str
    fields: dict[str, Any]  # what its row says it measured (method, draft, k, compile)
    run: Callable[[], dict[str, Any]]  # the measurement: the row's remaining columns
    estimate_s: Callable[[], float]  # its expected cost, from what earlier phases measured
    after: Callable[[dict[str, Any], float], None] = lambda result, spent_s: None


def run_phases(phases: Iterable[Phase], log: Log, budget_s: float) -> int:
    """Runs each phase that fits before log.start + budget_s; returns how many raised."""
    deadline = log.start + budget_s
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGALRM, signal.SIGTERM)}
    signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 1e-3))
    failed, current = 0, ""
    try:
        for phase in phases:
            current = phase.name
            failed += not run_phase(phase, log, deadline)
    except Stop as stop:
        log.write({"kind": "stopped", "phase": current, "reason": str(stop)})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return failed


def run_phase(phase: Phase, log: Log, deadline: float) -> bool:
    """One phase as one row (measured, skipped or failed); False if it raised."""
    left, estimate = deadline - time.monotonic(), phase.estimate_s()
    row = {"phase": phase.name, **phase.fields}
    if estimate > left:
        log.write(row | {"kind": "skipped", "reason": f"needs ~{estimate:.0f} s, {left:.0f} left"})
        return True
    start = time.monotonic()
    try:
        result = phase.run()
    except Exception as err:  # kept as a row and on stderr; the later phases still run
        traceback.print_exc()
        log.write(row | {"kind": "error", "error": f"{type(err).__name__}: {err}"})
        return False
    spent = time.monotonic() - start
    log.write(row | {"kind": "measure", "phase_s": spent} | result)
    phase.after(result, spent)
    return True


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The latest run's rows (by run_id); a line without its newline is not read."""
    lines = path.read_text().split("\n")[:-1]  # the piece after the last newline is partial
    rows = [json.loads(line) for line in lines if line]
    last = rows[-1]["run_id"] if rows else None
    return [row for row in rows if row["run_id"] == last]
