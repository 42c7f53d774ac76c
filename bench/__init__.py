"""retryscope benchmarks and the performance budget: ``python -m bench`` (``make bench``)."""
