"""A tiny httpx-based provider client that retries on its own, like the OpenAI SDK does.

It is the "hidden lower layer" of the scenario tests: it knows nothing about retryscope and
resends a failed request ``max_retries`` more times before raising.
"""

from __future__ import annotations

import httpx


class ProviderError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"provider answered {status}")
        self.status = status


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


class TinySdk:
    def __init__(self, client: httpx.Client, *, max_retries: int = 2) -> None:
        self.max_retries = max_retries
        self.timeout = 5.0
        self._client = client

    def complete(self, path: str = "/v1/chat") -> httpx.Response:
        response = self._client.post(path, json={"prompt": "secret prompt"})
        for _ in range(self.max_retries):
            if not _retryable(response.status_code):
                break
            response = self._client.post(path, json={"prompt": "secret prompt"})
        if response.status_code >= 400:
            raise ProviderError(response.status_code)
        return response


class AsyncTinySdk:
    def __init__(self, client: httpx.AsyncClient, *, max_retries: int = 2) -> None:
        self.max_retries = max_retries
        self._client = client

    async def complete(self, path: str = "/v1/chat") -> httpx.Response:
        response = await self._client.post(path, json={"prompt": "secret prompt"})
        for _ in range(self.max_retries):
            if not _retryable(response.status_code):
                break
            response = await self._client.post(path, json={"prompt": "secret prompt"})
        if response.status_code >= 400:
            raise ProviderError(response.status_code)
        return response
