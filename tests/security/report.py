"""Print the attack table for the README: `python tests/security/report.py`."""

from __future__ import annotations

import os
import platform
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from attacks import ATTACKS, TIMEOUT_S, canary_tree, listener, run_attack  # noqa: E402


def main() -> int:
    user = "root (program runs as nobody)" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    print(f"{platform.system()} {platform.release()}, {user}, time limit {TIMEOUT_S:g} s\n")
    print("| attack | outcome | time (s) | files outside | network |")
    print("|---|---|---|---|---|")
    bad = 0
    with canary_tree() as canary, listener() as server, warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for attack in ATTACKS:
            out = run_attack(attack, canary, server)
            bad += out.result.passed or out.canary_changed or out.connected
            files = "changed" if out.canary_changed else "unchanged"
            net = "connected" if out.connected else "none"
            print(f"| {attack.name} | {out.result.outcome} | {out.seconds:.2f} | {files} | {net} |")
    for note in sorted({str(x.message) for x in w}):
        print(f"\nnote: {note}")
    print(f"\n{len(ATTACKS) - bad} of {len(ATTACKS)} attacks contained")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
