"""Fork safety: objects that own locks or threads reset them in a forked child.

``fork()`` copies only the calling thread. A lock another thread held at that moment stays
held forever in the child, and the first ``span.end()`` that needs it hangs (gunicorn and
celery prefork workers fork a process that already records spans). Every lock and thread of
the processors, the batch queue, the exporter and the process-wide registries is therefore
re-created in the child by a handler registered here; the handler holds its object weakly,
so registering never keeps an object alive (``os.register_at_fork`` handlers cannot be
removed). :func:`at_fork` registers the hooks, each contained.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from typing import Any

_log = logging.getLogger(__name__)


def reset_in_child(method: Callable[[], Any]) -> None:
    """Call the bound ``method`` in every forked child while its object is alive."""
    ref = weakref.WeakMethod(method)

    def after_in_child() -> None:
        bound = ref()
        if bound is not None:
            bound()

    at_fork(after_in_child=after_in_child)


def at_fork(
    *,
    before: Callable[[], Any] | None = None,
    after_in_parent: Callable[[], Any] | None = None,
    after_in_child: Callable[[], Any] | None = None,
) -> None:
    """``os.register_at_fork`` with each call contained: a failing one is logged and never
    fails the fork."""
    if not hasattr(os, "register_at_fork"):
        return
    os.register_at_fork(
        **{
            name: _contained(name, hook)
            for name, hook in (
                ("before", before),
                ("after_in_parent", after_in_parent),
                ("after_in_child", after_in_child),
            )
            if hook is not None
        }
    )


def _contained(when: str, hook: Callable[[], Any]) -> Callable[[], None]:
    def call() -> None:
        try:
            hook()
        except Exception:  # a failed hook must not fail the fork
            _log.exception("retryscope: %s %r at a fork failed", when, hook)

    return call
