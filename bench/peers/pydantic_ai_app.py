"""Pydantic AI's AG-UI app: an agent with no tools answering from the fake OpenAI server.

Served by uvicorn from ``bench.peer_bench`` in ``.bench-venvs/pydantic-ai``:
``uvicorn bench.peers.pydantic_ai_app:app --workers N``. ``OPENAI_BASE_URL`` points at the
fake; ``POST /agui`` takes an AG-UI ``RunAgentInput`` and streams its events; ``GET /health``
answers 200 once the app is up.
"""

from __future__ import annotations

import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

provider = OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"], api_key="bench")
agent = Agent(OpenAIChatModel("bench", provider=provider))


async def run(request: Request) -> Response:
    response: Response = await AGUIAdapter.dispatch_request(request, agent=agent)
    return response


async def health(request: Request) -> Response:
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/agui", run, methods=["POST"]), Route("/health", health)])
