"""LiteLLM integration: each deployment attempt of a Router carries its deployment.

The LiteLLM Router retries and falls back across deployments itself (and sets the OpenAI
SDK's ``max_retries`` to 0 beneath it), so without this every send carries the harness
attempt's route, the fallback rate reads 0 and boundary checks cannot be audited.
:class:`DeploymentLogger` is a LiteLLM ``CustomLogger``: its ``log_pre_api_call`` runs in
the caller's context just before each deployment's send and sets the :data:`DISPATCH` in
force, so the send recorded by the httpx integration (LiteLLM sends through httpx clients,
aiohttp transport included) carries

* the deployment as its route (``model_info.id``), its model as the route release, the
  fallback depth as the route priority (``is_fallback`` on a fallback hop), the model group
  and the ``api_base`` host;
* LiteLLM's ``litellm_trace_id`` (one per logical call) as the call key, so the router's
  retries and fallbacks are resends of one operation by layer ``adapter``, while the SDK's
  own retries (direct ``litellm.completion`` calls keep them) stay layer ``sdk``.

Only sends to the deployment's ``api_base`` take its identity. ``route_attributes`` maps a
deployment id to further attributes of its route (e.g.
``retryscope.route.data_boundary``) for the fallback checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from litellm.integrations.custom_logger import CustomLogger
from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope.instrumentation.integrations._send import DISPATCH, Dispatch

RouteAttributes = Callable[[str], Mapping[str, AttributeValue]]
"""Further attributes of the route a deployment id names."""


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def dispatch_of(
    kwargs: Mapping[str, Any], route_attributes: RouteAttributes | None = None
) -> Dispatch | None:
    """The :class:`Dispatch` a LiteLLM call's logging kwargs describe (None: not a Router
    deployment and no model to name)."""
    params = kwargs.get("litellm_params") or {}
    meta = params.get("metadata") or {}
    info = params.get("model_info") or meta.get("model_info") or {}
    model = meta.get("deployment") or kwargs.get("model")
    deployment = info.get("id") or model
    if not isinstance(deployment, str):
        return None
    attrs: dict[str, AttributeValue] = {v.DEPLOYMENT_ID_KEY: deployment}
    if isinstance(model, str):
        attrs[v.DEPLOYMENT_MODEL_KEY] = model
    group = meta.get("model_group")
    if isinstance(group, str):
        attrs[v.DEPLOYMENT_GROUP_KEY] = group
    if route_attributes is not None:
        attrs.update(route_attributes(deployment))
    api_base = params.get("api_base") or meta.get("api_base")
    trace_id = kwargs.get("litellm_trace_id")
    fallbacks = _int(meta.get("attempted_fallbacks"))
    return Dispatch(
        route=deployment,
        route_release=model if isinstance(model, str) else None,
        route_priority=fallbacks,
        attributes=attrs,
        call_key=f"litellm:{trace_id}" if isinstance(trace_id, str) else None,
        retry_count=_int(meta.get("attempted_retries")) + fallbacks,
        url_prefix=str(api_base).rstrip("/") if api_base else None,
    )


class DeploymentLogger(CustomLogger):
    """Sets the dispatch of each LiteLLM deployment attempt for its sends."""

    def __init__(self, route_attributes: RouteAttributes | None = None) -> None:
        super().__init__()
        self._route_attributes = route_attributes

    def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        try:
            DISPATCH.set(dispatch_of(kwargs, self._route_attributes))
        except Exception:  # telemetry never breaks the call
            DISPATCH.set(None)

    def _clear(self, *args: Any, **kwargs: Any) -> None:
        DISPATCH.set(None)

    log_post_api_call = _clear
    log_success_event = _clear
    log_failure_event = _clear

    async def async_log_success_event(self, *args: Any, **kwargs: Any) -> None:
        DISPATCH.set(None)

    async def async_log_failure_event(self, *args: Any, **kwargs: Any) -> None:
        DISPATCH.set(None)


_LOGGER: Final[list[DeploymentLogger]] = []


def instrument(route_attributes: RouteAttributes | None = None) -> None:
    """Add a :class:`DeploymentLogger` to ``litellm.callbacks`` (once)."""
    import litellm

    if not _LOGGER:
        _LOGGER.append(DeploymentLogger(route_attributes))
    if _LOGGER[0] not in litellm.callbacks:
        litellm.callbacks.append(_LOGGER[0])


def uninstrument() -> None:
    """Remove it again."""
    import litellm

    for logger in _LOGGER:
        while logger in litellm.callbacks:
            litellm.callbacks.remove(logger)
    _LOGGER.clear()
