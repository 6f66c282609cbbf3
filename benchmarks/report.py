"""The Markdown table and the PNG chart of one run's results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from celery_redislock.engine.scripts import RENEW_CHUNK

from .harness import _paired_ci, _paired_ratio

#: What a variant is, in the tables.
LABELS = {
    "plain": "plain Celery task",
    "redislock": "`SingletonTask` (this package)",
    "redislock-enqueue": '`SingletonTask`, `lock_on="enqueue"`',
    "redislock-fencing": "`SingletonTask`, `fencing=True`",
    "celery-singleton": "celery-singleton `Singleton`",
    "celery-once": "celery-once `QueueOnce`",
    "floor": "floor: `SET NX` + `DEL` on a raw socket (not a lock)",
}


def _fmt(value: float, digits: int = 2) -> str:
    return f"{value:,.{digits}f}"


def _maybe(value: float | None) -> str:
    """A figure a run before it was measured lacks: "-"."""
    return "-" if value is None else _fmt(value, 0)


def _breakdown(counts: dict[str, float]) -> str:
    return ", ".join(f"{name} {_fmt(n, 2).rstrip('0').rstrip('.')}" for name, n in counts.items()) or "-"


def _ratio(row: dict[str, Any]) -> str:
    """The median paired ratio, and its 95 % confidence interval when there is one."""
    low, high = row.get("ratio_ci") or (float("nan"), float("nan"))
    spread = "" if low != low else f" ({_fmt(low)}-{_fmt(high)})"  # NaN: fewer than 2 repeats
    return f"{_fmt(row['ratio'])}x{spread}"


#: The variants ``SingletonTask`` is set against head to head, in the tables' order.
RIVALS = ("celery-singleton", "celery-once", "floor")


def head_to_head(rows: dict[str, Any]) -> str:
    """``SingletonTask``'s tasks/s over each rival's in the same repeat (every variant runs in
    every repeat), the median and its interval: whether it is at least as fast as a peer,
    asked directly, not through two ratios to plain that each carry plain's noise."""
    ours = rows.get("redislock")
    parts = []
    for rival in RIVALS:
        if ours is not None and rival in rows:
            pair = {
                "ratio": _paired_ratio(ours["runs"], rows[rival]["runs"]),
                "ratio_ci": _paired_ci(ours["runs"], rows[rival]["runs"]),
            }
            parts.append(f"{LABELS[rival]} {_ratio(pair)}")
    if not parts:
        return ""
    return (
        "Head to head (tasks/s of `SingletonTask` over the other's, same repeat): " + "; ".join(parts) + "."
    )


def head(title: str, produced: str, results: dict[str, Any]) -> list[str]:
    """A report's first lines: its title, how it was produced, the machine (``results``'s
    ``machine``) and each variant that was not measured, with why (its ``unavailable``)."""
    lines = [
        f"# {title}",
        "",
        produced,
        "",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in results["machine"].items()),
        "",
    ]
    for variant, why in results["unavailable"].items():
        lines.append(f"- **{variant}** was not measured: {why}")
    return lines


def markdown(results: dict[str, Any], command: str) -> str:
    """The whole report: machine, the four tables, and what was not measured."""
    config, floor = results["config"], results["floor"]
    lines = head(
        "Benchmark results",
        f"Produced by `{command}`. Medians of {config['repeats']} repeats after a warm-up, "
        f"variants interleaved per repeat; worker: prefork, concurrency {config['concurrency']}.",
        results,
    )
    lines += [
        "",
        f"## Uncontended: {config['n']} trivial tasks with distinct arguments",
        "",
        "Round trips and commands are those the lock's Redis saw, per task (round trips from "
        "MONITOR: what clients sent; commands from `INFO commandstats`, which also counts what a "
        "Lua script runs).",
        "",
        "CPU: microseconds of CPU time per task used by the worker's pool processes (where a "
        "task runs and takes its lock), the sending process (`apply_async`, where the peers "
        "take theirs, and the wait for the results), the worker's parent (which receives the "
        "messages), the lock's Redis, and all processes: the whole call, sent and run, counted "
        "the same way for a lock taken at send and one taken at run (worker, both Redis servers, "
        "the sender); the mean over every repeat, less disturbed by other load on the machine "
        "than tasks/s. Server: the lock Redis's own "
        "time in the commands clients sent (SLOWLOG durations, a script's including its inner "
        "commands), per task.",
        "",
        "vs plain: the median over repeats of tasks/s divided by plain's tasks/s in the same "
        "repeat, and in brackets a 95 % confidence interval of that median (bootstrap over "
        "the repeats): a difference inside it is the machine's noise; by CPU: plain's CPU per "
        "task divided by the variant's (the throughput ratio a machine with no spare CPU would "
        "see).",
        "",
        "| variant | tasks/s | vs plain | vs plain, by CPU | CPU µs/task: pool children | sender "
        "| worker parent | lock Redis | all (the whole call) | lock Redis server µs/task "
        "| round trips/task | commands/task | round trips | in scripts |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for variant, row in results["uncontended"].items():
        trips = results["trips"].get(variant, {})
        cpu = row["cpu_us_per_task"]
        lines.append(
            f"| {LABELS.get(variant, variant)} | {_fmt(row['tasks_per_s'], 0)} | {_ratio(row)} "
            f"| {_fmt(row['cpu_ratio'])}x "
            f"| {_fmt(cpu['worker_children'], 0)} | {_fmt(cpu['driver'], 0)} | {_fmt(cpu['worker_parent'], 0)} "
            f"| {_fmt(cpu['lock_redis'], 0)} | {_fmt(cpu['all'], 0)} | {_fmt(row['server_us_per_task'], 1)} "
            f"| {_fmt(trips.get('round_trips_per_task', float('nan')))} "
            f"| {_fmt(row['commands_per_task'])} | {_breakdown(trips.get('round_trips', {}))} "
            f"| {_breakdown(trips.get('in_scripts', {}))} |"
        )
    versus = head_to_head(results["uncontended"])
    if versus:
        lines += ["", versus]
    backlog = results.get("backlog") or {}
    if backlog:
        lines += [
            "",
            f"## A backlog drained: {config['n']} tasks queued, then run by the worker alone",
            "",
            "The worker's own throughput: the calls are queued while the worker consumes "
            'nothing (a lock taken at send, the peers\' and `lock_on="enqueue"`, is taken '
            "then, untimed), then timed from the moment it consumes again until every result "
            "is stored, with the sender idle. Above, the sender shares the 2 cores with the "
            "worker, and a sender slowed by a lock in `apply_async` leaves the worker more of "
            "them; here only the worker and the two servers run. All: every process while the "
            "worker drains (what the by-CPU ratio divides); sending: every process while the "
            "calls were queued, a lock taken at send included; the whole call: both.",
            "",
            "| variant | tasks/s | vs plain | vs plain, by CPU | CPU µs/task: pool children "
            "| worker parent | lock Redis | all | sending | the whole call | lock Redis server µs/task |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for variant, row in backlog.items():
            cpu = row["cpu_us_per_task"]
            lines.append(
                f"| {LABELS.get(variant, variant)} | {_fmt(row['tasks_per_s'], 0)} | {_ratio(row)} "
                f"| {_fmt(row['cpu_ratio'])}x | {_fmt(cpu['worker_children'], 0)} "
                f"| {_fmt(cpu['worker_parent'], 0)} | {_fmt(cpu['lock_redis'], 0)} | {_fmt(cpu['all'], 0)} "
                f"| {_maybe(cpu.get('sending'))} | {_maybe(cpu.get('whole'))} "
                f"| {_fmt(row['server_us_per_task'], 1)} |"
            )
        versus = head_to_head(backlog)
        if versus:
            lines += ["", versus]
    lines += [
        "",
        f"## Duplicate-heavy: {config['dup_n']} tasks over 10 distinct arguments, body sleeps "
        f"{int(config['dup_sleep'] * 1000)} ms",
        "",
        f"Medians of {config['dup_repeats']} repeats; overlaps: two executions of one argument "
        "running at once (the largest count seen in any repeat). Skipped = not run (refused at "
        "send, or skipped by the worker).",
        "",
        "| variant | sent | ran | skipped | overlaps (max) | seconds |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for variant, row in results["duplicates"].items():
        lines.append(
            f"| {LABELS.get(variant, variant)} | {row['sent']:.0f} | {row['ran']:.0f} | {row['skipped']:.0f} "
            f"| {row['overlaps']:.0f} ({row['overlaps_max']}) | {_fmt(row['seconds'])} |"
        )
    lines += [
        "",
        "## Renewal at scale: one process holding N locks, one `renew_now()` cycle",
        "",
        "Server time: `INFO commandstats` usec of the script calls of one cycle. Longest call: "
        "the longest single script call of any cycle (SLOWLOG), how long Redis served nobody "
        f"else; the batch is cut into calls of {RENEW_CHUNK:,} locks, pipelined in one round trip. Wall: "
        "the cycle as the process sees it (building the calls, the round trip, reading the "
        "replies). The peers do not renew (a fixed TTL), so this is ours alone.",
        "",
        "| locks held | round trips/cycle | server ms/cycle | longest call ms | wall ms/cycle "
        "| bytes of Redis memory/lock |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["renewal"].values():
        lines.append(
            f"| {row['locks']:,} | {row['round_trips']:.0f} | {_fmt(row['server_ms'])} "
            f"| {_fmt(row.get('longest_call_ms', float('nan')))} "
            f"| {_fmt(row['wall_ms'])} | {row['bytes_per_lock']:.0f} |"
        )
    lines += [
        "",
        "## The floor",
        "",
        f"PING round trip on this machine: **{_fmt(floor['ping_us'], 1)} µs** (median); one "
        f"uncontended acquire + release through `LockEngine`: {_fmt(floor['acquire_release_us'], 1)} µs "
        f"({_fmt(floor['acquire_release_us'] / floor['ping_us'], 1)} PINGs).",
        "",
        "Lock Redis server time of one uncontended pair with nothing else running (SLOWLOG, the "
        f"best of three runs): ours (`SET NX PX`, then a task's release: the server's "
        f"conditional delete where it has one, else the release script) "
        f"**{_fmt(floor.get('server_pair_us', float('nan')), 1)} µs**; the peers' (`SET NX PX`, "
        f"then `DEL`) {_fmt(floor.get('server_peer_pair_us', float('nan')), 1)} µs.",
        "",
    ]
    return "\n".join(lines)


def chart(results: dict[str, Any], path: Path) -> bool:
    """Draw the PNG; False when matplotlib is not installed (the table is still written)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    ax = axes[0][0]
    # Throughput as a ratio to plain, per scenario, the bars' whiskers the 95 % confidence
    # interval of the median: how much of a difference is the machine's noise.
    scenarios = [("sent and waited for", results["uncontended"], "#3070b0")]
    if results.get("backlog"):
        scenarios.append(("backlog drained", results["backlog"], "#60a050"))
    names = list(results["uncontended"])
    width = 0.8 / len(scenarios)
    for index, (label, rows, color) in enumerate(scenarios):
        xs = [i + (index - (len(scenarios) - 1) / 2) * width for i in range(len(names))]
        ratios = [rows[n]["ratio"] for n in names]
        bounds = [rows[n].get("ratio_ci") or (r, r) for n, r in zip(names, ratios)]
        errors = [
            [max(0.0, r - q[0]) for r, q in zip(ratios, bounds)],
            [max(0.0, q[1] - r) for r, q in zip(ratios, bounds)],
        ]
        ax.bar(xs, ratios, width, yerr=errors, capsize=3, label=label, color=color)
        for x, ratio in zip(xs, ratios):
            ax.annotate(f"{ratio:.2f}", (x, 0.02), ha="center", va="bottom", color="white", fontsize=8)
    ax.axhline(1.0, color="#888888", linewidth=1)
    ax.set_xticks(list(range(len(names))), names)
    ax.set_title(f"1. Uncontended throughput vs plain ({results['config']['n']} tasks; median, 95% CI)")
    ax.set_ylabel("tasks/s, ratio to plain Celery")
    ax.legend(loc="lower right")

    ax = axes[0][1]
    trips = results["trips"]
    names = list(trips)
    ax.bar(names, [trips[n]["round_trips_per_task"] for n in names], label="round trips (MONITOR)")
    ax.plot(names, [trips[n]["commands_per_task"] for n in names], "o", color="#c04020", label="commands")
    ax.set_title("2. Lock Redis per uncontended task")
    ax.legend()

    ax = axes[1][0]
    dups = results["duplicates"]
    names = list(dups)
    width = 0.27
    positions = range(len(names))
    for offset, field, color in (
        (-width, "ran", "#3070b0"),
        (0, "skipped", "#888888"),
        (width, "overlaps", "#c04020"),
    ):
        ax.bar(
            [p + offset for p in positions], [dups[n][field] for n in names], width, label=field, color=color
        )
    ax.set_xticks(list(positions), names)
    ax.set_title(f"3. Duplicate-heavy ({results['config']['dup_n']} tasks over 10 arguments)")
    ax.set_ylim(0, results["config"]["dup_n"] * 1.3)
    ax.legend(loc="upper center", ncols=3)

    ax = axes[1][1]
    renewal = list(results["renewal"].values())
    if renewal:
        sizes = [row["locks"] for row in renewal]
        ax.loglog(sizes, [row["server_ms"] for row in renewal], "o-", label="server ms/cycle")
        ax.loglog(sizes, [row["wall_ms"] for row in renewal], "s-", label="wall ms/cycle")
        for size, row in zip(sizes, renewal):
            ax.annotate(f"{row['round_trips']:.0f} trip", (size, row["wall_ms"]), va="bottom")
        ax.legend()
    ax.set_title("4. One renewal cycle vs locks held")
    ax.set_xlabel("locks held by one process")

    for ax in axes.flat:
        ax.tick_params(axis="x", labelrotation=15)
    fig.suptitle(f"celery_redislock benchmarks ({results['machine']['cpu']})")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def write(results: dict[str, Any], out: Path, command: str) -> Path:
    """Write ``results.md``, ``results.json`` and ``results.png`` under ``out``; returns the table's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    table = out / "results.md"
    text = markdown(results, command)
    if chart(results, out / "results.png"):
        text += "\n![benchmark chart](results.png)\n"
    table.write_text(text, encoding="utf-8")
    return table
