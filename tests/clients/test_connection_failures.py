"""A connection never made is ``unavailable`` whichever client raised it; one broken after
the request was sent stays of unknown acceptance.

Each real client library (and the SDKs that wrap them) against 127.0.0.1: a port bound but
not listening (the connection is refused), a server that reads the request and then closes
the connection or never answers, and TLS servers whose handshake fails (an untrusted
certificate, a handshake alert) or whose connection breaks after the request. Then the two
consumers: the RetryController falls back past a primary that refuses connections (and stops
when the primary dropped the connection after the send), and a harness retry after a refused
connection is no ``unreconciled_retry_after_indeterminate`` finding.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp  # a dependency of LiteLLM and aiobotocore (the dev extra), not of retryscope
import anthropic
import boto3
import httpx
import httpx2
import openai
import pytest
import requests
import urllib3
from botocore.config import Config

import retryscope
from retryscope.control import RetryController
from retryscope.control._lab import (
    IDEMPOTENCY_KEY,
    OPERATION,
    REQUEST_PAYLOAD,
    TENANT,
    reference_policy,
)
from retryscope.instrumentation._classify import classify_exception
from retryscope.vocabulary import OutcomeKind, Terminal
from tests.clients.conftest import API_KEY, OPENAI_CHAT, PROMPT, json_reply, seen
from tests.instrumentation.conftest import Audit, LocalServer

TIMEOUT = 0.3
LISTED = json.dumps(  # a list of models as the OpenAI and Anthropic SDKs parse it
    {"object": "list", "data": [], "has_more": False, "first_id": None, "last_id": None}
).encode()
UNAVAILABLE = OutcomeKind.UNAVAILABLE
UNKNOWN = OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE


# --- the receivers -------------------------------------------------------------------------------
@pytest.fixture
def refusing() -> Iterator[str]:
    """The URL of a port bound on 127.0.0.1 but not listening: every connect is refused
    (and no other process can take the port while the test runs)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@dataclass
class RawServer:
    """Accepts connections on 127.0.0.1 and does ``mode`` with each: ``close`` (read the
    request, close), ``hang`` (read the request, never answer), ``alert`` (answer the TLS
    ClientHello with a handshake_failure alert), ``tls-close`` (complete the TLS handshake,
    read the request, send a corrupt TLS record)."""

    mode: str
    tls: ssl.SSLContext | None = None
    received: list[bytes] = field(default_factory=list)
    url: str = ""
    _held: list[socket.socket] = field(default_factory=list)

    def serve(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            self._held.append(conn)
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            if self.mode == "alert":
                conn.recv(65536)
                conn.sendall(bytes([0x15, 3, 3, 0, 2, 2, 40]))  # fatal handshake_failure
            elif self.mode == "tls-close":
                assert self.tls is not None
                with self.tls.wrap_socket(conn, server_side=True) as tls:
                    self.received.append(tls.recv(65536))
                    # beneath the TLS layer, a record that cannot be decrypted
                    with socket.fromfd(tls.fileno(), socket.AF_INET, socket.SOCK_STREAM) as raw:
                        raw.sendall(b"\x17\x03\x03\x00\x05abcde")
                        time.sleep(TIMEOUT)  # the client reads it before the connection ends
            else:
                self.received.append(conn.recv(65536))
                if self.mode == "close":
                    conn.close()
        except (OSError, ssl.SSLError):
            pass


@contextmanager
def _raw_server(mode: str, tls: ssl.SSLContext | None = None) -> Iterator[RawServer]:
    server = RawServer(mode, tls)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        scheme = "https" if mode in ("alert", "tls-close") else "http"
        server.url = f"{scheme}://127.0.0.1:{sock.getsockname()[1]}/v1"
        threading.Thread(target=server.serve, args=(sock,), daemon=True).start()
        try:
            yield server
        finally:
            sock.shutdown(socket.SHUT_RDWR)  # ends the accept loop
            for conn in server._held:
                conn.close()


@pytest.fixture(params=["close", "hang"])
def after_send(request: pytest.FixtureRequest) -> Iterator[RawServer]:
    with _raw_server(request.param) as server:
        yield server


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A self-signed certificate for 127.0.0.1: no client trusts it by default."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    directory = tmp_path_factory.mktemp("tls")
    paths = Certificate(directory / "cert.pem", directory / "key.pem")
    paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@pytest.fixture
def untrusted(certificate: Certificate) -> Iterator[str]:
    """An HTTPS server whose certificate no client trusts: the handshake fails."""
    ctx = certificate.server_context()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)

        def serve() -> None:
            while True:
                try:
                    conn, _ = sock.accept()
                except OSError:
                    return
                try:
                    ctx.wrap_socket(conn, server_side=True).close()
                except (OSError, ssl.SSLError):
                    conn.close()

        threading.Thread(target=serve, daemon=True).start()
        yield f"https://127.0.0.1:{sock.getsockname()[1]}/v1"
        sock.shutdown(socket.SHUT_RDWR)


# --- the clients ---------------------------------------------------------------------------------
def _aiohttp_get(url: str) -> None:
    async def get() -> None:
        timeout = aiohttp.ClientTimeout(sock_connect=TIMEOUT, sock_read=TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(url) as response:
                await response.read()

    asyncio.run(get())


def _async_openai(url: str) -> None:
    async def call() -> None:
        client = openai.AsyncOpenAI(api_key=API_KEY, base_url=url, max_retries=0, timeout=TIMEOUT)
        await client.models.list()

    asyncio.run(call())


def _boto3(url: str) -> None:
    boto3.client(
        "s3",
        endpoint_url=url.removesuffix("/v1"),
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret-key-example",
        config=Config(
            retries={"total_max_attempts": 1}, connect_timeout=TIMEOUT, read_timeout=TIMEOUT
        ),
    ).list_buckets()


CLIENTS: dict[str, Callable[[str], object]] = {
    "httpx": lambda url: httpx.get(url, timeout=TIMEOUT),
    "httpx2": lambda url: httpx2.get(url, timeout=TIMEOUT),
    "requests": lambda url: requests.get(url, timeout=TIMEOUT),
    "urllib3": lambda url: urllib3.PoolManager().request("GET", url, timeout=TIMEOUT),
    "aiohttp": _aiohttp_get,
    "openai": lambda url: openai.OpenAI(
        api_key=API_KEY, base_url=url, max_retries=0, timeout=TIMEOUT
    ).models.list(),
    "openai-async": _async_openai,
    "anthropic": lambda url: anthropic.Anthropic(
        api_key=API_KEY, base_url=url, max_retries=0, timeout=TIMEOUT
    ).models.list(),
    "boto3": _boto3,
}


def _raised(client: str, url: str) -> BaseException:
    try:
        CLIENTS[client](url)
    except Exception as exc:
        return exc
    raise AssertionError(f"{client} got an answer from {url}")


# --- the rule, with each library -----------------------------------------------------------------
@pytest.mark.parametrize("client", CLIENTS)
def test_a_refused_connection_is_unavailable(client: str, refusing: str) -> None:
    """Nothing was sent: whatever the library (and whatever SDK wrapped its error), the
    request cannot have been accepted."""
    assert classify_exception(_raised(client, refusing)) is UNAVAILABLE


@pytest.mark.parametrize("client", CLIENTS)
def test_a_connection_broken_after_the_send_stays_unknown(
    client: str, after_send: RawServer
) -> None:
    """The server read the request, then closed the connection or never answered: the
    provider may have accepted it."""
    exc = _raised(client, after_send.url)
    assert after_send.received  # the request did arrive
    assert after_send.received[0]
    assert classify_exception(exc) is UNKNOWN


@pytest.mark.parametrize("client", CLIENTS)
def test_a_tls_handshake_refusing_the_certificate_is_unavailable(
    client: str, untrusted: str
) -> None:
    assert classify_exception(_raised(client, untrusted)) is UNAVAILABLE


@pytest.mark.parametrize("client", ["httpx", "requests", "aiohttp", "openai"])
def test_a_tls_handshake_alert_is_unavailable(client: str) -> None:
    """A handshake the server ends with an alert (no certificate involved): urllib3 wraps
    it like any TLS error; where it was raised (the handshake) says nothing was sent."""
    with _raw_server("alert") as server:
        assert classify_exception(_raised(client, server.url)) is UNAVAILABLE


def test_a_tls_error_after_the_request_stays_unknown(certificate: Certificate) -> None:
    """The handshake succeeded and the request was read; then a record that cannot be
    decrypted: the same urllib3 SSLError as a failed handshake, but raised while reading."""
    with _raw_server("tls-close", certificate.server_context()) as server:
        with pytest.raises(requests.exceptions.SSLError) as caught:
            requests.get(server.url, timeout=TIMEOUT, verify=str(certificate.cert))
        assert server.received
        assert server.received[0].startswith(b"GET /v1")
        assert classify_exception(caught.value) is UNKNOWN


def test_a_name_not_resolved_is_unavailable() -> None:
    with pytest.raises(socket.gaierror) as caught:
        socket.getaddrinfo("localhost", "no-such-service-name")
    assert classify_exception(caught.value) is UNAVAILABLE


def test_an_error_raised_while_handling_a_refusal_is_not_taken_for_it(refusing: str) -> None:
    """Only what an error translates counts: one raised while handling a refusal (here no
    cached answer to fall back on) is not that refusal."""
    cache: dict[str, str] = {}

    def cached(url: str) -> str:
        try:
            return str(requests.get(url, timeout=TIMEOUT).text)
        except requests.ConnectionError:
            return cache[url]

    def translated(url: str) -> str:
        try:
            return str(requests.get(url, timeout=TIMEOUT).text)
        except requests.ConnectionError as exc:
            raise RuntimeError("primary down") from exc  # an explicit translation: followed

    with pytest.raises(KeyError) as caught:
        cached(refusing)
    assert isinstance(caught.value.__context__, requests.ConnectionError)
    assert classify_exception(caught.value) is UNKNOWN
    with pytest.raises(RuntimeError) as wrapped:
        translated(refusing)
    assert classify_exception(wrapped.value) is UNAVAILABLE


# --- the consumers -------------------------------------------------------------------------------
def _controller(audit: Audit) -> RetryController:
    return RetryController(
        replace(reference_policy(), base_backoff_ms=1), tracer_provider=audit.provider
    )


def _run(audit: Audit, primary: str, fallback: str) -> tuple[Any, list[str]]:
    routes: list[str] = []

    def call(d: Any) -> str:
        routes.append(d.route.route_id)
        url = primary if d.route.route_id == "private-primary" else fallback
        client = openai.OpenAI(api_key=API_KEY, base_url=url, max_retries=0, timeout=TIMEOUT)
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}]
        )
        return str(reply.choices[0].message.content)

    result = _controller(audit).run(
        call,
        request=REQUEST_PAYLOAD,
        idempotency_key=IDEMPOTENCY_KEY,
        operation=OPERATION,
        tenant=TENANT,
        deadline_ms=time.time_ns() // 1_000_000 + 30_000,
    )
    return result, routes


def test_the_controller_falls_back_past_a_primary_that_refuses_connections(
    audit: Audit, server: LocalServer, refusing: str
) -> None:
    server.reply = lambda _r: json_reply(200, OPENAI_CHAT)
    result, routes = _run(audit, refusing, f"{server.url}/v1")
    assert (result.terminal, result.value) == (Terminal.COMPLETE, "hello")
    assert routes == ["private-primary", "private-primary", "external-fallback"]
    assert len(server.requests) == 1
    report = seen(audit).report
    assert report["terminals"] == {"complete": 1}
    assert report["violations"]["unreconciled_retry_after_indeterminate"] == 0


def test_the_controller_stops_when_the_primary_dropped_the_connection_after_the_send(
    audit: Audit, server: LocalServer, after_send: RawServer
) -> None:
    result, routes = _run(audit, after_send.url, f"{server.url}/v1")
    assert result.terminal is Terminal.STOP_INDETERMINATE
    assert routes == ["private-primary"]
    assert server.requests == []


@pytest.mark.parametrize("client", ["openai", "anthropic", "requests"])
def test_a_harness_retry_after_a_refused_connection_is_no_finding(
    audit: Audit, server: LocalServer, refusing: str, client: str
) -> None:
    """Two harness attempts against a primary that refuses, a third against a live one:
    the failures are unavailable and no retry needs a reconciliation."""
    server.reply = lambda _r: json_reply(200, LISTED)
    with retryscope.logical_request(
        operation="chat", idempotency_key="order-7", tracer_provider=audit.provider
    ) as req:
        for url in (refusing, refusing, f"{server.url}/v1"):
            try:
                with req.attempt("primary" if url == refusing else "secondary"):
                    CLIENTS[client](url)
            except Exception:
                continue
            break
    got = seen(audit, req.id)
    assert audit.rows(
        "SELECT outcome_kind FROM attempts WHERE layer = 'harness' ORDER BY attempt_ordinal"
    ) == [("unavailable",), ("unavailable",), (None,)]
    assert got.report["violations"]["unreconciled_retry_after_indeterminate"] == 0


def test_a_harness_retry_after_a_connection_dropped_after_the_send_is_a_finding(
    audit: Audit, server: LocalServer
) -> None:
    server.reply = lambda _r: json_reply(200, LISTED)
    with _raw_server("close") as dropping:
        with retryscope.logical_request(
            operation="chat", idempotency_key="order-7", tracer_provider=audit.provider
        ) as req:
            for url in (dropping.url, f"{server.url}/v1"):
                try:
                    with req.attempt("primary"):
                        CLIENTS["openai"](url)
                except openai.APIConnectionError:
                    continue
                break
    got = seen(audit, req.id)
    assert got.report["violations"]["unreconciled_retry_after_indeterminate"] == 1
