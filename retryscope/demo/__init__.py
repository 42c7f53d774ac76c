"""``retryscope demo``: simulated harness traffic through the real pipeline.

Real harness code (the control plane's controller, the httpx integration, the context API)
against a simulated provider on 127.0.0.1, on a virtual clock → Parquet → the DuckDB report
→ the Streamlit UI."""

from retryscope.demo._run import generate, run_demo

__all__ = ["generate", "run_demo"]
