"""The rule catalog (``RULES``) is the one place of each finding rule's id and severity: the
SQL emits exactly the catalog's rule ids, and every finding row carries its rule's severity
from the catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from retryscope.analytics import RULES, connect, findings
from retryscope.analytics._findings import RULES_BY_ID
from retryscope.analytics._queries import load
from retryscope.demo._run import generate


def _branches(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The SELECTs a (possibly nested) UNION of DuckDB's serialized query tree is made of."""
    if node["type"] == "SET_OPERATION_NODE":
        children = node.get("children") or [node["left"], node["right"]]
        return [b for child in children for b in _branches(child)]
    return [node]


def _emitted_rule_ids(tmp_path: Path) -> list[str]:
    """The rule id each branch of the ``finding_rows`` macro emits, read from the macro as
    DuckDB parsed it (each branch must emit its rule id as a string literal, or a CASE of them,
    or select the rows of attempt_findings, whose branches do so)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    con, _ = connect(empty)
    findings(con)  # creates finding_rows
    (body,) = con.execute(
        "SELECT macro_definition FROM duckdb_functions() WHERE function_name = 'finding_rows'"
    ).fetchall()[0]
    emitted = []
    for branch in _select_branches(con, body):
        first = branch["select_list"][0]
        if first["class"] == "COLUMN_REF":  # the rows of attempt_findings, as the model holds them
            assert first["column_names"][-1] == "rule_id", first
            emitted += _table_rule_ids(con)
        else:
            emitted += _literals(first)
    return emitted


def _select_branches(con: duckdb.DuckDBPyConnection, select: str) -> list[dict[str, Any]]:
    tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [select]).fetchall()[0][0])
    assert not tree["error"], tree
    return _branches(tree["statements"][0]["node"])


def _table_rule_ids(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The rule ids the model's ``attempt_findings`` holds (``model_findings.sql``): the
    second column (after the request key) of each branch of its SELECT."""
    script = load("model_findings")
    create = "CREATE OR REPLACE TEMP TABLE attempt_findings AS"
    select = script[script.index(create) + len(create) :].strip().removesuffix(";")
    return [
        rule_id
        for branch in _select_branches(con, select)
        for rule_id in _literals(branch["select_list"][1])
    ]


def _literals(expr: dict[str, Any]) -> list[str]:
    """The rule ids a branch's first column can take: a string literal, or a CASE whose
    every outcome (THEN and ELSE) is one."""
    if expr["class"] == "CASE":
        outcomes = [check["then_expr"] for check in expr["case_checks"]] + [expr["else_expr"]]
        return [rule_id for outcome in outcomes for rule_id in _literals(outcome)]
    assert expr["class"] == "CONSTANT", expr
    assert expr["literal"]["kind"] == "STRING", expr
    return [expr["literal"]["text"]]


def test_the_sql_emits_exactly_the_catalogs_rule_ids(tmp_path: Path) -> None:
    emitted = _emitted_rule_ids(tmp_path)
    catalog = [r.id for r in RULES]
    assert len(catalog) == len(set(catalog)), "a rule id is in the catalog twice"
    assert sorted(set(emitted) - set(catalog)) == [], "the SQL emits ids the catalog lacks"
    assert sorted(set(catalog) - set(emitted)) == [], "catalog rules no SQL emits"


def test_every_finding_row_has_its_rules_catalog_severity(tmp_path: Path) -> None:
    generate(tmp_path / "demo", 40, seed=7, scenario="all", progress=False)
    rows = findings(connect(tmp_path / "demo")[0]).to_pylist()
    assert {r["severity"] for r in rows} == {"error", "warning", "info"}
    wrong = [r for r in rows if r["severity"] != RULES_BY_ID[r["rule_id"]].severity.value]
    assert wrong == []
