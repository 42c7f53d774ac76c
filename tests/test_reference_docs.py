"""The reference under docs/reference/ is what the code generates, and the README's command
table and every documentation link agree with the repository."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import duckdb
import pytest

import retryscope.instrumentation.export as export
from retryscope.analytics import REPORT_KEYS, RULES
from retryscope.instrumentation.export import ExportConfig
from retryscope.reference import PAGES, REGENERATE, ReferenceMismatch, render_all, stale_pages
from retryscope.reference._cli import commands
from retryscope.reference._export_config import check_agreement
from retryscope.schema import SPAN_SCHEMA, duckdb_type

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
README = ROOT / "README.md"


def _first_column(page: str) -> list[str]:
    """The first cell of every body row of the page's first table, without backticks."""
    text = (REFERENCE / page).read_text(encoding="utf-8")
    table = text.split("\n|---", 1)[1].split("\n\n", 1)[0]
    return [line.split(" | ")[0].strip("| `") for line in table.splitlines()[1:]]


@pytest.mark.parametrize("page", [p.name for p in PAGES])
def test_committed_page_is_what_the_code_generates(page: str) -> None:
    path = REFERENCE / page
    assert path.is_file(), f"{path} is missing: run `{REGENERATE}`"
    expected = render_all()[page]
    assert path.read_text(encoding="utf-8") == expected, (
        f"{path.relative_to(ROOT)} is out of date: run `{REGENERATE}` and commit the result"
    )


def test_reference_holds_only_generated_pages() -> None:
    assert sorted(p.name for p in REFERENCE.iterdir()) == sorted(p.name for p in PAGES)


def test_schema_page_documents_every_column_once() -> None:
    assert _first_column("schema.md") == list(SPAN_SCHEMA.names)


def test_report_page_lists_every_key_of_the_contract() -> None:
    assert _first_column("report.md") == [k.path for k in REPORT_KEYS]


def test_findings_page_lists_every_rule_with_its_severity() -> None:
    text = (REFERENCE / "findings.md").read_text(encoding="utf-8")
    for rule in RULES:
        assert f"| `{rule.id}` | {rule.severity} |" in text


def test_duckdb_names_the_column_types_as_the_page_does() -> None:
    rel = duckdb.connect().from_arrow(SPAN_SCHEMA.empty_table())
    for field, named in zip(SPAN_SCHEMA, rel.types, strict=True):
        assert duckdb_type(field.type) == str(named).replace('"', ""), field.name


def test_check_finds_a_stale_page_and_names_it(tmp_path: Path) -> None:
    for name, text in render_all().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert stale_pages(tmp_path) == []
    (tmp_path / "findings.md").write_text("hand-edited\n", encoding="utf-8")
    (tmp_path / "cli.md").unlink()
    assert stale_pages(tmp_path) == ["findings.md", "cli.md"]
    done = subprocess.run(
        [sys.executable, "-m", "retryscope.reference", "--check", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert f"{tmp_path / 'findings.md'}: out of date; run {REGENERATE}" in done.stderr
    assert "cli.md" in done.stderr


def test_exporter_keywords_settings_and_variables_agree() -> None:
    check_agreement()
    names = [f.name for f in fields(ExportConfig)]
    text = (REFERENCE / "export-config.md").read_text(encoding="utf-8")
    for name in names:
        assert f"| `{name}: " in text
        assert f"`{ExportConfig.variable(name)}`" in text


def test_a_keyword_that_is_not_a_setting_stops_the_generator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Renamed:
        def __init__(self, directory: str | None = None, *, rows_per_file: int = 0) -> None:
            pass

    monkeypatch.setattr(export, "ParquetSpanExporter", Renamed)
    with pytest.raises(ReferenceMismatch, match="rows_per_file"):
        check_agreement()


def test_a_variable_that_does_not_read_back_stops_the_generator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def wrong(self: ExportConfig) -> dict[str, str]:
        return {ExportConfig.variable(f.name): "7" for f in fields(ExportConfig)}

    monkeypatch.setattr(ExportConfig, "to_env", wrong)
    with pytest.raises(ReferenceMismatch, match="read back"):
        check_agreement()


def test_readme_command_table_lists_every_command() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Command line", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `retryscope ([a-z]+)", section, flags=re.MULTILINE)
    assert listed == [name for name, _, _ in commands()]


def test_readme_is_a_manual_of_at_most_400_lines() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 400


def _documents() -> list[Path]:
    guides = sorted((ROOT / "docs").rglob("*.md"))
    return [README, ROOT / "CHANGELOG.md", ROOT / "bench" / "RESULTS.md", *guides]


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing = [t for t in targets if "://" not in t and not (doc.parent / t).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links to missing {missing}"


_REPO_PATH = re.compile(
    r"`((?:tests|examples|analytics|instrumentation|retryscope|dashboards|bench|docs)/"
    r"[\w./-]*\w)/?`"
)


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_named_exists(doc: Path) -> None:
    named = _REPO_PATH.findall(doc.read_text(encoding="utf-8"))
    missing = sorted({p for p in named if not (ROOT / p).exists()})
    assert not missing, f"{doc.relative_to(ROOT)} names missing paths {missing}"
