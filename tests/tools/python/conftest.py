from tests.engine.conftest import harness

__all__ = ["harness"]
