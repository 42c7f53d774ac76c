"""Keyed digests: with a deployment key, idempotency and request digests are HMAC-SHA-256
under it (a guessable key is no longer recovered by trying candidates), processes sharing
the key produce digests that join, the key's id is recorded with the data and carried by
``inject``/``extract``; without one, a one-time warning and the report says the data set's
digests are unkeyed. Policies keep pinning plain SHA-256 (a key never changes them)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import retryscope
from retryscope.analytics import build_report, connect, format_text
from retryscope.instrumentation import (
    digest_key_id,
    idempotency_digest,
    idempotency_sha256,
    request_digest,
    request_sha256,
)
from retryscope.instrumentation._digests import (
    DIGEST_KEY_ENV,
    DIGEST_KEY_FILE_ENV,
    DigestKeyError,
    load_digest_key,
    reload_digest_key,
)
from tests.reliability.support import audit, visible_files

KEY = "fleet-key-0123456789abcdef-RELIABILITY"
OTHER_KEY = "another-fleet-key-fedcba9876543210"


def _framed(*parts: str) -> bytes:
    """The idempotency message as documented: domain, then each part length-prefixed."""
    out = b"retryscope/idempotency-key/v1"
    for part in parts:
        raw = part.encode()
        out += len(raw).to_bytes(8, "big") + raw
    return out


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(DIGEST_KEY_ENV, KEY)
    monkeypatch.delenv(DIGEST_KEY_FILE_ENV, raising=False)
    key_id = reload_digest_key()
    assert key_id is not None
    yield key_id
    monkeypatch.delenv(DIGEST_KEY_ENV)
    reload_digest_key()


@pytest.fixture
def unkeyed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(DIGEST_KEY_ENV, raising=False)
    monkeypatch.delenv(DIGEST_KEY_FILE_ENV, raising=False)
    assert reload_digest_key() is None
    yield
    reload_digest_key()


def _brute_force(digest: str, tenant: str, operation: str) -> str | None:
    """What an attacker holding the data does: try order-0 … order-99999 unkeyed."""
    for n in range(100_000):
        candidate = f"order-{n}"
        if idempotency_sha256(tenant, operation, candidate) == digest:
            return candidate
    return None


def test_unkeyed_digests_are_the_plain_sha256_and_a_guessable_key_is_recovered(
    unkeyed: None,
) -> None:
    digest = idempotency_digest("acme", "pay", "order-42")
    assert digest == hashlib.sha256(_framed("acme", "pay", "order-42")).hexdigest()
    assert digest == idempotency_sha256("acme", "pay", "order-42")
    assert request_digest({"a": [1, 2]}) == request_sha256({"a": [1, 2]})
    assert digest_key_id() is None
    assert _brute_force(digest, "acme", "pay") == "order-42"  # why a key is needed


def test_keyed_digests_are_hmac_under_the_key_and_resist_guessing(keyed: str) -> None:
    digest = idempotency_digest("acme", "pay", "order-42")
    expected = hmac.new(KEY.encode(), _framed("acme", "pay", "order-42"), "sha256").hexdigest()
    assert digest == expected
    assert digest != idempotency_sha256("acme", "pay", "order-42")
    assert _brute_force(digest, "acme", "pay") is None
    payload_message = b"retryscope/logical-request/v1\x00" + b'{"a":[1,2]}'
    assert (
        request_digest({"a": [1, 2]})
        == hmac.new(KEY.encode(), payload_message, "sha256").hexdigest()
    )
    # content digests (policies, receipts) never depend on the key
    assert request_sha256({"a": [1, 2]}) == hashlib.sha256(payload_message).hexdigest()
    assert keyed == hashlib.sha256(b"retryscope/digest-key-id/v1" + KEY.encode()).hexdigest()[:16]
    assert KEY not in keyed
    assert KEY not in repr(load_digest_key())


def test_key_configuration_is_checked(tmp_path: Path) -> None:
    key_file = tmp_path / "digest.key"
    key_file.write_text(KEY + "\n")
    from_file = load_digest_key({DIGEST_KEY_FILE_ENV: str(key_file)})
    from_env = load_digest_key({DIGEST_KEY_ENV: KEY})
    assert from_file is not None
    assert from_env is not None
    assert from_file.key_id == from_env.key_id  # the same key however it is given
    assert load_digest_key({}) is None
    for environ, message in (
        ({DIGEST_KEY_ENV: "short"}, "at least 16 bytes"),
        ({DIGEST_KEY_ENV: KEY, DIGEST_KEY_FILE_ENV: str(key_file)}, "not both"),
        ({DIGEST_KEY_FILE_ENV: str(tmp_path / "missing")}, "RETRYSCOPE_DIGEST_KEY_FILE="),
    ):
        with pytest.raises(DigestKeyError, match=message):
            load_digest_key(environ)


WRITER = r"""
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
import retryscope
from retryscope.instrumentation import AttemptStampingProcessor, ParquetSpanExporter
from retryscope.control import _lab

out, carrier_out = sys.argv[1], sys.argv[2]
exporter = ParquetSpanExporter(out)
provider = TracerProvider()
provider.add_span_processor(AttemptStampingProcessor())
provider.add_span_processor(SimpleSpanProcessor(exporter))
carrier = {}
for n in range(3):
    with retryscope.logical_request(operation="pay", tenant="acme", idempotency_key=f"order-{n}",
                                    request={"n": n}, tracer_provider=provider) as req:
        with req.attempt("primary"):
            retryscope.inject(carrier)
provider.shutdown()
json.dump({"carrier": carrier, "lab": [_lab.REQUEST, _lab.IDEMPOTENCY]}, open(carrier_out, "w"))
"""


def _write(tmp_path: Path, name: str, env: dict[str, str]) -> tuple[Path, dict[str, object]]:
    """Run a writer process under ``env`` (a real process: the key comes from its
    environment); its data directory and what it printed."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    out, printed = tmp_path / name, tmp_path / f"{name}.json"
    clean = {k: v for k, v in os.environ.items() if k not in (DIGEST_KEY_ENV, DIGEST_KEY_FILE_ENV)}
    done = subprocess.run(
        [sys.executable, str(script), str(out), str(printed)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(printed.read_text())
    result["stderr"] = done.stderr
    return out, result


def _request_digests(root: Path) -> set[tuple[str, str | None]]:
    pairs = set()
    for f in visible_files(root):
        for row in pq.read_table(f, columns=["span_role", "idempotency_digest"]).to_pylist():
            if row["span_role"] == "logical_request":
                pairs.add(row["idempotency_digest"])
    return pairs


def test_processes_sharing_a_key_join_and_the_report_tells_keyed_from_unkeyed(
    tmp_path: Path, unkeyed: None
) -> None:
    a, run_a = _write(tmp_path, "a", {DIGEST_KEY_ENV: KEY})
    b, _run_b = _write(tmp_path, "b", {DIGEST_KEY_ENV: KEY})
    other, run_other = _write(tmp_path, "other", {DIGEST_KEY_ENV: OTHER_KEY})
    plain, run_plain = _write(tmp_path, "plain", {})
    assert _request_digests(a) == _request_digests(b)  # the same key: digests join
    assert not _request_digests(a) & _request_digests(other)
    assert not _request_digests(a) & _request_digests(plain)
    # the policy-pinned hashes of the lab never change with a key
    assert run_a["lab"] == run_plain["lab"] == run_other["lab"]
    # one warning per unkeyed process, none with a key
    assert str(run_plain["stderr"]).count("no digest key") == 1
    assert "no digest key" not in str(run_a["stderr"])

    con, _ = connect(a)
    digests = build_report(con)["digests"]
    assert digests == {"keyed_requests": 3, "unkeyed_requests": 0, "key_ids": 1}
    con, _ = connect(plain)
    report = build_report(con)
    assert report["digests"] == {"keyed_requests": 0, "unkeyed_requests": 3, "key_ids": 0}
    assert "UNKEYED requests" in format_text(report)
    mixed = tmp_path / "mixed"
    for source in (a, other):
        shutil.copytree(source, mixed / source.name)
    con, _ = connect(mixed)
    report = build_report(con)
    assert report["digests"]["key_ids"] == 2
    assert "digests do not join" in format_text(report)
    # a second delivery of a's spans: each copy the data set holds counts, with the model
    # in memory and through a model cache (where the counts come from per partition)
    shutil.copytree(a, mixed / "again")
    for cache in (None, tmp_path / "model-cache"):
        con, _ = connect(mixed, model_cache=cache)
        assert build_report(con)["digests"] == {
            "keyed_requests": 9,
            "unkeyed_requests": 0,
            "key_ids": 2,
        }


def test_a_continuation_keeps_the_key_id_of_the_request_it_continues(
    tmp_path: Path, unkeyed: None
) -> None:
    _, run = _write(tmp_path, "origin", {DIGEST_KEY_ENV: KEY})
    carrier = run["carrier"]
    assert isinstance(carrier, dict)
    with audit(tmp_path / "consumer") as pipeline:  # this process has no key
        with (
            retryscope.extract(carrier, tracer_provider=pipeline.provider) as req,
            req.attempt("worker", layer="queue"),
        ):
            pass
        pipeline.close()
    rows = [
        row
        for f in visible_files(tmp_path / "consumer")
        for row in pq.read_table(f, columns=["span_role", "attributes"]).to_pylist()
        if row["span_role"] == "continuation"
    ]
    expected = load_digest_key({DIGEST_KEY_ENV: KEY})
    assert expected is not None
    assert [dict(r["attributes"])["retryscope.digest.key_id"] for r in rows] == [
        json.dumps(expected.key_id)
    ]
