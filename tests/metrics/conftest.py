"""The client tests' fixtures (a real pipeline, a hit-counting server, the instrumentor)."""

from tests.clients.conftest import instrumented
from tests.instrumentation.conftest import audit, server

__all__ = ["audit", "instrumented", "server"]
