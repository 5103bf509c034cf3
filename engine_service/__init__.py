"""agentik's engine: sessions, the chat loop, tools and the LLM, served over gRPC."""

from agentik import __version__ as __version__
