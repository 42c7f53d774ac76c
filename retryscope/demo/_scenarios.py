"""The demo's scenarios: real harness code against the simulated provider over real HTTP.

Every scenario but ``unsafe-fallback`` runs each logical request through the real
``RetryController`` (one reusable policy per scenario; the controller records the policy
document on each request span, so policy drift can be checked);
every HTTP send goes through ``RetryscopeTransport`` (a transport attempt per send). Time is
virtual: the controller's clock and sleep, and the provider's service time (its
``x-demo-latency-ms`` header, applied by :class:`VirtualLatencyTransport`), advance a
:class:`VirtualClock`, so minutes of traffic take seconds while the HTTP stays real.

- ``healthy``: a jittered harness-owned policy, occasional 429 with Retry-After.
- ``outage-storm``: the primary fails fast for the middle of the run; bursts of requests
  retry after the same un-jittered backoff (synchronized retries, a retry storm), then
  fall back to the external route.
- ``nested-sdk``: a provider SDK that retries twice on its own under the harness (hidden
  transport attempts, nested retry owners, declared lower-layer retries).
- ``deadline-squeeze``: a tight deadline over slow failures: ``stop_deadline``, successes
  after the deadline, attempts dispatched with less time left than a call takes.
- ``unsafe-fallback``: a misconfigured harness that bypasses the controller: after the
  private primary fails (even non-retryably) it falls back to an external route of another
  capability contract and behavior class, while stamping the digest of its reviewed
  primary-only policy (boundary widening, capability mismatch, degraded fallback, route
  shopping, policy drift).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final

import httpx
from opentelemetry.sdk.trace import TracerProvider

from retryscope import vocabulary as v
from retryscope.analytics.replay import write_policy_side_file
from retryscope.canonical import sha256_hex
from retryscope.control import (
    CallResult,
    Dispatch,
    Jitter,
    RetryController,
    RetryPolicy,
    capability_sha256,
    policy_sha256,
    reference_policy,
)
from retryscope.demo._provider import SimulatedProvider
from retryscope.instrumentation import LowerLayerConfig, logical_request
from retryscope.instrumentation.integrations.httpx import RetryscopeTransport, send_outcome_kind
from retryscope.vocabulary import DataBoundary, Decision, Layer, Outcome, RetryOwner, Terminal

SCENARIOS: Final = ("healthy", "outage-storm", "nested-sdk", "deadline-squeeze", "unsafe-fallback")
_MS: Final = 1_000_000
START_NS: Final = 1_790_000_000_000_000_000  # 2026-09-21T13:46:40Z: fixed so runs compare
OPERATION: Final = "chat"


def _label(text: str) -> str:
    return sha256_hex(text.encode("utf-8"))


# The lab's prevalidated routes (same capability contract and behavior class), with the
# demo's budgets: three tries on the private primary, one on the external fallback.
LAB: Final = reference_policy()
CAPABILITY: Final = capability_sha256(LAB.capability)
CAPABILITY_NAME: Final = "incident-severity/json-schema/eu/v1"
BEHAVIOR: Final = LAB.behavior_class_sha256
BEHAVIOR_NAME: Final = "incident-severity-contract/v1"  # the lab's behavior class label
PRIMARY: Final = replace(LAB.routes[0], max_attempts=3, max_attempt_cost_micros=2_000)
FALLBACK: Final = replace(LAB.routes[1], max_attempts=1, max_attempt_cost_micros=12_000)
CLASS_NAMES: Final = {CAPABILITY: CAPABILITY_NAME, BEHAVIOR: BEHAVIOR_NAME}
"""The names the lab's routes record beside their capability and behavior class digests."""
OTHER_CAPABILITY_NAME: Final = "chat/free-text/v0"
OTHER_CAPABILITY: Final = _label("capability:" + OTHER_CAPABILITY_NAME)
OTHER_BEHAVIOR_NAME: Final = "generic-assistant/v0"
OTHER_BEHAVIOR: Final = _label("behavior:" + OTHER_BEHAVIOR_NAME)
UNVETTED: Final = "external-unvetted"
"""The unsafe-fallback scenario's route: external, another contract and behavior class."""
UNVETTED_RELEASE: Final = _label("release:external-unvetted/cheap-model/2026-08")


class VirtualClock:
    """A clock the simulation advances by hand (unix ns); ``sleep`` advances it too."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += int(ms * _MS)

    def sleep(self, seconds: float) -> None:
        self.advance_ms(seconds * 1000)


class VirtualLatencyTransport(httpx.BaseTransport):
    """Sends for real, then advances the current virtual clock by the provider's
    ``x-demo-latency-ms`` (so the transport attempt span lasts the simulated service time)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.clock = VirtualClock(START_NS)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        response.read()
        self.clock.advance_ms(float(response.headers.get("x-demo-latency-ms", "0")))
        return response

    def close(self) -> None:
        self.inner.close()


@dataclass
class World:
    """What every scenario drives: spans, the provider, one instrumented HTTP client."""

    tracer_provider: TracerProvider
    provider: SimulatedProvider
    out: Any  # Path of the data set (policy side files go there)
    seed: int
    latency: VirtualLatencyTransport
    client: httpx.Client

    @classmethod
    def open(
        cls, tracer_provider: TracerProvider, provider: SimulatedProvider, out: Any, seed: int
    ) -> World:
        latency = VirtualLatencyTransport()
        transport = RetryscopeTransport(latency)
        client = httpx.Client(transport=transport, timeout=10.0)
        return cls(tracer_provider, provider, out, seed, latency, client)

    def post(self, scenario: str, index: int, route: str, key: str) -> httpx.Response:
        return self.client.post(
            f"{self.provider.url}/{route}/v1/chat",
            json={"scenario": scenario, "index": index},
            headers={"idempotency-key": key},
        )


@dataclass(frozen=True, slots=True)
class Identity:
    """One logical request's identity, derived from the seed."""

    scenario: str
    index: int
    request_id: str
    tenant: str
    key: str
    payload: dict[str, Any]


def idempotency_key(number: int) -> str:
    """The raw idempotency key of the run's ``number``-th request (only its digest is
    recorded; it goes to the provider as the ``idempotency-key`` header)."""
    return f"demo-key-{number}"


def prompt_text(number: int) -> str:
    """The prompt of the run's ``number``-th request (only the request digest is recorded)."""
    return f"summarise ticket {number}"


def _identity(scenario: str, index: int, number: int, rng: random.Random) -> Identity:
    return Identity(
        scenario,
        index,
        uuid.UUID(int=rng.getrandbits(128), version=4).hex,
        rng.choice(("acme", "globex", "initech")),
        idempotency_key(number),
        {"scenario": scenario, "messages": [{"role": "user", "content": prompt_text(number)}]},
    )


def _policy(**changes: Any) -> RetryPolicy:
    """The lab's reference policy with the demo's routes and budgets (one per scenario,
    reused by all its requests)."""
    values: dict[str, Any] = {
        "max_retry_after_ms": 5_000,
        "max_total_cost_micros": 100_000,
        "routes": (PRIMARY, FALLBACK),
    }
    return replace(reference_policy(), **(values | changes))


def _result(response: httpx.Response) -> CallResult:
    """The controller's observation of one provider answer."""
    kind = send_outcome_kind(response, None, idempotent=True)  # the key makes it idempotent
    cost = int(response.headers.get("x-demo-cost-micros", "0"))
    hint = response.headers.get("retry-after-ms")
    if kind is None:
        return CallResult(value=response.json(), cost_actual_micros=cost, http_status=200)
    return CallResult(
        kind=kind,
        retry_after_ms=int(hint) if hint is not None else None,
        cost_actual_micros=cost,
        http_status=response.status_code,
    )


def _controlled(
    world: World,
    ident: Identity,
    clock: VirtualClock,
    policy: RetryPolicy,
    deadline_ns: int,
    call: Callable[[Dispatch], CallResult],
) -> Terminal:
    controller = RetryController(
        policy,
        clock=clock,
        sleep=clock.sleep,
        tracer_provider=world.tracer_provider,
        class_names=CLASS_NAMES,
    )
    return controller.run(
        call,
        request=ident.payload,
        idempotency_key=ident.key,
        operation=OPERATION,
        tenant=ident.tenant,
        logical_request_id=ident.request_id,
        deadline_ms=deadline_ns // _MS,
    ).terminal


def _direct_call(world: World, ident: Identity) -> Callable[[Dispatch], CallResult]:
    def call(d: Dispatch) -> CallResult:
        return _result(world.post(ident.scenario, ident.index, d.route.route_id, ident.key))

    return call


SDK_MAX_RETRIES: Final = 2
"""The simulated SDK's own retries (the OpenAI and Anthropic SDK default)."""


def _sdk_call(
    world: World, ident: Identity, clock: VirtualClock
) -> Callable[[Dispatch], CallResult]:
    """A provider SDK under the harness: it retries 429/5xx itself (exponential backoff,
    Retry-After honoured), and only its last answer reaches the harness."""

    def call(d: Dispatch) -> CallResult:
        d.attempt.declare_lower_layer(
            LowerLayerConfig(Layer.SDK, max_retries=SDK_MAX_RETRIES, source="demo-sdk")
        )
        for retry in range(SDK_MAX_RETRIES + 1):
            response = world.post(ident.scenario, ident.index, d.route.route_id, ident.key)
            if response.status_code not in (429, 500, 502, 503) or retry == SDK_MAX_RETRIES:
                break
            hint = response.headers.get("retry-after-ms")
            clock.advance_ms(int(hint) if hint else 500 * 2**retry)
        return _result(response)

    return call


def _unsafe(world: World, ident: Identity, clock: VirtualClock) -> None:
    """A hand-written harness loop that does not use the controller (so nothing validates
    its fallback): two tries on the private primary, then an unvetted external route."""
    reviewed = _policy(
        max_data_boundary=DataBoundary.PRIVATE_SERVICE, routes=(PRIMARY,), max_total_attempts=3
    )
    deadline_ns = clock.now + 9_000 * _MS
    write_policy_side_file(world.out, reviewed)  # no controller records it: a side file
    with logical_request(
        operation=OPERATION,
        tenant=ident.tenant,
        idempotency_key=ident.key,
        request=ident.payload,
        deadline=deadline_ns,
        retry_owner=RetryOwner.HARNESS,
        logical_request_id=ident.request_id,
        policy_digest=policy_sha256(reviewed),
        tracer_provider=world.tracer_provider,
        clock=clock,
        attributes={
            v.REQUIRED_CAPABILITY_DIGEST.key: CAPABILITY,
            v.REQUIRED_CAPABILITY_NAME.key: CAPABILITY_NAME,
            v.REQUIRED_BEHAVIOR_CLASS.key: BEHAVIOR,
            v.REQUIRED_BEHAVIOR_CLASS_NAME.key: BEHAVIOR_NAME,
            v.MAX_DATA_BOUNDARY.key: DataBoundary.PRIVATE_SERVICE.value,
        },
    ) as req:
        primary = (
            (PRIMARY.route_id, PRIMARY.route_release_sha256, 0),
            {
                v.ROUTE_CAPABILITY_DIGEST.key: CAPABILITY,
                v.ROUTE_CAPABILITY_NAME.key: CAPABILITY_NAME,
                v.ROUTE_BEHAVIOR_CLASS.key: BEHAVIOR,
                v.ROUTE_BEHAVIOR_CLASS_NAME.key: BEHAVIOR_NAME,
                v.ROUTE_DATA_BOUNDARY.key: DataBoundary.PRIVATE_SERVICE.value,
            },
        )
        unvetted = (
            (UNVETTED, UNVETTED_RELEASE, 1),
            {
                v.ROUTE_CAPABILITY_DIGEST.key: OTHER_CAPABILITY,
                v.ROUTE_CAPABILITY_NAME.key: OTHER_CAPABILITY_NAME,
                v.ROUTE_BEHAVIOR_CLASS.key: OTHER_BEHAVIOR,
                v.ROUTE_BEHAVIOR_CLASS_NAME.key: OTHER_BEHAVIOR_NAME,
                v.ROUTE_DATA_BOUNDARY.key: DataBoundary.EXTERNAL_PROVIDER.value,
            },
        )
        plan = [primary, primary, unvetted]
        delay = 0
        for i, ((route, release, priority), attributes) in enumerate(plan):
            with req.attempt(
                route,
                route_release=release,
                route_priority=priority,
                attributes=attributes,
            ) as attempt:
                if i:
                    attempt.set_backoff(delay_ms=delay, not_before=clock.now)
                result = _result(world.post(ident.scenario, ident.index, route, ident.key))
                attempt.set_cost(
                    reserved=12_000 if priority else 2_000, actual=result.cost_actual_micros
                )
                if result.kind is None:
                    attempt.set_outcome(Outcome.SUCCESS, http_status=result.http_status)
                    attempt.set_decision(Decision.COMPLETE)
                    req.set_terminal(Terminal.COMPLETE)
                    return
                attempt.set_outcome(result.kind, http_status=result.http_status)
                last = i == len(plan) - 1
                attempt.set_decision(
                    Decision.STOP if last else Decision.FALLBACK if i == 1 else Decision.RETRY
                )
            delay = 200  # a fixed pause: no Retry-After, no classification, no budget
            clock.advance_ms(delay)
        req.set_terminal(Terminal.STOP_ROUTE_EXHAUSTED)


def run_one(
    world: World,
    scenario: str,
    index: int,
    arrival_ns: int,
    rng: random.Random,
    *,
    number: int,
) -> None:
    """Simulate request ``index`` of ``scenario`` (the run's ``number``-th) at ``arrival_ns``."""
    ident = _identity(scenario, index, number, rng)
    clock = VirtualClock(arrival_ns)
    world.latency.clock = clock
    if scenario == "unsafe-fallback":
        _unsafe(world, ident, clock)
        return
    if scenario == "healthy":
        policy = _policy(jitter=Jitter("demo-scheduler/1", world.seed))
        call = _direct_call(world, ident)
        _controlled(world, ident, clock, policy, arrival_ns + 9_000 * _MS, call)
    elif scenario == "outage-storm":  # no jitter: everyone retries 200 ms after failing
        call = _direct_call(world, ident)
        _controlled(world, ident, clock, _policy(), arrival_ns + 9_000 * _MS, call)
    elif scenario == "nested-sdk":
        policy = _policy(routes=(PRIMARY,), max_total_attempts=3)
        call = _sdk_call(world, ident, clock)
        _controlled(world, ident, clock, policy, arrival_ns + 30_000 * _MS, call)
    elif scenario == "deadline-squeeze":
        call = _direct_call(world, ident)
        _controlled(world, ident, clock, _policy(), arrival_ns + 1_600 * _MS, call)
    else:
        raise ValueError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")


def arrivals(scenario: str, requests: int, start_ns: int, rng: random.Random) -> list[int]:
    """Arrival times: about one request a second; outage-storm in bursts of ten, 1 ms apart."""
    out: list[int] = []
    now = start_ns
    for i in range(requests):
        if scenario == "outage-storm":
            now = start_ns + (i // 10) * 2_000 * _MS + (i % 10) * _MS
        else:
            now += int(rng.expovariate(1.0) * 1_000 * _MS)
        out.append(now)
    return out
