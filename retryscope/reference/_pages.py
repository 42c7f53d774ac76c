"""The reference pages: their names, how each is rendered, and the staleness check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from retryscope.reference import _cli, _export_config, _findings, _metrics, _report, _schema
from retryscope.reference._markdown import REGENERATE


class ReferenceMismatch(ValueError):
    """The sources of a page disagree with one another; the message says how."""


@dataclass(frozen=True, slots=True)
class Page:
    """One generated page: its file name under ``docs/reference/`` and its renderer."""

    name: str
    render: Callable[[], str]


PAGES: Final[tuple[Page, ...]] = (
    Page("schema.md", _schema.render),
    Page("findings.md", _findings.render),
    Page("report.md", _report.render),
    Page("cli.md", _cli.render),
    Page("export-config.md", _export_config.render),
    Page("metrics.md", _metrics.render),
)

__all__ = ["PAGES", "REGENERATE", "Page", "ReferenceMismatch", "render_all", "stale_pages"]


def render_all() -> dict[str, str]:
    """Every page's file name and text, as the code generates them now."""
    return {page.name: page.render() for page in PAGES}


def stale_pages(directory: Path) -> list[str]:
    """Names of the pages under ``directory`` that are missing or differ from
    :func:`render_all`."""
    stale = []
    for name, text in render_all().items():
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale
