"""``python -m retryscope.reference [--check] [--out DIR]``: write or check the reference."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from retryscope.reference._pages import REGENERATE, ReferenceMismatch, render_all, stale_pages


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m retryscope.reference",
        description="Write the reference pages generated from the code (docs/reference/).",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("docs/reference"),
        help="directory of the pages (default: %(default)s)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming each page that is missing or out of date",
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = stale_pages(args.out)
            for name in stale:
                print(f"{args.out / name}: out of date; run {REGENERATE}", file=sys.stderr)
            return 1 if stale else 0
        args.out.mkdir(parents=True, exist_ok=True)
        for name, text in render_all().items():
            (args.out / name).write_text(text, encoding="utf-8")
            print(args.out / name)
    except ReferenceMismatch as exc:
        print(f"python -m retryscope.reference: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
