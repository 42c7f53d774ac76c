"""Across processes the request is one tree: a harness (2 attempts) in this process calls a
gateway process (tests/clients/gateway_process.py) that retries its upstream, a
hit-counting server on 127.0.0.1 (3 tries, then 2). The gateway writes its own Parquet; the
report over both processes' data counts every hit once, nests the gateway's attempts under
the harness attempt that called it and multiplies 2 x 3, with no anomaly."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

import retryscope
from retryscope.analytics import findings
from tests.clients.conftest import seen
from tests.instrumentation.conftest import Audit, LocalServer, Reply

GATEWAY = Path(__file__).with_name("gateway_process.py")


@contextmanager
def gateway(out: Path, upstream: str, mode: str) -> Iterator[tuple[str, list[int]]]:
    """The gateway process's URL while it runs, and (once it stopped) how many requests
    it served."""
    proc = subprocess.Popen(
        [sys.executable, str(GATEWAY), str(out), upstream, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    served: list[int] = []
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1/chat", served
    finally:
        proc.stdin.close()
        served.append(int(proc.stdout.readline()))
        assert proc.wait(timeout=30) == 0


def harness(audit: Audit, url: str, *, carry: bool) -> str:
    """Two harness attempts through the gateway (the second after a 502), the retryscope
    carrier injected in each when ``carry``; the request id."""
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        httpx.Client() as client,
    ):
        for _ in range(2):
            with req.attempt("call", layer="harness") as attempt:
                headers: dict[str, str] = {}
                if carry:
                    assert retryscope.inject(headers)
                if client.post(url, headers=headers, content=b'{"q":1}').status_code == 200:
                    break
                attempt.set_outcome("unavailable")
    return req.id


def test_a_gateway_process_continuing_the_request_is_one_tree(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    server.reply = lambda _r: Reply(503) if len(server.requests) <= 4 else Reply(200)
    with gateway(audit.directory / "gateway", server.url, "extract") as (url, served):
        request_id = harness(audit, url, carry=True)
    hits = served[0] + len(server.requests)
    assert (served[0], len(server.requests)) == (2, 5)
    got = seen(audit, request_id)
    assert got.report["logical_requests"] == 1
    assert got.report["receiver_attempts"] == hits == 7
    assert got.retried_layers == ["harness", "adapter"]
    assert got.report["amplification"]["max_nested_multiplication"] == 6
    con = audit.connect()
    rules = findings(con).column("rule_id").to_pylist()
    assert "telemetry_anomaly" not in rules
    assert "nested_retry_owners" in rules
    # the gateway's adapter tries, in two continuations, under the harness attempt that
    # called it (in the other process); its sends under its own adapter tries
    continued = con.execute(
        "SELECT layer, attempt_ordinal, parent_layer, parent_attempt_ordinal, "
        "parent_continuation IS NOT DISTINCT FROM continuation, "
        "dense_rank() OVER (ORDER BY continuation) FROM attempts "
        "WHERE continuation IS NOT NULL ORDER BY start_time"
    ).fetchall()
    assert [r[:4] for r in continued] == [
        ("adapter", 1, "harness", 1),
        ("transport", 1, "adapter", 1),
        ("adapter", 2, "harness", 1),
        ("transport", 2, "adapter", 2),
        ("adapter", 3, "harness", 1),
        ("transport", 3, "adapter", 3),
        ("adapter", 1, "harness", 2),
        ("transport", 2, "adapter", 1),
        ("adapter", 2, "harness", 2),
        ("transport", 3, "adapter", 2),
    ]
    assert [r[4] for r in continued] == [False, True] * 5  # harness: the origin's
    assert [r[5] for r in continued] in ([1] * 6 + [2] * 4, [2] * 6 + [1] * 4)
    assert con.execute("SELECT count(DISTINCT trace_id) FROM spans").fetchone() == (1,)
