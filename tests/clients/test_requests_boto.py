"""requests with urllib3's Retry, and boto3 in standard retry mode: the retries below the
contrib instrumentations, counted send by send."""

from __future__ import annotations

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError
from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

import retryscope
from retryscope.instrumentation import LowerLayerConfig, describe_client
from tests.clients.conftest import API_KEY, assert_private, seen
from tests.instrumentation.conftest import Audit, LocalServer, Reply

S3_503 = Reply(
    503,
    (("Content-Type", "application/xml"), ("Retry-After", "0")),
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>",
)
S3_OK = Reply(
    200,
    (("Content-Type", "application/xml"),),
    b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name>'
    b"<KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
    b"</ListBucketResult>",
)


def _session(total: int = 3) -> requests.Session:
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=Retry(total=total, status_forcelist=[503], backoff_factor=0))
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


@pytest.mark.parametrize("contrib", [False, True], ids=["plain", "requests-instrumented"])
def test_urllib3_retries_inside_one_requests_call(
    audit: Audit, server: LocalServer, instrumented: object, contrib: bool
) -> None:
    """Retry(total=3) against an always-503 server: 4 hits, 4 sends (the contrib requests
    span around them is a call), the resends attributed to the transport layer."""
    server.reply = lambda _r: Reply(503, (("Retry-After", "0"),), b"busy")
    session = _session()
    assert describe_client(session) == LowerLayerConfig(
        "transport", 3, None, "requests.sessions.Session"
    )
    if contrib:
        RequestsInstrumentor().instrument(tracer_provider=audit.provider)
    try:
        with retryscope.logical_request(operation="fetch", tracer_provider=audit.provider) as req:
            for _ in range(2):
                try:
                    with req.attempt("api", lower=describe_client(session)):
                        session.get(f"{server.url}/x", headers={"Authorization": API_KEY})
                except requests.exceptions.RetryError:
                    continue
    finally:
        if contrib:
            RequestsInstrumentor().uninstrument()
    got = seen(audit)
    assert len(server.requests) == 8
    assert got.report["receiver_attempts"] == 8
    assert [(p, op, resend) for p, op, resend, *_ in got.sends] == [
        (h, 1, n) for h in (1, 2) for n in range(4)
    ]
    assert {layer for *_, layer, _r, _f in got.sends if layer} == {"transport"}
    assert got.retried_layers == ["harness", "transport"]
    assert got.nested == 1
    calls = audit.rows("SELECT count(*) FROM spans WHERE span_role = 'call'")
    assert calls == [(2 if contrib else 0,)]
    assert_private(audit, server)


def test_one_retry_layer_alone_is_no_nesting(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    replies = iter([503, 503, 200])
    server.reply = lambda _r: Reply(next(replies), (), b"ok")
    with retryscope.logical_request(operation="fetch", tracer_provider=audit.provider) as req:
        with req.attempt("api"):
            assert _session().get(f"{server.url}/x").status_code == 200
    got = seen(audit)
    assert len(server.requests) == 3 == got.report["receiver_attempts"]
    assert got.retried_layers == ["transport"]
    assert got.nested == 0


def _s3(server: LocalServer, config: dict[str, object]) -> object:
    return boto3.client(
        "s3",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id="AKIDTESTKEY",
        aws_secret_access_key=API_KEY,
        config=Config(retries=config, s3={"addressing_style": "path"}),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("contrib", [False, True], ids=["plain", "botocore-instrumented"])
def test_boto3_standard_mode_sends(
    audit: Audit, server: LocalServer, instrumented: object, contrib: bool
) -> None:
    """``max_attempts=3`` means 3 retries: 4 sends, numbered by botocore's
    ``amz-sdk-request`` attempt; the botocore API span is a call."""
    server.reply = lambda _r: S3_503
    s3 = _s3(server, {"mode": "standard", "max_attempts": 3})
    lower = describe_client(s3)
    assert lower is not None
    assert (lower.layer, lower.max_retries) == ("sdk", 3)
    if contrib:
        BotocoreInstrumentor().instrument(tracer_provider=audit.provider)
    try:
        with retryscope.logical_request(operation="list", tracer_provider=audit.provider) as req:
            with pytest.raises(ClientError), req.attempt("s3", lower=lower):
                s3.list_objects_v2(Bucket="b")  # type: ignore[attr-defined]
    finally:
        if contrib:
            BotocoreInstrumentor().uninstrument()
    got = seen(audit)
    assert len(server.requests) == 4
    assert got.report["receiver_attempts"] == 4
    assert [(op, resend) for _p, op, resend, *_ in got.sends] == [(1, n) for n in range(4)]
    assert got.retried_layers == ["sdk"]
    assert audit.rows(
        "SELECT outcome_kind, http_status_code FROM attempts WHERE layer = 'harness'"
    ) == [("unavailable", 503)]
    calls = audit.rows("SELECT name FROM spans WHERE span_role = 'call'")
    assert calls == ([("S3.ListObjectsV2",)] if contrib else [])
    assert_private(audit, server)


def test_boto3_success_after_a_retry(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    replies = iter([S3_503, S3_OK])
    server.reply = lambda _r: next(replies)
    s3 = _s3(server, {"mode": "standard"})
    with retryscope.logical_request(operation="list", tracer_provider=audit.provider) as req:
        with req.attempt("s3"):
            s3.list_objects_v2(Bucket="b")  # type: ignore[attr-defined]
    got = seen(audit)
    assert len(server.requests) == 2 == got.report["receiver_attempts"]
    assert got.report["terminals"] == {"complete": 1}
