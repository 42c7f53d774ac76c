"""A writer process for the watcher's tests (``python -m tests.watch_writer DIR SEED``):
the real exporter closes files hour after hour while a watcher runs, then a late file
lands in the first hour, a file of the second hour is rewritten in place, and two corrupt
files appear in the newest hour (one whose footer does not read, one whose pages do not
decode). Each step is a file closed as the exporter closes it: written under a hidden
name and renamed into place. Prints ``done`` when it has written everything."""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from tests.recorder import MS, Recorder
from tests.reliability.support import flip_bytes
from tests.test_analytics_randomized import _generate

HOUR = 3_600 * 10**9
FIRST_HOUR = 1_790_000_000_000_000_000 // HOUR * HOUR
PAUSE_S = 0.3


def _starts(rng: random.Random, hour: int, n: int) -> list[int]:
    """``n`` request starts 20 ms apart ending just before hour ``hour``'s end: the last
    requests run across the boundary, so their spans land in two partitions."""
    end = FIRST_HOUR + (hour + 1) * HOUR
    return sorted(end - rng.randint(0, 300) * MS - k * 20 * MS for k in range(n))


def _close_atomically(path: Path, data: bytes, *, garbled: bool = False) -> None:
    temp = path.with_name(f".{path.name}.inprogress")
    temp.write_bytes(data)
    if garbled:
        flip_bytes(temp, 200, 1200)  # the footer reads, the first pages do not decode
    os.replace(temp, path)


def main(root: Path, seed: int, hours: int = 3, per_hour: int = 24) -> None:
    rng = random.Random(seed)
    rec = Recorder(root)
    for hour in range(hours):
        starts = _starts(rng, hour, per_hour)
        for chunk in (starts[: per_hour // 2], starts[per_hour // 2 :]):
            _generate(rec, len(chunk), seed=rng.randint(0, 2**16), starts=chunk)
            rec.provider.force_flush()  # the exporter closes a file
            time.sleep(PAUSE_S)
    rec.provider.shutdown()
    parts = sorted({p.parent for p in root.rglob("*.parquet")})
    late = Recorder(root)  # spans of the first hour arriving after the others
    _generate(late, 5, seed=seed + 1, starts=[FIRST_HOUR + HOUR // 2 + k * MS for k in range(5)])
    late.provider.shutdown()
    time.sleep(PAUSE_S)
    victim = sorted(parts[1].glob("*.parquet"))[0]  # rewritten in place with half its rows
    table = pq.read_table(victim)
    temp = victim.with_name(f".{victim.name}.inprogress")
    pq.write_table(table.slice(0, table.num_rows // 2), temp)
    os.replace(temp, victim)
    time.sleep(PAUSE_S)
    newest = parts[-1]
    _close_atomically(newest / "spans-torn.parquet", b"PAR1" + b"\0" * 64)
    source = sorted(newest.glob("*.parquet"))[0]
    _close_atomically(newest / "pages-corrupt.parquet", source.read_bytes(), garbled=True)
    print("done", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
