"""tenacity and stamina around httpx/httpx2 ``raise_for_status()``: the response arrived,
so the outcome is its status, and a Retry-After the retry library ignores is flagged."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import httpx2
import pytest
import stamina
import tenacity

import retryscope
from retryscope.analytics import findings
from retryscope.instrumentation.integrations.stamina import retry as stamina_retry
from retryscope.instrumentation.integrations.tenacity import instrument
from tests.clients.conftest import seen
from tests.instrumentation.conftest import Audit, LocalServer, Reply

STATUS_ERRORS = (httpx.HTTPStatusError, httpx2.HTTPStatusError)


def _script(server: LocalServer, *replies: Reply) -> None:
    it = iter(replies)
    server.reply = lambda _r: next(it)


@pytest.fixture(params=["httpx", "httpx2"])
def client(request: pytest.FixtureRequest, server: LocalServer) -> Iterator[object]:
    lib = httpx if request.param == "httpx" else httpx2
    with lib.Client(base_url=server.url) as c:
        yield c


def _retrying(attempts: int, wait_s: float) -> object:
    """A tenacity loop retrying status errors of both libraries, its tries recorded."""
    return instrument(
        tenacity.Retrying(
            stop=tenacity.stop_after_attempt(attempts),
            wait=tenacity.wait_fixed(wait_s),
            retry=tenacity.retry_if_exception_type(STATUS_ERRORS),
        ),
        route="primary",
    )


def _get(client: object) -> str:
    response = client.get("/v1")  # type: ignore[attr-defined]
    response.raise_for_status()
    return str(response.text)


def test_tenacity_status_errors_are_classified_and_counted(
    audit: Audit, server: LocalServer, instrumented: object, client: object
) -> None:
    _script(server, Reply(503), Reply(429, (("Retry-After", "0"),)), Reply(200, body=b"done"))
    retrying = _retrying(3, 0.005)
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider):
        assert retrying(_get, client) == "done"  # type: ignore[operator]
    got = seen(audit)
    assert len(server.requests) == 3 == got.report["receiver_attempts"]
    assert audit.rows(
        "SELECT outcome_kind, http_status_code FROM attempts WHERE layer = 'adapter' "
        "ORDER BY attempt_ordinal"
    ) == [("unavailable", 503), ("rate_limited", 429), (None, None)]
    assert got.retried_layers == ["adapter"]
    assert got.report["terminals"] == {"complete": 1}
    assert got.report["violations"]["unreconciled_retry_after_indeterminate"] == 0
    # the transport rows agree with the attempt rows above them
    assert [(parent, status) for parent, _o, _r, status, *_ in got.sends] == [
        (1, 503),
        (2, 429),
        (3, 200),
    ]


def test_a_retry_after_the_retry_library_ignores_is_flagged(
    audit: Audit, server: LocalServer, instrumented: object, client: object
) -> None:
    """A 429 with ``Retry-After: 2`` retried by tenacity after 5 ms: the retry started
    before the earliest start the server asked for."""
    _script(server, Reply(429, (("Retry-After", "2"),)), Reply(200, body=b"done"))
    retrying = _retrying(2, 0.005)
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        retrying(_get, client)  # type: ignore[operator]
    con = audit.connect()
    ignored = findings(con, rule="not_before_ignored").to_pylist()
    assert [f["logical_request_id"] for f in ignored] == [req.id]
    assert '"layer":"adapter"' in ignored[0]["evidence"].replace(" ", "")


def test_a_retry_after_that_was_honoured_is_no_finding(
    audit: Audit, server: LocalServer, instrumented: object, client: object
) -> None:
    _script(server, Reply(429, (("Retry-After", "1"),)), Reply(200, body=b"done"))
    retrying = _retrying(2, 1.05)
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider):
        retrying(_get, client)  # type: ignore[operator]
    assert findings(audit.connect(), rule="not_before_ignored").num_rows == 0


def test_stamina_counts_and_classifies(
    audit: Audit, server: LocalServer, instrumented: object, client: object
) -> None:
    _script(server, Reply(503), Reply(503), Reply(200, body=b"done"))
    stamina.set_testing(False)

    @stamina_retry(on=STATUS_ERRORS, attempts=3, wait_initial=0.001, wait_max=0.002, route="p")
    def call() -> str:
        return _get(client)

    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider):
        assert call() == "done"
    got = seen(audit)
    assert len(server.requests) == 3 == got.report["receiver_attempts"]
    assert audit.rows(
        "SELECT outcome_kind FROM attempts WHERE layer = 'adapter' ORDER BY attempt_ordinal"
    ) == [("unavailable",), ("unavailable",), (None,)]
    assert got.report["violations"]["unreconciled_retry_after_indeterminate"] == 0
