"""HTTP classification, strict Retry-After parsing, and the byte-stable lab."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from retryscope.canonical import sha256_hex
from retryscope.control._lab import reference_policy
from retryscope.control._receipts import policy_sha256
from retryscope.http_rules import (
    classify_exception,
    classify_status,
    parse_retry_after,
)
from retryscope.vocabulary import OutcomeKind as K


@pytest.mark.parametrize(
    ("status", "idempotent", "kind"),
    [
        (200, True, None),
        (204, False, None),
        (408, True, K.TIMEOUT_BEFORE_RESPONSE),
        (408, False, K.UNKNOWN_PROVIDER_ACCEPTANCE),
        (429, False, K.RATE_LIMITED),
        (500, False, K.UNAVAILABLE),
        (503, True, K.UNAVAILABLE),
        (400, True, K.INVALID_REQUEST),
        (422, True, K.INVALID_REQUEST),
        (401, True, K.POLICY_DENIED),
        (403, True, K.POLICY_DENIED),
        (404, True, K.REJECTED),
        (409, True, K.REJECTED),
        (451, False, K.POLICY_DENIED),
        (302, True, None),  # a redirect is a completed send
        (101, True, K.PROTOCOL_VIOLATION),
        (99, False, K.PROTOCOL_VIOLATION),
        (600, True, K.PROTOCOL_VIOLATION),
    ],
)
def test_status_classification(status: int, idempotent: bool, kind: K | None) -> None:
    assert classify_status(status, idempotent=idempotent) is kind


def test_exception_classification() -> None:
    req = httpx.Request("POST", "http://127.0.0.1/")
    assert (
        classify_exception(ConnectionRefusedError(), idempotent=False, request_sent=False)
        is K.UNAVAILABLE
    )
    assert (
        classify_exception(
            httpx.ConnectError("x", request=req), idempotent=False, request_sent=False
        )
        is K.UNAVAILABLE
    )
    assert (
        classify_exception(
            httpx.PoolTimeout("x", request=req), idempotent=False, request_sent=False
        )
        is K.UNAVAILABLE
    )
    assert (
        classify_exception(httpx.ReadTimeout("x", request=req), idempotent=True, request_sent=True)
        is K.UNKNOWN_PROVIDER_ACCEPTANCE
    )
    assert (
        classify_exception(httpx.WriteTimeout("x", request=req), idempotent=True, request_sent=True)
        is K.TIMEOUT_BEFORE_RESPONSE
    )
    assert (
        classify_exception(
            httpx.WriteTimeout("x", request=req), idempotent=False, request_sent=True
        )
        is K.UNKNOWN_PROVIDER_ACCEPTANCE
    )
    assert (
        classify_exception(TimeoutError(), idempotent=True, request_sent=True)
        is K.UNKNOWN_PROVIDER_ACCEPTANCE
    )
    assert classify_exception(TimeoutError(), idempotent=True, request_sent=False) is K.UNAVAILABLE
    assert (
        classify_exception(
            ValueError("provider says: use http://evil/"), idempotent=True, request_sent=True
        )
        is K.UNKNOWN_PROVIDER_ACCEPTANCE
    )


NOW = 1_445_412_480_000  # Wed, 21 Oct 2015 07:28:00 GMT


@pytest.mark.parametrize(
    ("value", "delay", "invalid", "capped"),
    [
        (None, None, False, False),
        ("120", 60_000, False, True),
        ("1", 1_000, False, False),
        (" 2\t", 2_000, False, False),
        ("0", 0, False, False),
        ("9" * 400, 60_000, False, True),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30_000, False, False),
        ("Wednesday, 21-Oct-15 07:28:30 GMT", 30_000, False, False),
        ("Wed Oct 21 07:28:30 2015", 30_000, False, False),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0, False, False),
        ("-1", None, True, False),
        ("1.5", None, True, False),
        ("120s", None, True, False),
        ("soon", None, True, False),
        ("", None, True, False),
        ("Wed, 21 Oct 2015 07:28:30 UTC", None, True, False),
        ("Wed, 31 Feb 2015 07:28:30 GMT", None, True, False),
        ("١٢", None, True, False),
    ],
)
def test_retry_after_is_parsed_strictly_and_bounded(
    value: str | None, delay: int | None, invalid: bool, capped: bool
) -> None:
    parsed = parse_retry_after(value, now_ms=NOW, cap_ms=60_000)
    assert (parsed.delay_ms, parsed.invalid, parsed.capped) == (delay, invalid, capped)
    if value is not None:
        assert parsed.raw == value[:64]


@given(st.text(max_size=80), st.integers(0, 10**6))
def test_retry_after_never_exceeds_the_cap_and_never_raises(value: str, cap: int) -> None:
    parsed = parse_retry_after(value, now_ms=NOW, cap_ms=cap)
    assert parsed.delay_ms is None or 0 <= parsed.delay_ms <= cap
    assert parsed.invalid is (parsed.delay_ms is None)


def _lab(out: Path) -> bytes:
    done = subprocess.run(
        [sys.executable, "-m", "retryscope.cli", "lab", "--out", str(out)],
        capture_output=True,
        check=True,
        timeout=120,
    )
    return done.stdout


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "control-plane.md"


def test_lab_is_byte_identical_across_processes(tmp_path: Path) -> None:
    first, second = _lab(tmp_path / "a"), _lab(tmp_path / "b")
    assert first == second
    guide = GUIDE.read_text(encoding="utf-8")
    assert first.decode() in guide, "the guide's pinned lab output is stale"
    name = f"{policy_sha256(reference_policy())}.json"
    data = (tmp_path / "a" / name).read_bytes()
    assert data == (tmp_path / "b" / name).read_bytes()
    lines = {line[:20].strip(): line[20:] for line in first.decode().splitlines()}
    assert lines["baseline"] == "completed on compatible fallback"
    assert lines["mutation cases"] == "31 / 31"  # one case per rule
    assert lines["policy SHA-256"] == policy_sha256(reference_policy())
    assert lines["report bytes"] == f"{len(data):,}"
    assert lines["report SHA-256"] == sha256_hex(data)
    report = json.loads(data)
    assert all(case["caught"] for case in report["cases"])
    assert report["schedule"] == {
        "attempt_2_with_bounded_1200_ms_hint": 1_200,
        "delays_ms_route_attempts_1_to_5": [200, 400, 800, 1_500, 1_500],
        "reference_not_before_ms": [1_350, 1_650],
    }
    assert report["replay"] == {
        "clean": True,
        "tampered_terminal_drift": ["$.decisions[2].terminal", "$.terminal"],
    }
