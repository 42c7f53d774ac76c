"""tenacity and stamina tries as attempts, against a real local server (sync and async)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import stamina
import tenacity

import retryscope
from retryscope.instrumentation.integrations.httpx import (
    AsyncRetryscopeTransport,
    RetryscopeTransport,
)
from retryscope.instrumentation.integrations.stamina import (
    install_hook,
    retryscope_hook,
    uninstall_hook,
)
from retryscope.instrumentation.integrations.stamina import retry as stamina_retry
from retryscope.instrumentation.integrations.stamina import retry_context as stamina_retry_context
from retryscope.instrumentation.integrations.tenacity import instrument
from tests.instrumentation.conftest import Audit, LocalServer, Recorded, Reply


def _fail_twice(server: LocalServer) -> None:
    def reply(_r: Recorded) -> Reply:
        return Reply(503) if len(server.requests) <= 2 else Reply(200, body=b"done")

    server.reply = reply


def _kind(exc: BaseException) -> str:
    return "unavailable" if isinstance(exc, httpx.HTTPStatusError) else "rejected"


def _check(audit: Audit, request_id: str, layer: str, sleeps_ms: list[int | None]) -> None:
    con = audit.connect()
    rows = con.execute(
        "SELECT a.attempt_ordinal, a.outcome_kind, a.backoff_delay_ms, "
        "a.attributes['retryscope.retry.caused_by'], t.parent_attempt_ordinal, t.http_status_code "
        "FROM attempts a JOIN attempts t ON t.parent_span_id = a.span_id "
        "WHERE a.logical_request_id = ? AND a.layer = ? AND t.layer = 'transport' "
        "ORDER BY a.attempt_ordinal",
        [request_id, layer],
    ).fetchall()
    assert [r[0] for r in rows] == [1, 2, 3]
    assert [r[1] for r in rows] == ["unavailable", "unavailable", None]
    assert [r[2] for r in rows] == sleeps_ms
    assert rows[0][3] is None
    assert rows[1][3] == '"httpx.HTTPStatusError"'
    assert [r[4] for r in rows] == [1, 2, 3]
    assert [r[5] for r in rows] == [503, 503, 200]
    assert audit.analysed(request_id)[0] == {layer: 3, "transport": 3}


def _get(client: httpx.Client) -> str:
    response = client.get("/v1")
    response.raise_for_status()
    return response.text


async def _aget(client: httpx.AsyncClient) -> str:
    response = await client.get("/v1")
    response.raise_for_status()
    return response.text


TENACITY_KW = {
    "stop": tenacity.stop_after_attempt(3),
    "wait": tenacity.wait_fixed(0.01),
    "retry": tenacity.retry_if_exception_type(httpx.HTTPStatusError),
}


@pytest.mark.parametrize("style", ["call", "wraps", "iterate"])
def test_tenacity_tries_are_attempts(audit: Audit, server: LocalServer, style: str) -> None:
    _fail_twice(server)
    slept: list[float] = []
    retrying = instrument(
        tenacity.Retrying(before_sleep=lambda s: slept.append(s.upcoming_sleep), **TENACITY_KW),
        route="primary",
        layer="adapter",
        classify=_kind,
    )
    client = httpx.Client(base_url=server.url, transport=RetryscopeTransport())
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        if style == "call":
            assert retrying(_get, client) == "done"
        elif style == "wraps":
            assert retrying.wraps(_get)(client) == "done"
        else:
            for attempt in retrying:
                with attempt:
                    assert _get(client) == "done"
    assert slept == [0.01, 0.01]  # the caller's own before_sleep still runs
    _check(audit, req.id, "adapter", [None, 10, 10])


def test_tenacity_async(audit: Audit, server: LocalServer) -> None:
    _fail_twice(server)

    async def before_sleep(_s: tenacity.RetryCallState) -> None:
        await asyncio.sleep(0)

    retrying = instrument(
        tenacity.AsyncRetrying(before_sleep=before_sleep, **TENACITY_KW),
        route="primary",
        layer="sdk",
        classify=_kind,
    )

    async def main() -> str:
        async with httpx.AsyncClient(
            base_url=server.url, transport=AsyncRetryscopeTransport()
        ) as client:
            with retryscope.logical_request(
                operation="chat", tracer_provider=audit.provider
            ) as req:
                assert await retrying.acall(_aget, client) == "done"
                return req.id

    _check(audit, asyncio.run(main()), "sdk", [None, 10, 10])


def test_tenacity_outside_a_logical_request_is_untouched(server: LocalServer) -> None:
    _fail_twice(server)
    retrying = instrument(tenacity.Retrying(**TENACITY_KW), route="primary")
    client = httpx.Client(base_url=server.url)
    assert retrying(_get, client) == "done"


STAMINA_KW: dict[str, Any] = {
    "on": httpx.HTTPStatusError,
    "attempts": 3,
    "wait_initial": 0.01,
    "wait_max": 0.01,
    "wait_jitter": 0,
    "route": "primary",
    "layer": "adapter",
    "classify": _kind,
}


@pytest.fixture
def stamina_hook() -> Iterator[None]:
    """Removes retryscope's stamina hook after the test (stamina's config is global)."""
    yield
    uninstall_hook()


def test_stamina_decorator_tries_are_attempts(
    audit: Audit, server: LocalServer, stamina_hook: None
) -> None:
    _fail_twice(server)
    client = httpx.Client(base_url=server.url, transport=RetryscopeTransport())

    @stamina_retry(**STAMINA_KW)
    def call() -> str:
        return _get(client)

    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        assert call() == "done"
    assert retryscope_hook in stamina.instrumentation.get_on_retry_hooks()
    _check(audit, req.id, "adapter", [None, 10, 10])
    waited = (
        audit.connect()
        .execute(
            "SELECT list(attributes['retryscope.backoff.waited_so_far_ms'] "
            "ORDER BY attempt_ordinal) FROM attempts WHERE layer = 'adapter'"
        )
        .fetchone()
    )
    assert waited == ([None, "0", "10"],)


def test_stamina_async_retry_context(audit: Audit, server: LocalServer, stamina_hook: None) -> None:
    _fail_twice(server)

    async def main() -> str:
        async with httpx.AsyncClient(
            base_url=server.url, transport=AsyncRetryscopeTransport()
        ) as client:
            with retryscope.logical_request(
                operation="chat", tracer_provider=audit.provider
            ) as req:
                async for attempt in stamina_retry_context(**STAMINA_KW):
                    with attempt:
                        await _aget(client)
                return req.id

    _check(audit, asyncio.run(main()), "adapter", [None, 10, 10])


def test_stamina_hook_install_is_idempotent_and_removable(stamina_hook: None) -> None:
    install_hook()
    install_hook()
    hooks = stamina.instrumentation.get_on_retry_hooks()
    assert hooks.count(retryscope_hook) == 1
    uninstall_hook()
    assert retryscope_hook not in stamina.instrumentation.get_on_retry_hooks()


def test_tenacity_threads_keep_their_own_backoff(audit: Audit, server: LocalServer) -> None:
    """Concurrent retry loops in threads: each try's backoff and sends stay in its request."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    server.reply = lambda r: Reply(503) if r.headers.get("x-try") != "3" else Reply(200)
    client = httpx.Client(base_url=server.url, transport=RetryscopeTransport())
    barrier = threading.Barrier(4)

    def run(i: int) -> str:
        retrying = instrument(
            tenacity.Retrying(
                stop=tenacity.stop_after_attempt(3),
                wait=tenacity.wait_fixed(0.01 * (i + 1)),
                retry=tenacity.retry_if_exception_type(httpx.HTTPStatusError),
            ),
            route=f"r{i}",
            classify=_kind,
        )
        barrier.wait()
        with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
            for attempt in retrying:
                with attempt:
                    n = attempt.retry_state.attempt_number
                    client.get("/v1", headers={"x-try": str(n)}).raise_for_status()
        return req.id

    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(run, range(4)))
    for i, request_id in enumerate(ids):
        rows = audit.rows(
            "SELECT list(attempt_ordinal ORDER BY attempt_ordinal), "
            "list(backoff_delay_ms ORDER BY attempt_ordinal), list(DISTINCT route_id) "
            f"FROM attempts WHERE layer = 'adapter' AND logical_request_id = '{request_id}'"
        )
        sleep = 10 * (i + 1)
        assert rows == [([1, 2, 3], [None, sleep, sleep], [f"r{i}"])]
        assert audit.rows(
            "SELECT count(*) FROM attempts WHERE layer = 'transport' "
            f"AND logical_request_id = '{request_id}'"
        ) == [(3,)]
