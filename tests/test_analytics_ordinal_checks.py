"""The ordinal checks of the model (model_checks.sql: gaps, ordinals out of order) against a
direct reading of their definitions, for any ordinals a writer may record: gaps, repeats,
zero and negative ordinals, ordinals beyond 64 (past the fast path's bitmask), layers of
one attempt, attempts numbered by continuations (each checked on its own)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from retryscope import vocabulary as v
from retryscope.analytics import connect, findings
from retryscope.instrumentation import ParquetSpanExporter
from tests.recorder import MS, T0

ORDINALS = st.lists(
    st.one_of(st.integers(-2, 8), st.integers(60, 70), st.integers(2**31 - 2, 2**31 - 1)),
    min_size=1,
    max_size=7,
)
LAYERS = st.dictionaries(
    st.tuples(
        st.sampled_from(("harness", "sdk", "transport")), st.sampled_from((None, "c1", "c2"))
    ),
    ORDINALS,
    min_size=1,
)
"""Per (layer, continuation): the ordinals written, in order (continuation None: the
request's own process)."""


def _gap(ordinals: list[int], continuation: str | None) -> bool:
    """The definition: the distinct ordinals are not exactly 1, 2, ..., max (distinct
    integers from 1 to max are all of them when there are max of them); a continuation's,
    numbered after its carrier's count, not exactly min, ..., max."""
    distinct = set(ordinals)
    first = min(distinct) if continuation is not None else 1
    return not (min(distinct) == first and len(distinct) == max(distinct) - first + 1)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(requests=st.lists(LAYERS, min_size=1, max_size=4))
def test_ordinal_checks_follow_their_definitions(
    tmp_path_factory: object, requests: list[dict[tuple[str, str | None], list[int]]]
) -> None:
    root = tmp_path_factory.mktemp("ordinals") / "data"  # type: ignore[attr-defined]
    exporter = ParquetSpanExporter(root)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("writer")
    clock = itertools.count(T0, MS)
    for i, layers in enumerate(requests):
        for (layer, continuation), ordinals in layers.items():
            for ordinal in ordinals:
                start = next(clock)
                attributes = {
                    v.SPAN_ROLE.key: "attempt",
                    v.LOGICAL_REQUEST_ID.key: f"r{i}",
                    v.LAYER.key: layer,
                    v.ATTEMPT_ORDINAL.key: ordinal,
                    v.ROUTE_ID.key: "p",
                }
                if continuation is not None:
                    attributes[v.CONTINUATION.key] = continuation
                span = tracer.start_span("attempt", attributes=attributes, start_time=start)
                span.end(end_time=start + MS // 2)
    provider.shutdown()
    con, _ = connect(root)
    got = sorted(
        (r["logical_request_id"], r["evidence"])
        for r in findings(con, rule="missing_ordinals").to_pylist()
    )
    expected = sorted(
        (f"r{i}", f'{{"layer":"{layer}","ordinals":[{",".join(map(str, sorted(ordinals)))}]}}')
        for i, layers in enumerate(requests)
        for (layer, continuation), ordinals in layers.items()
        if _gap(ordinals, continuation)
    )
    assert got == expected
    # attempts of a layer were written in list order: one numbered below the attempt
    # before it is out of order
    out_of_order = sorted(
        (r["logical_request_id"], e["layer"], e["attempt_ordinal"], e["previous_ordinal"])
        for r in findings(con, rule="telemetry_anomaly").to_pylist()
        if (e := json.loads(r["evidence"]))["problem"] == "ordinals_out_of_order"
    )
    assert out_of_order == sorted(
        (f"r{i}", layer, current, previous)
        for i, layers in enumerate(requests)
        for (layer, _), ordinals in layers.items()
        for previous, current in itertools.pairwise(ordinals)
        if previous > current
    )


def test_ordinals_beyond_the_bitmask(tmp_path: Path) -> None:
    """1..70 without a gap is no finding; 1..64 and 66 is one (65 is missing)."""
    test_ordinal_checks_follow_their_definitions.hypothesis.inner_test(  # type: ignore[attr-defined]
        _Factory(tmp_path),
        [{("harness", None): list(range(1, 71)), ("sdk", None): [*range(1, 65), 66]}],
    )


def test_continuations_number_their_attempts_apart(tmp_path: Path) -> None:
    """Two continuations numbering the same layer 1, 2, 3 and 1, 2 (a harness's two tries
    through one gateway): no gap, nothing out of order; a continuation running on from its
    carrier's count (2, 3) has no gap either, one with a hole (1, 3) has one (even when
    another continuation fills it), and the request's own process must still start at 1."""
    test_ordinal_checks_follow_their_definitions.hypothesis.inner_test(  # type: ignore[attr-defined]
        _Factory(tmp_path),
        [
            {("sdk", "c1"): [1, 2, 3], ("sdk", "c2"): [1, 2], ("harness", "c1"): [2, 3]},
            {("sdk", "c1"): [1, 3], ("harness", None): [2, 3]},
            {("sdk", "c1"): [1, 3], ("sdk", "c2"): [2]},  # together 1..3: still a hole
        ],
    )


class _Factory:
    def __init__(self, root: Path) -> None:
        self.root, self.n = root, 0

    def mktemp(self, name: str) -> Path:
        self.n += 1
        path = self.root / f"{name}{self.n}"
        path.mkdir()
        return path
