"""Durable append-only journal of one logical request's retry state, with leases and recovery.

Storage choice: **SQLite in WAL mode with ``synchronous=FULL``** rather than fsync'd JSON
lines. A commit in this mode is durable when it returns (the WAL is fsync'd), a crash
mid-write can never leave a torn half-event the reader must guess about (uncommitted WAL
frames are discarded by checksum), and ``BEGIN IMMEDIATE`` makes "check the lease
generation, then append" one atomic step across processes — with JSON lines that needs a
separate lock file and tail repair. The ``events`` table is append-only (triggers abort any
UPDATE or DELETE), and each accepted event carries ``sha256(prev_sha256 ‖ canonical JSON)``
so recovery can verify the prefix it rebuilds from.

Events: ``logical_request_created, route_gated, attempt_reserved, attempt_dispatched,
job_submitted, attempt_observed, retry_decision_committed, terminal_committed``. The
controller makes ``attempt_dispatched`` durable *before* the call crosses the effect
boundary (and a provider job's id as soon as the submission returns it), so after a
crash: a reservation without a dispatch provably never left the process (it is simply
re-planned); a dispatch without an observed outcome is indeterminate and is reconciled
with the receiver — by idempotency key, or by polling the job id — never resubmitted. Only
a verified no-effect (``failed_no_effect``) lets the schedule dispatch again;
``succeeded`` is recorded as the attempt's success (with the stored result) without
resubmitting. Several attempts may be in flight at once (hedges): each one follows
reserved → dispatched → (job submitted) → observed on its own.

Leases: each :meth:`Journal.acquire` bumps the request's generation. An append under an
older generation (a stale worker's late result), or any append after the terminal, is
*kept as evidence* (``fenced = 1``, outside the hash chain) and raises
:class:`LeaseFenced`: it can never overwrite a newer terminal.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from retryscope.canonical import canonical_json, sha256_hex
from retryscope.control._evaluator import ObservedAttempt
from retryscope.control._guards import Gate
from retryscope.control._receipts import gate_from_obj
from retryscope.control._strict import from_obj
from retryscope.vocabulary import Outcome, OutcomeKind, Terminal

_GENESIS: Final = "0" * 64
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    request_key TEXT NOT NULL,
    generation INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    fenced INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_request ON events (request_key, seq);
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the journal is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the journal is append-only'); END;
CREATE TABLE IF NOT EXISTS leases (
    request_key TEXT PRIMARY KEY,
    generation INTEGER NOT NULL,
    holder TEXT NOT NULL,
    expires_at_ms INTEGER NOT NULL
);
"""


class EventKind(enum.StrEnum):
    LOGICAL_REQUEST_CREATED = "logical_request_created"
    ROUTE_GATED = "route_gated"
    ATTEMPT_RESERVED = "attempt_reserved"
    ATTEMPT_DISPATCHED = "attempt_dispatched"
    JOB_SUBMITTED = "job_submitted"
    ATTEMPT_OBSERVED = "attempt_observed"
    RETRY_DECISION_COMMITTED = "retry_decision_committed"
    TERMINAL_COMMITTED = "terminal_committed"


class ReceiverStatus(enum.StrEnum):
    """What the receiver reports for an idempotency key (see the reconcile callback)."""

    SUCCEEDED = "succeeded"
    FAILED_NO_EFFECT = "failed_no_effect"
    IN_PROGRESS = "in_progress"
    INDETERMINATE = "indeterminate"


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    request_key: str
    generation: int
    kind: EventKind
    body: dict[str, Any]
    sha256: str
    fenced: bool


@dataclass(frozen=True, slots=True)
class Lease:
    request_key: str
    holder: str
    generation: int
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class PendingDispatch:
    """A dispatch recorded durably whose outcome was never observed; ``job_id`` when the
    attempt had submitted a provider job (then it is polled by that id)."""

    request_key: str
    idempotency_digest: str
    attempt_ordinal: int
    route_id: str
    dispatched: dict[str, Any]
    reserved: dict[str, Any]
    job_id: str | None = None


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """The receiver's answer for a pending dispatch; ``value`` is the stored result of a
    ``succeeded`` operation (returned to the caller as the request's value)."""

    status: ReceiverStatus
    completed_at_ms: int | None = None
    cost_actual_micros: int | None = None
    value: Any = None
    retry_after_ms: int | None = None
    kind: OutcomeKind | None = None
    """The failure kind the receiver reported (default: the status's own)."""


@dataclass(frozen=True, slots=True)
class Recovery:
    """State rebuilt from a verified journal prefix under a fresh lease."""

    lease: Lease
    logical_request_id: str
    attempts: tuple[ObservedAttempt, ...]
    gates: tuple[Gate, ...]
    decided_through: int
    terminal: Terminal | None
    pending: tuple[PendingDispatch, ...]
    created: bool


class JournalError(RuntimeError):
    """Base of journal errors."""


class LeaseHeld(JournalError):
    """Another holder's lease has not expired."""


class LeaseFenced(JournalError):
    """A stale generation (or a post-terminal write); the event was kept as evidence."""

    def __init__(self, message: str, evidence_seq: int) -> None:
        super().__init__(message)
        self.evidence_seq = evidence_seq


class JournalCorrupt(JournalError):
    """The event prefix does not verify (hash chain or event order)."""


class ReconcileRequired(JournalError):
    """A dispatch has no observed outcome and no reconcile callback was given."""


def _chain(prev: str, generation: int, kind: str, body_json: str) -> str:
    head = canonical_json({"generation": generation, "kind": kind}, integers_only=True)
    return sha256_hex(prev.encode() + b"\n" + head + b"\n" + body_json.encode("utf-8"))


class Journal:
    """One SQLite file (WAL) holding the events and leases of many logical requests."""

    def __init__(self, path: Path | str, *, file_mode: int = 0o600) -> None:
        """Open (or create) the journal at ``path``; a new file gets exactly ``file_mode``
        (owner-only by default, whatever the umask; SQLite gives its -wal/-shm files the
        same mode)."""
        self.path = Path(path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, file_mode)
        except FileExistsError:
            pass
        else:
            os.fchmod(fd, file_mode)
            os.close(fd)
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _immediate(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, its lock taken before the first read (``BEGIN
        IMMEDIATE``); rolled back if anything in it raises."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- leases ---------------------------------------------------------------------------
    def acquire(self, request_key: str, holder: str, *, now_ms: int, ttl_ms: int) -> Lease:
        """Take the request with a new generation, unless another holder's lease is live."""
        with self._immediate() as db:
            row = db.execute(
                "SELECT generation, holder, expires_at_ms FROM leases WHERE request_key = ?",
                (request_key,),
            ).fetchone()
            if row is not None and row[1] != holder and row[2] > now_ms:
                raise LeaseHeld(f"{request_key}: held by {row[1]!r} until {row[2]} ms")
            lease = Lease(request_key, holder, (row[0] if row else 0) + 1, now_ms + ttl_ms)
            db.execute(
                "INSERT INTO leases VALUES (?, ?, ?, ?) ON CONFLICT (request_key) DO UPDATE "
                "SET generation = excluded.generation, holder = excluded.holder, "
                "expires_at_ms = excluded.expires_at_ms",
                (request_key, lease.generation, holder, lease.expires_at_ms),
            )
        return lease

    def renew(self, lease: Lease, *, now_ms: int, ttl_ms: int) -> Lease:
        """Extend a lease that is still current; :class:`LeaseFenced` if it was taken over."""
        with self._immediate() as db:
            current = self._generation(lease.request_key)
            if current != lease.generation:
                raise LeaseFenced(f"generation {lease.generation} superseded by {current}", -1)
            renewed = Lease(lease.request_key, lease.holder, lease.generation, now_ms + ttl_ms)
            db.execute(
                "UPDATE leases SET expires_at_ms = ? WHERE request_key = ?",
                (renewed.expires_at_ms, lease.request_key),
            )
        return renewed

    def _generation(self, request_key: str) -> int:
        row = self._db.execute(
            "SELECT generation FROM leases WHERE request_key = ?", (request_key,)
        ).fetchone()
        return int(row[0]) if row else 0

    # -- events ---------------------------------------------------------------------------
    def append(self, lease: Lease, kind: EventKind, body: dict[str, Any]) -> Event:
        """Append durably under ``lease``; a stale or post-terminal write is fenced."""
        body_json = canonical_json(body, integers_only=True).decode("utf-8")
        with self._immediate() as db:
            key = lease.request_key
            current = self._generation(key)
            last = db.execute(
                "SELECT kind, sha256 FROM events WHERE request_key = ? AND fenced = 0 "
                "ORDER BY seq DESC LIMIT 1",
                (key,),
            ).fetchone()
            reason = None
            if current != lease.generation:
                reason = f"generation {lease.generation} is stale (current {current})"
            elif last is not None and last[0] == EventKind.TERMINAL_COMMITTED:
                reason = "the terminal is already committed"
            prev = last[1] if last else _GENESIS
            sha = _chain(prev, lease.generation, kind.value, body_json)
            cur = db.execute(
                "INSERT INTO events (request_key, generation, kind, body, sha256, fenced) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (key, lease.generation, kind.value, body_json, sha, int(reason is not None)),
            )
            seq = int(cur.lastrowid or 0)
        if reason is not None:
            raise LeaseFenced(f"{key}: {kind.value} kept as evidence only: {reason}", seq)
        return Event(seq, key, lease.generation, kind, body, sha, fenced=False)

    def events(self, request_key: str, *, include_fenced: bool = False) -> list[Event]:
        rows = self._db.execute(
            "SELECT seq, generation, kind, body, sha256, fenced FROM events "
            "WHERE request_key = ? ORDER BY seq",
            (request_key,),
        ).fetchall()
        return [
            Event(r[0], request_key, r[1], EventKind(r[2]), json.loads(r[3]), r[4], bool(r[5]))
            for r in rows
            if include_fenced or not r[5]
        ]

    def verify(self, request_key: str) -> list[Event]:
        """The accepted events, after checking the hash chain and the event order."""
        rows = self._db.execute(
            "SELECT seq, generation, kind, body, sha256 FROM events "
            "WHERE request_key = ? AND fenced = 0 ORDER BY seq",
            (request_key,),
        ).fetchall()
        prev = _GENESIS
        out: list[Event] = []
        for seq, generation, kind, body_json, sha in rows:
            if _chain(prev, generation, kind, body_json) != sha:
                raise JournalCorrupt(f"{request_key}: event {seq} breaks the hash chain")
            prev = sha
            out.append(
                Event(
                    seq, request_key, generation, EventKind(kind), json.loads(body_json), sha, False
                )
            )
        _check_order(request_key, out)
        return out

    # -- recovery -------------------------------------------------------------------------
    def recover(
        self,
        request_key: str,
        holder: str,
        *,
        now_ms: int,
        ttl_ms: int,
        created: dict[str, Any],
    ) -> Recovery:
        """Acquire the request and rebuild its state from the verified prefix.

        ``created`` is the ``logical_request_created`` body; when the journal has no events
        yet it is written, otherwise the recorded one must bind the same policy and
        admission (its ``logical_request_id`` is the one the request continues under).
        Dispatches without an observed outcome come back as ``pending``: the caller
        reconciles them with the receiver, never resubmits them.
        """
        lease = self.acquire(request_key, holder, now_ms=now_ms, ttl_ms=ttl_ms)
        events = self.verify(request_key)
        if not events:
            self.append(lease, EventKind.LOGICAL_REQUEST_CREATED, created)
            return Recovery(lease, created["logical_request_id"], (), (), 0, None, (), created=True)
        recorded = events[0].body
        if {k: v for k, v in recorded.items() if k != "logical_request_id"} != {
            k: v for k, v in created.items() if k != "logical_request_id"
        }:
            raise JournalCorrupt(f"{request_key}: recorded request/policy differs from this run")
        attempts: list[ObservedAttempt] = []
        gates: list[Gate] = []
        decided = 0
        terminal: Terminal | None = None
        reserved: dict[int, dict[str, Any]] = {}
        dispatched: dict[int, dict[str, Any]] = {}
        jobs: dict[int, str] = {}
        for e in events:
            if e.kind is EventKind.ROUTE_GATED:
                gates.append(gate_from_obj(e.body, f"event {e.seq}"))
            elif e.kind is EventKind.ATTEMPT_RESERVED:
                reserved[e.body["attempt_ordinal"]] = e.body
            elif e.kind is EventKind.ATTEMPT_DISPATCHED:
                dispatched[e.body["attempt_ordinal"]] = e.body
            elif e.kind is EventKind.JOB_SUBMITTED:
                jobs[e.body["attempt_ordinal"]] = e.body["job_id"]
            elif e.kind is EventKind.ATTEMPT_OBSERVED:
                attempts.append(from_obj(ObservedAttempt, e.body["attempt"], f"event {e.seq}"))
            elif e.kind is EventKind.RETRY_DECISION_COMMITTED:
                decided = max(decided, e.body["attempt_ordinal"])
            elif e.kind is EventKind.TERMINAL_COMMITTED:
                terminal = Terminal(e.body["terminal"])
        attempts.sort(key=lambda a: a.attempt_ordinal)
        observed = {a.attempt_ordinal for a in attempts}
        pending = tuple(
            PendingDispatch(
                request_key=request_key,
                idempotency_digest=created["admission"]["idempotency_key_sha256"],
                attempt_ordinal=n,
                route_id=body["route_id"],
                dispatched=body,
                reserved=reserved[n],
                job_id=jobs.get(n),
            )
            for n, body in sorted(dispatched.items())
            if n not in observed
        )
        # a reservation without a dispatch never crossed the effect boundary
        return Recovery(
            lease,
            recorded["logical_request_id"],
            tuple(attempts),
            tuple(gates),
            decided,
            terminal,
            () if terminal is not None else pending,
            created=False,
        )


_OUTCOME_OF: Final[dict[ReceiverStatus, tuple[Outcome, OutcomeKind | None]]] = {
    ReceiverStatus.SUCCEEDED: (Outcome.SUCCESS, None),
    # verified no effect: the attempt counts against the budgets, and the schedule may retry
    ReceiverStatus.FAILED_NO_EFFECT: (Outcome.RETRYABLE, OutcomeKind.UNAVAILABLE),
    ReceiverStatus.INDETERMINATE: (Outcome.INDETERMINATE, OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE),
}


def reconciled_attempt(p: PendingDispatch, answer: Reconciliation, now_ms: int) -> ObservedAttempt:
    """The pending attempt as the receiver's answer settles it (not ``in_progress``)."""
    outcome, kind = _OUTCOME_OF[answer.status]
    if answer.kind is not None:
        if answer.status is ReceiverStatus.SUCCEEDED or (
            answer.kind.family is Outcome.INDETERMINATE
        ) != (answer.status is ReceiverStatus.INDETERMINATE):
            raise ValueError(f"{answer.kind.value!r} does not describe {answer.status.value!r}")
        outcome, kind = answer.kind.family, answer.kind
    r, d = p.reserved, p.dispatched
    return ObservedAttempt(
        route_id=d["route_id"],
        route_release=d["route_release"],
        route_attempt_ordinal=r["route_attempt_ordinal"],
        attempt_ordinal=p.attempt_ordinal,
        logical_request_digest=d["logical_request_digest"],
        idempotency_digest=p.idempotency_digest,
        start_ms=d["dispatched_at_ms"],
        end_ms=answer.completed_at_ms if answer.completed_at_ms is not None else now_ms,
        outcome=outcome,
        outcome_kind=kind,
        not_before_ms=r["not_before_ms"],
        backoff_delay_ms=r["delay_ms"],
        retry_after_ms=answer.retry_after_ms,
        cost_reserved_micros=r["reserve_micros"],
        cost_actual_micros=answer.cost_actual_micros,
        hedge_ordinal=r.get("hedge_ordinal"),
    )


def _check_order(request_key: str, events: list[Event]) -> None:
    """Events follow the state machine, each attempt on its own: reserved → dispatched →
    (job submitted) → observed → decided; a reservation never dispatched may be made again
    after a crash; gates come before the terminal; the terminal is last and leaves no
    attempt in flight."""
    reserved: set[int] = set()
    dispatched: set[int] = set()
    observed: set[int] = set()
    jobs: set[int] = set()
    done = False

    def bad(e: Event, why: str) -> JournalCorrupt:
        return JournalCorrupt(f"{request_key}: {e.kind.value} (event {e.seq}) {why}")

    for index, e in enumerate(events):
        if (index == 0) != (e.kind is EventKind.LOGICAL_REQUEST_CREATED):
            raise bad(e, "out of place: the request is created first, once")
        if done:
            raise bad(e, "after the terminal")
        n: Any = e.body.get("attempt_ordinal")
        if e.kind is EventKind.ATTEMPT_RESERVED:
            if n in dispatched or not (n == 1 or n - 1 in reserved):
                raise bad(e, f"reserves attempt {n} out of turn")
            reserved.add(n)
        elif e.kind is EventKind.ATTEMPT_DISPATCHED:
            if n not in reserved or n in dispatched:
                raise bad(e, f"dispatches attempt {n}, which is not reserved")
            dispatched.add(n)
        elif e.kind is EventKind.JOB_SUBMITTED:
            if n not in dispatched or n in observed or n in jobs:
                raise bad(e, f"records a job for attempt {n}, which is not in flight")
            jobs.add(n)
        elif e.kind is EventKind.ATTEMPT_OBSERVED:
            n = e.body.get("attempt", {}).get("attempt_ordinal")
            if n not in dispatched or n in observed:
                raise bad(e, f"observes attempt {n}, which is not in flight")
            observed.add(n)
        elif e.kind is EventKind.RETRY_DECISION_COMMITTED:
            if n not in observed:
                raise bad(e, f"decides after attempt {n}, which was not observed")
        elif e.kind is EventKind.TERMINAL_COMMITTED:
            if dispatched - observed:
                raise bad(e, f"leaves attempts {sorted(dispatched - observed)} in flight")
            done = True
