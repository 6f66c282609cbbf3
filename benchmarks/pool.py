"""The throughput ratios of several runs of ``python -m benchmarks`` taken together.

    python -m benchmarks.pool first/results.json second/results.json [...]

One run's median ratio moves by a few points from run to run on a shared 2-core machine, more
than the difference between two variants close to each other: two runs are the least to rank
them by. This pools the paired repeats of every run given (each repeat's tasks/s over plain's
in that same repeat) and reports, per scenario and variant, the median ratio over all of them
and its 95 % interval, as one run's report does for its own repeats, and each run's median.

Then ``SingletonTask`` head to head with each other lock and the floor: each repeat's tasks/s
over the other's in that same repeat (every variant runs in every repeat), pooled the same
way. That answers "is it at least as fast as the better peer" directly; two ratios to plain
carry plain's noise twice, and their intervals overlap long before the two differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .harness import _paired_ci, _paired_ratio
from .report import LABELS

#: The throughput scenarios of a run, as its results.json names them, and their titles.
SCENARIOS = {"uncontended": "sent and waited for", "backlog": "backlog drained"}


#: The variant the head-to-head ratios are of.
OURS = "redislock"


def pooled(
    runs: list[dict[str, Any]], scenario: str, variant: str, against: str = "plain"
) -> dict[str, Any] | None:
    """The pooled median ratio of ``variant`` to ``against`` (plain, or another variant) in
    ``scenario``, its interval and each run's median; None when some run has no repeats of
    either (a peer not installed there)."""
    values: list[float] = []
    base: list[float] = []
    each = []
    for run in runs:
        rows = run.get(scenario, {})
        if variant not in rows or against not in rows:
            return None
        mine, theirs = rows[variant]["runs"], rows[against]["runs"]
        values += mine
        base += theirs
        each.append(_paired_ratio(mine, theirs))
    return {"ratio": _paired_ratio(values, base), "ratio_ci": _paired_ci(values, base), "runs": each}


def table(runs: list[dict[str, Any]]) -> str:
    lines = []
    for scenario, title in SCENARIOS.items():
        repeats = sum(len(run.get(scenario, {}).get("plain", {}).get("runs", [])) for run in runs)
        lines += [f"{title}: {repeats} repeats of {len(runs)} runs", ""]
        lines += ["| variant | pooled vs plain (95 % interval) | each run |", "|---|---:|---:|"]
        for variant, label in LABELS.items():
            if variant == "plain":
                continue
            row = pooled(runs, scenario, variant)
            if row is None:
                continue
            low, high = row["ratio_ci"]
            each = ", ".join(f"{ratio:.2f}x" for ratio in row["runs"])
            lines.append(f"| {label} | {row['ratio']:.3f}x ({low:.3f}-{high:.3f}) | {each} |")
        lines += ["", "Head to head: tasks/s of `SingletonTask` over the other's, same repeat", ""]
        lines += ["| against | pooled (95 % interval) | each run |", "|---|---:|---:|"]
        for variant, label in LABELS.items():
            row = None if variant in ("plain", OURS) else pooled(runs, scenario, OURS, variant)
            if row is None:
                continue
            low, high = row["ratio_ci"]
            each = ", ".join(f"{ratio:.3f}x" for ratio in row["runs"])
            lines.append(f"| {label} | {row['ratio']:.3f}x ({low:.3f}-{high:.3f}) | {each} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pool", description=__doc__)
    parser.add_argument("results", nargs="+", type=Path, help="results.json of each run")
    args = parser.parse_args(argv)
    runs = []
    for path in args.results:
        try:
            runs.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            print(f"python -m benchmarks.pool: cannot read {path}: {exc}", file=sys.stderr)
            return 2
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
