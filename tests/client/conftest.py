from tests.engine.conftest import harness, llm

__all__ = ["harness", "llm"]
