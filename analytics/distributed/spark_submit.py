"""The module ``spark-submit`` runs (it takes a file, not ``-m``): build a data set's
audit model on the cluster spark-submit names. Its path::

    python -c 'import retryscope.analytics.distributed.spark_submit as m; print(m.__file__)'

Arguments: ``DATA [--model DIR] [--partitions K]`` (as ``retryscope model --engine spark``;
the master and every Spark setting come from spark-submit's own options).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="spark-submit … spark_submit.py",
        description="Build the retryscope audit model of a data set on Spark.",
    )
    parser.add_argument("data", help="directory (or file, or s3:// prefix) of span Parquet files")
    parser.add_argument("--model", metavar="DIR", help="model directory (default: DATA.model)")
    parser.add_argument("--partitions", type=int, metavar="K", help="tasks (default: sized)")
    args = parser.parse_args(argv)
    from retryscope.analytics.distributed._command import spark_model_command

    return spark_model_command(args.data, model=args.model, master=None, partitions=args.partitions)


if __name__ == "__main__":
    raise SystemExit(main())
