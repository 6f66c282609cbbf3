"""``python -m benchmarks``: run every scenario, write the table and chart under benchmarks/results/."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from .harness import Config, run
from .report import write
from .servers import add_server_option

DEFAULT_OUT = Path(__file__).parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--n", type=int, default=Config.n, help="tasks per uncontended batch")
    parser.add_argument("--repeats", type=int, default=Config.repeats, help="measured repeats (+1 warm-up)")
    parser.add_argument(
        "--renewal-sizes",
        default=",".join(map(str, Config.renewal_sizes)),
        help="comma-separated numbers of locks held in the renewal scenario",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: checks the harness, measures nothing"
    )
    add_server_option(parser)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where results.md/.png/.json go: default benchmarks/results/, with --quick a temporary folder",
    )
    args = parser.parse_args(argv)
    config = Config(
        n=args.n,
        repeats=args.repeats,
        renewal_sizes=tuple(int(s) for s in args.renewal_sizes.split(",")),
        redis_server=args.redis_server,
    )
    out = args.out or DEFAULT_OUT
    if args.quick:
        config = dataclasses.replace(quick_config(), redis_server=args.redis_server)
        # Figures that mean nothing must not overwrite the published ones unless asked to.
        out = args.out or Path(tempfile.mkdtemp(prefix="redislock-bench-quick-"))
    command = "python -m benchmarks" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    started = time.monotonic()

    def progress(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", file=sys.stderr, flush=True)

    results = run(config, progress)
    table = write(results.as_dict(), out, command)
    print(table.read_text(encoding="utf-8"))
    progress(f"wrote {table} and its chart")
    return 0


def quick_config() -> Config:
    """Small enough for a smoke test: every scenario runs, none of its figures mean anything."""
    return Config(
        n=20,
        repeats=1,
        trips_n=10,
        dup_n=20,
        dup_repeats=1,
        dup_sleep=0.01,
        renewal_sizes=(100,),
        renewal_repeats=1,
        pings=20,
    )


if __name__ == "__main__":
    sys.exit(main())
