"""The audit model: the per-request tables every metric and finding reads, built once per
data set (in request partitions when it is large for the memory limit) and kept in a model
cache file so later runs attach it instead of building it again."""

from retryscope.analytics.model._cache import MODEL_TABLES, ModelCache, model_cache

__all__ = ["MODEL_TABLES", "ModelCache", "model_cache"]
