"""agentik's engine: sessions, the chat loop, tools and the LLM, served over gRPC."""

__version__ = "0.1.0"
