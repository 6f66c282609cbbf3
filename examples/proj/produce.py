"""The compose file's producer: sends the burst of duplicates every few seconds, prints the tally.

``python -m proj.produce [--every SECONDS] [--once]``
"""

from __future__ import annotations

import argparse
import time

from . import burst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proj.produce", description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=float, default=15.0, help="seconds between bursts (default 15)")
    parser.add_argument("--once", action="store_true", help="send one burst and exit")
    args = parser.parse_args(argv)
    while True:
        outcomes = burst.collect(burst.send(burst.burst()))
        print("\n".join(burst.tally(outcomes)), flush=True)
        found = burst.problems(outcomes)
        for problem in found:
            print(f"PROBLEM: {problem}", flush=True)
        if args.once:
            return 1 if found else 0
        time.sleep(args.every)  # the producer's schedule


if __name__ == "__main__":
    raise SystemExit(main())
