"""An application that knows nothing of retryscope: CALLS chat calls through the OpenAI SDK
(or, with ``anthropic`` as its argument, the Anthropic SDK), each allowed two retries.
Point it at a provider with OPENAI_BASE_URL / ANTHROPIC_BASE_URL and run it under
``opentelemetry-instrument`` (docs/guides/zero-code.md)."""

import os
import sys

CALLS = int(os.environ.get("CALLS", "5"))

if sys.argv[1:] == ["anthropic"]:
    import anthropic

    claude = anthropic.Anthropic(max_retries=2)
    for _ in range(CALLS):
        claude.messages.create(
            model="claude-test", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
else:
    import openai

    client = openai.OpenAI(max_retries=2)
    for _ in range(CALLS):
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
