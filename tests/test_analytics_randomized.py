"""The SQL against a direct Python computation on a few thousand generated requests.

Requests go through the real context API, stamping processor and Parquet exporter with
random retry structure: harness retries and fallbacks, transport resends recorded as marked
attempts or as unmarked HTTP client spans, costs with known or unknown usage, terminals.
The generator keeps its own ledger; the analytics must agree with it exactly.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from retryscope.analytics import (
    amplification,
    cost,
    deadline,
    fallback,
    retry_effectiveness,
)
from tests.recorder import MS, T0, Clock, Recorder

RETRYABLE = ("rate_limited", "unavailable", "timeout_before_response")


@dataclass
class Ledger:
    requests: int = 0
    physical: int = 0
    harness: int = 0
    receiver: int = 0
    hidden: int = 0
    max_receiver: int = 0
    nested: int = 0
    max_product: int = 0
    total_cost: int = 0
    accepted_cost: int = 0
    with_fallback: int = 0
    fallback_successes: int = 0
    deadline_exhausted: int = 0
    retries: Counter[tuple[str, str]] = field(default_factory=Counter)
    retry_successes: Counter[tuple[str, str]] = field(default_factory=Counter)


def _generate(rec: Recorder, n: int, seed: int, *, starts: Sequence[int] | None = None) -> Ledger:
    """``n`` requests starting 37 ms apart from T0 (or at ``starts``, ns)."""
    rng = random.Random(seed)
    led = Ledger()
    for i in range(n):
        clock = Clock(T0 + i * 37 * MS if starts is None else starts[i])
        h = rng.randint(1, 3)
        succeeds = rng.random() < 0.8
        led.requests += 1
        led.harness += h
        led.physical += h
        receiver, max_k = 0, 1
        harness_kinds: list[str] = []
        with rec.request(clock, tenant=rng.choice(("a", "b"))) as req:
            for j in range(h):
                last = j == h - 1
                ok = last and succeeds
                kind = "success" if ok else rng.choice(RETRYABLE)
                priority = 1 if j == 2 else 0
                route = "fallback" if priority else "primary"
                reserved = rng.randint(100, 1000)
                actual = rng.choice((None, rng.randint(0, reserved)))
                style = rng.choices(("none", "marked", "http"), (5, 3, 2))[0]
                k = rng.randint(1, 3) if style != "none" else 0
                with req.attempt(route, route_priority=priority) as a:
                    inner_kinds: list[str] = []
                    for t in range(k):
                        inner_ok = ok and t == k - 1
                        if style == "marked":
                            inner = "success" if inner_ok else rng.choice(RETRYABLE)
                            rec.attempt(
                                req,
                                route,
                                layer="transport",
                                priority=priority,
                                ms=rng.randint(1, 30),
                                outcome=inner,
                            )
                        else:
                            inner = "success" if inner_ok else "unavailable"
                            with rec.http_span(
                                clock, 200 if inner_ok else 503, ms=rng.randint(1, 30)
                            ):
                                pass
                        inner_kinds.append(inner)
                    clock.advance_ms(rng.randint(1, 50))
                    a.set_cost(reserved=reserved, actual=actual)
                    a.set_outcome(kind)
                    a.set_decision(
                        "complete" if ok else "stop" if last else "fallback" if j == 1 else "retry"
                    )
                clock.advance_ms(rng.randint(0, 200))
                attempt_cost = reserved if actual is None else actual
                led.total_cost += attempt_cost
                if ok:
                    led.accepted_cost += attempt_cost
                if j > 0:
                    led.retries["harness", harness_kinds[-1]] += 1
                    led.retry_successes["harness", harness_kinds[-1]] += ok
                for t in range(1, k):
                    led.retries["transport", inner_kinds[t - 1]] += 1
                    led.retry_successes["transport", inner_kinds[t - 1]] += (
                        inner_kinds[t] == "success"
                    )
                harness_kinds.append(kind)
                led.physical += k
                receiver += max(k, 1)
                max_k = max(max_k, k)
            if succeeds:
                req.set_terminal("complete")
            else:
                terminal = rng.choice(("stop_deadline", "stop_attempt_budget"))
                led.deadline_exhausted += terminal == "stop_deadline"
                req.set_terminal(terminal)
        led.receiver += receiver
        led.hidden += receiver - h
        led.max_receiver = max(led.max_receiver, receiver)
        if h > 1 and max_k > 1:
            led.nested += 1
            led.max_product = max(led.max_product, h * max_k)
        led.with_fallback += h == 3
        led.fallback_successes += h == 3 and succeeds
    return led


@pytest.mark.parametrize("seed", [1, 2])
def test_sql_matches_python_ledger(tmp_path: Path, seed: int) -> None:
    rec = Recorder(tmp_path / "data")
    led = _generate(rec, 1500, seed)
    con = rec.connect()

    amp = amplification(con).to_pylist()[0]
    assert amp["logical_requests"] == led.requests
    assert amp["physical_attempts"] == led.physical
    assert amp["harness_attempts"] == led.harness
    assert amp["receiver_attempts"] == led.receiver
    assert amp["hidden_attempts"] == led.hidden
    assert amp["max_attempts_per_request"] == led.max_receiver
    assert amp["nested_retry_requests"] == led.nested
    assert amp["max_nested_multiplication"] == led.max_product
    assert amp["amplification_ratio"] == pytest.approx(led.receiver / led.requests)

    c = cost(con).to_pylist()[0]
    assert (c["total_micros"], c["accepted_micros"]) == (led.total_cost, led.accepted_cost)
    assert c["wasted_micros"] == led.total_cost - led.accepted_cost

    fb = fallback(con).to_pylist()[0]
    assert (fb["requests_with_fallback"], fb["fallback_successes"]) == (
        led.with_fallback,
        led.fallback_successes,
    )
    assert deadline(con).to_pylist()[0]["deadline_exhausted"] == led.deadline_exhausted

    eff = {
        (r["layer"], r["after_kind"]): (r["retries"], r["successes"])
        for r in retry_effectiveness(con).to_pylist()
        if r["slice"] == "after_kind"
    }
    expected = {key: (n, led.retry_successes[key]) for key, n in led.retries.items()}
    assert eff == expected
