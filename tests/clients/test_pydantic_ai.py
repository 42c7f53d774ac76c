"""pydantic-ai with its own tracing on (it records prompts, instructions and completions by
default) against a fake OpenAI provider on 127.0.0.1: the text stays out of the audit data
unless ``keep_content`` is on."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from retryscope.instrumentation import AttemptStampingProcessor
from tests.clients.conftest import API_KEY, OPENAI_CHAT, PROMPT, assert_private, json_reply
from tests.instrumentation.conftest import LocalServer, make_audit

INSTRUCTIONS = "the secret instructions 90ab"


@pytest.mark.parametrize("keep", [False, True], ids=["default", "keep_content"])
def test_agent_run_text_is_withheld_unless_kept(
    tmp_path: Path, server: LocalServer, monkeypatch: pytest.MonkeyPatch, keep: bool
) -> None:
    server.reply = lambda _r: json_reply(200, OPENAI_CHAT)
    if keep:
        monkeypatch.setenv("RETRYSCOPE_PARQUET_KEEP_CONTENT", "true")
    audit = make_audit(tmp_path / "spans", AttemptStampingProcessor())
    model = OpenAIChatModel(
        "gpt-4o-mini", provider=OpenAIProvider(base_url=f"{server.url}/v1", api_key=API_KEY)
    )
    tracing = Instrumentation(settings=InstrumentationSettings(tracer_provider=audit.provider))
    agent = Agent(model, instructions=INSTRUCTIONS, capabilities=[tracing])
    assert agent.run_sync(PROMPT).output == "hello"
    assert len(server.requests) == 1
    rows = str(audit.rows("SELECT name, attributes FROM spans"))
    assert "pydantic_ai.all_messages" in rows
    assert "gen_ai.system_instructions" in rows
    if keep:
        assert PROMPT in rows
        assert INSTRUCTIONS in rows
    else:
        assert_private(audit, server, INSTRUCTIONS)
    audit.provider.shutdown()
