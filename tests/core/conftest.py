from tests.engine.conftest import harness, llm, pg_database, pg_url, store_for

__all__ = ["harness", "llm", "pg_database", "pg_url", "store_for"]
