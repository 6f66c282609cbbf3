"""The Markdown table and the PNG chart of one ``benchmarks.fair_share`` run."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from .harness import _paired_ci, _paired_ratio
from .report import head

#: The variants in the table's order (``benchmarks.fair_share.VARIANTS`` names them).
ORDER = ("plain", "lanes", "lock", "fair", "fair-nolock")


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile: a value that was measured, with ``share`` of them at or below."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(len(ordered) * share) - 1))]


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's figures over its runs (as ``compact`` keeps them)."""
    waits = [wait for run in runs for wait in run["b_waits"]]
    return {
        "b_wait_p50_s": percentile(waits, 0.50),
        "b_wait_p99_s": percentile(waits, 0.99),
        "b_wait_max_s": max(waits),
        "a_ahead_median": statistics.median(n for run in runs for n in run["a_ahead"]),
        "a_ahead_max": max(n for run in runs for n in run["a_ahead"]),
        "drain_rates": [run["drain_rate"] for run in runs],
        # Absent from results written before it was measured.
        "cpu_us": [run.get("cpu_us_per_call", math.nan) for run in runs],
        # Absent from results written before they were counted.
        "scripts_per_call": statistics.median(run.get("scripts_per_call", math.nan) for run in runs),
        "commands_per_call": statistics.median(run.get("commands_per_call", math.nan) for run in runs),
    }


#: What a variant is, in the table.
LABELS = {
    "plain": "plain Celery task",
    "lanes": "plain Celery task, the worker consuming the lanes too",
    "lock": "`SingletonTask` (the lock alone)",
    "fair": '`SingletonTask`, `fair_key=["tenant"]`',
    "fair-nolock": '`SingletonTask`, `fair_key=["tenant"]`, `lock=False`',
}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def markdown(figures: dict[str, Any], command: str) -> str:
    config = figures["config"]
    lines = head(
        "Fair share: tenant B behind tenant A's backlog",
        f"Produced by `{command}`. Tenant A's {config['n']:,} calls queued first, then a prefork "
        f"worker (concurrency {config['concurrency']}, prefetch multiplier {config['prefetch']}) "
        f"started; once it ran A's first calls, tenant B sent {config['b_calls']}. Bodies: "
        f"{config['body_ms']:g} ms of CPU; broker: {config['broker']}; fair_lanes {config.get('lanes', 16)}. "
        f"{config['repeats']} runs of "
        "each task, interleaved.",
        figures,
    )
    lines += [
        "",
        "B's wait: publish to start (the sender's and the worker's clocks, one host), over every "
        "run's calls. A ahead: how many of A's calls started while a call of B waited, its wait "
        "in calls (the median and the most of B's calls of every run). Drain rate: starts per "
        "second from B's first publish to the last start (the worker past its start-up), the "
        "median of the runs; vs plain: each run's rate over plain's in the same round, the "
        "median and a 95 % confidence interval. CPU per call: the worker's processes (main and "
        "pool, /proc) over the same stretch, pooled over the runs; by CPU: plain's CPU per call "
        "over the task's (1.00x: as cheap as plain), pooled, and the 95 % interval of the "
        "paired runs' ratios.",
        "",
        "| task | B's wait p50 | p99 | A ahead (median, most) | drain rate | vs plain "
        "| CPU per call | vs plain by CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    measured = [variant for variant in ORDER if variant in figures["runs"]]
    rates = {variant: summary(figures["runs"][variant])["drain_rates"] for variant in measured}
    # Plain's CPU over the variant's, so that, like the rate's, a ratio under 1 is a cost.
    cpus = {variant: [1 / us for us in summary(figures["runs"][variant])["cpu_us"]] for variant in measured}
    for variant in measured:
        row = summary(figures["runs"][variant])
        versus = _versus(rates, variant, "plain") if variant != "plain" else "-"
        by_cpu = _pooled(cpus, variant, "plain") if variant != "plain" else "-"
        lines.append(
            f"| {LABELS.get(variant, variant)} | {_ms(row['b_wait_p50_s'])} | {_ms(row['b_wait_p99_s'])} "
            f"| {row['a_ahead_median']:,.0f} ({row['a_ahead_max']:,}) "
            f"| {statistics.median(row['drain_rates']):,.0f}/s | {versus} "
            f"| {statistics.fmean(row['cpu_us']):,.0f} µs | {by_cpu} |"
        )
    counted = {variant: summary(figures["runs"][variant]) for variant in measured}
    if all(row["scripts_per_call"] == row["scripts_per_call"] for row in counted.values()):  # not NaN
        lines += [
            "",
            "The lock Redis's work per call, sent and run (medians of the runs, `INFO commandstats`): "
            + "; ".join(
                f"{LABELS.get(variant, variant)} {row['scripts_per_call']:.2f} script calls, "
                f"{row['commands_per_call']:.2f} commands (a script's own counted inside)"
                for variant, row in counted.items()
            )
            + ".",
        ]
    if "fair-nolock" in rates and "fair" in rates:
        lines += [
            "",
            "What the lock costs fair share: the fair task without its lock (`lock=False`) over the "
            f"fair task with it, paired per run: {_versus(rates, 'fair-nolock', 'fair')}; by CPU per "
            f"call: {_pooled(cpus, 'fair-nolock', 'fair')}.",
        ]
    if "fair" in rates and "lock" in rates:
        lines += [
            "",
            "What fair share adds to the lock: the fair task's drain rate over the lock's alone "
            f"(a `SingletonTask` without `fair_key`), paired per run: {_versus(rates, 'fair', 'lock')}; "
            f"by CPU per call: {_pooled(cpus, 'fair', 'lock')}.",
        ]
    lines.append("")
    return "\n".join(lines)


def _versus(rates: dict[str, list[float]], variant: str, base: str) -> str:
    """The median of ``variant``'s rate over ``base``'s, run by run, and its 95 % interval."""
    if base not in rates:
        return "-"
    low, high = _paired_ci(rates[variant], rates[base])
    spread = "" if low != low else f" ({low:.2f}-{high:.2f})"
    return f"{_paired_ratio(rates[variant], rates[base]):.3f}x{spread}"


def _pooled(speeds: dict[str, list[float]], variant: str, base: str) -> str:
    """``base``'s CPU per call over ``variant``'s, pooled over every run (``speeds``: calls per
    CPU second, run by run), and the 95 % interval of the paired runs' ratios."""
    if base not in speeds or any(value != value for value in speeds[variant] + speeds[base]):
        return "-"
    pooled = statistics.fmean(1 / value for value in speeds[base]) / statistics.fmean(
        1 / value for value in speeds[variant]
    )
    low, high = _paired_ci(speeds[variant], speeds[base])
    spread = "" if low != low else f" ({low:.2f}-{high:.2f})"
    return f"{pooled:.3f}x{spread}"


def chart(figures: dict[str, Any], path: Path) -> bool:
    """Each tenant's share of its calls started over time, in the first run of each variant;
    False when matplotlib is not installed (the table is still written)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    # The lock alone queues as plain Celery does: its chart would be plain's again.
    config = figures["config"]
    variants = [variant for variant in ("plain", "fair") if variant in figures["runs"]] or list(
        figures["runs"]
    )
    if not variants:
        return False
    fig, axes = plt.subplots(
        1, len(variants), figsize=(6.5 * len(variants), 4.2), sharex=True, sharey=True, squeeze=False
    )
    for ax, variant in zip(axes[0], variants):
        lines = figures["runs"][variant][0]["timeline"]
        for tenant, color in (("A", "#3070b0"), ("B", "#c04020")):
            times, shares = zip(*lines[tenant])
            calls = config["n"] if tenant == "A" else config["b_calls"]
            ax.step(times, shares, where="post", color=color, label=f"tenant {tenant} ({calls:,} calls)")
        ax.axvline(0, color="#888888", linewidth=1, linestyle="--")
        ax.annotate("B sends", (0, 50), rotation=90, va="center", ha="right", color="#666666", fontsize=8)
        ax.set_title(LABELS.get(variant, variant).replace("`", ""))
        ax.set_xlabel("seconds since B's first call was published")
        ax.legend(loc="lower right")
    axes[0][0].set_ylabel("share of the tenant's calls started (%)")
    fig.suptitle("Each tenant's starts over time (one run of each task)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
