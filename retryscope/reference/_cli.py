"""``cli.md``: every ``retryscope`` command and argument, from the argparse parser itself."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

from retryscope.reference._markdown import code, header, table

SOURCES = "the argparse parser retryscope.cli.build_parser()"
_ENV_PREFIX = "RETRYSCOPE_"


@contextmanager
def _without_retryscope_variables() -> Iterator[None]:
    """Some defaults come from ``RETRYSCOPE_*`` variables when the parser is built: build it
    without them, so the page does not depend on the environment it was generated in."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith(_ENV_PREFIX)}
    try:
        yield
    finally:
        os.environ.update(saved)


def commands() -> list[tuple[str, str, argparse.ArgumentParser]]:
    """Each subcommand's name, one-line help and parser, in the order ``--help`` lists them."""
    from retryscope.cli import build_parser

    with _without_retryscope_variables():
        parser = build_parser()
    found: list[tuple[str, str, argparse.ArgumentParser]] = []
    for action in parser._actions:  # argparse has no public way to list subcommands
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, str(helps.get(name, "")), sub))
    return found


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper()


def _spelling(action: argparse.Action) -> str:
    """The argument as typed: ``PATH``, ``SRC...``, ``--format {text,json}``, ``--no-ui``."""
    if not action.option_strings:
        return _metavar(action) + ("..." if action.nargs in ("+", "*") else "")
    flag = ", ".join(action.option_strings)
    return flag if action.nargs == 0 else f"{flag} {_metavar(action)}"


def _synopsis(name: str, parser: argparse.ArgumentParser) -> str:
    parts = [f"retryscope {name}"]
    for action in _arguments(parser):
        text = _spelling(action)
        optional = action.option_strings and not action.required
        parts.append(f"[{text.split(', ')[-1]}]" if optional else text)
    return " ".join(parts)


def _meaning(action: argparse.Action) -> str:
    text = str(action.help or "")
    if "%(" in text:
        text = text % {**vars(action), "default": action.default}
    text = text.replace("%%", "%")
    if not text and action.dest == "format":
        text = "output format"
    shown = action.default not in (None, False, argparse.SUPPRESS)
    if shown and "default" not in text:
        text = f"{text} (default: {action.default})"
    if action.required and action.option_strings:
        text = f"required: {text}"
    return text


def render() -> str:
    lines = header(
        "Command line",
        SOURCES,
        f"{code('retryscope COMMAND --help')} prints the same. Commands that read a data set "
        "take a directory of span Parquet files (or one file, or an `s3://` prefix). Exit "
        "codes: 0 success; 1 when `report` counts no logical request (why on stderr and in "
        "its `empty_reason`), `request` finds no request, `ingest` skipped malformed "
        "input, `model` could not write its cache or a `lab` case was not caught; 2 a usage "
        "or input error, named on stderr.",
    )
    found = commands()
    lines += table(("command", "what it does"), ((code(n), h) for n, h, _ in found))
    for name, text, parser in found:
        lines += ["", f"## `retryscope {name}`", "", text[:1].upper() + text[1:] + ".", ""]
        lines += ["```", _synopsis(name, parser), "```", ""]
        lines += table(
            ("argument", "meaning"),
            ((code(_spelling(a)), _meaning(a)) for a in _arguments(parser)),
        )
    return "\n".join(lines) + "\n"
