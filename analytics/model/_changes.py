"""What a model directory's update changes, so the work across partitions follows the
change instead of the whole data set.

Between a model directory's previous model and the one being written, time partitions
were added (a new hour) or removed (a file rewritten by a later ingest: its partition gets
a new fingerprint, the old folder leaves). The requests whose rows may differ between the
two models are few: those with spans in an added or removed partition, and those that
straddle partitions in either model (their rows are rebuilt from all their spans). Every
other request has the same rows in both, which gives exact shortcuts:

* **Straddlers.** A request straddles when its unit (itself; for an implicit request, its
  trace) is in two partitions. Only a previous straddler's unit or one of an added or
  removed partition can straddle now, so the units are counted for those only. A
  straddler none of whose partitions changed keeps its previous rows; only the others
  are built again from their spans.
* **Idempotency conflicts** (``model_global.sql``) are grouped on the idempotency digest's
  hash. A hash that no changed request carries, in either model, has the same requests in
  both, so its conflicts are the previous ones; the rule runs again over the requests of
  the other hashes only.

The route latency and the doomed dispatches compare every attempt with a median over all
attempts, which a new hour moves: they are built over the whole model each time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import duckdb

from retryscope.analytics.model._cache import RECONCILED, STRADDLERS, parquet
from retryscope.analytics.model._partition import PER_REQUEST_TABLES

CHANGED: Final = "rs_changed_requests"
"""Temp table: the units ``u`` of the requests of the partitions added or removed."""
CANDIDATES: Final = "rs_straddler_candidates"
"""Temp table: the units that may straddle now (the changed ones, the previous
straddlers')."""
TOUCHED: Final = "rs_touched_idempotency"
"""Temp table: the idempotency digest hashes a request whose rows may differ carries."""
_DIGESTS: Final = "request_digest_hashes"
_CONFLICTS: Final = "idempotency_conflicts"


@dataclass(frozen=True, slots=True)
class Changes:
    """The difference between a model directory's previous model and the one being
    written. Paths are the Parquet files of the named tables, in the previous model's
    across folder (``previous_*``) and in the partitions added and removed."""

    previous_straddlers: str
    """The previous model's ``straddlers.parquet``."""
    previous_reconciled: dict[str, str]
    """Per per-request table, the previous model's straddlers' rows (none when the
    previous model had no straddler)."""
    previous_conflicts: str
    """The previous model's ``idempotency_conflicts.parquet``."""
    changed_keys: tuple[str, ...]
    """The ``request_keys`` files of the partitions added and removed."""
    changed_digests: tuple[str, ...]
    """The ``request_digest_hashes`` files of the partitions removed."""

    @classmethod
    def between(
        cls,
        across: Path,
        straddlers: int,
        *,
        changed_keys: Sequence[str],
        removed_digests: Sequence[str],
    ) -> Changes:
        """The changes from the previous model (its across folder ``across``, with
        ``straddlers`` straddlers): ``changed_keys`` are the ``request_keys`` files of the
        partitions added and removed, ``removed_digests`` the ``request_digest_hashes``
        files of those removed."""
        return cls(
            previous_straddlers=str(across / f"{STRADDLERS}.parquet"),
            previous_reconciled=(
                {t: str(across / f"{RECONCILED}{t}.parquet") for t in PER_REQUEST_TABLES}
                if straddlers
                else {}
            ),
            previous_conflicts=str(across / f"{_CONFLICTS}.parquet"),
            changed_keys=tuple(changed_keys),
            changed_digests=tuple(removed_digests),
        )

    # -- straddlers -------------------------------------------------------------------
    def _changed(self) -> str:
        """The request keys of the partitions added or removed (a relation of
        ``request_keys``: ``h``, ``u``)."""
        if not self.changed_keys:
            return "(SELECT NULL::UBIGINT AS h, NULL::UBIGINT AS u WHERE false)"
        return parquet(self.changed_keys)

    def mark(self, cur: duckdb.DuckDBPyConnection) -> tuple[str, str]:
        """Create :data:`CANDIDATES` and :data:`CHANGED` on ``cur`` and return their
        names: the units (``u``, ``request_keys.sql``) that may straddle now, and those
        whose straddling rows must be built again (the other straddlers keep the previous
        model's rows)."""
        cur.execute(
            f"CREATE OR REPLACE TEMP TABLE {CHANGED} AS SELECT DISTINCT u FROM {self._changed()}"
        )
        cur.execute(
            f"CREATE OR REPLACE TEMP TABLE {CANDIDATES} AS SELECT u FROM {CHANGED} "
            f"UNION SELECT u FROM {parquet([self.previous_straddlers])}"
        )
        return CANDIDATES, CHANGED

    def kept_straddlers(self, units: str, rebuilt: str) -> str:
        """The previous model's straddlers (``h``, ``u``) of the units in ``units`` not
        ``rebuilt``: with those the partitions name, the requests whose previous rows
        are kept (an implicit request only the whole trace gave is in no partition)."""
        return (
            f"(SELECT p.h, p.u FROM {parquet([self.previous_straddlers])} p "
            f"SEMI JOIN (SELECT u FROM {units} EXCEPT SELECT u FROM {rebuilt}) k "
            "ON k.u = p.u)"
        )

    def kept_rows(self, table: str, straddlers: str, rebuilt: str) -> str | None:
        """The previous model's rows of ``table`` for the straddlers in ``straddlers``
        whose unit is not ``rebuilt`` (their partitions are unchanged), or None when it
        had none."""
        previous = self.previous_reconciled.get(table)
        if previous is None:
            return None
        return (
            f"(SELECT p.* FROM {parquet([previous])} p "
            f"SEMI JOIN (SELECT s.h FROM {straddlers} s ANTI JOIN {rebuilt} r ON r.u = s.u) k "
            "ON k.h = p.h)"
        )

    # -- idempotency conflicts ----------------------------------------------------------
    def narrow_digests(
        self,
        cur: duckdb.DuckDBPyConnection,
        *,
        units: str,
        model: str,
        straddlers: str,
        reconciled: str | None,
    ) -> None:
        """Create :data:`TOUCHED` on ``cur``: the digest hashes carried by a request whose
        rows may differ (one of a changed partition, or a straddler of either model; the
        new model's are ``straddlers``), read from every row either model may hold of it:
        ``units`` (the rows of the new model's partitions, its straddlers' included), the
        removed partitions' rows, the previous straddlers' rows and ``reconciled`` (the
        new straddlers' rows; None when there are none). Then point the view
        ``request_digest_hashes`` of ``cur`` at the rows of ``model`` (the new model's
        relation of that table) carrying one of them, so ``model_global.sql`` judges
        those hashes only."""
        every = [units]
        if self.changed_digests:
            every.append(parquet(self.changed_digests))
        previous = self.previous_reconciled.get(_DIGESTS)
        if previous is not None:
            every.append(parquet([previous]))
        if reconciled is not None:
            every.append(reconciled)
        rows = " UNION ALL ".join(f"SELECT h, idempotency_hash FROM {r}" for r in every)
        requests = " UNION ".join(
            f"SELECT h FROM {r}"
            for r in (self._changed(), parquet([self.previous_straddlers]), straddlers)
        )
        cur.execute(
            f"CREATE OR REPLACE TEMP TABLE {TOUCHED} AS "
            f"SELECT DISTINCT d.idempotency_hash FROM ({rows}) d "
            f"SEMI JOIN ({requests}) c ON c.h = d.h"
        )
        cur.execute(
            f"CREATE OR REPLACE TEMP VIEW {_DIGESTS} AS SELECT d.* FROM {model} d "
            f"SEMI JOIN {TOUCHED} t ON t.idempotency_hash = d.idempotency_hash"
        )

    def merge_conflicts(self, cur: duckdb.DuckDBPyConnection) -> None:
        """Complete ``idempotency_conflicts`` of ``cur`` (built over the hashes of
        :data:`TOUCHED`) with the previous model's conflicts of every other hash."""
        cur.execute(f"ALTER TABLE temp.main.{_CONFLICTS} RENAME TO rs_conflicts_of_touched")
        cur.execute(
            f"CREATE TEMP TABLE {_CONFLICTS} AS "
            f"SELECT p.* FROM {parquet([self.previous_conflicts])} p "
            f"ANTI JOIN {TOUCHED} t ON t.idempotency_hash = hash(p.idempotency_digest) "
            "UNION ALL BY NAME SELECT * FROM rs_conflicts_of_touched"
        )
        cur.execute("DROP TABLE rs_conflicts_of_touched")
