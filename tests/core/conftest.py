from tests.core.context_helpers import any_store, fake
from tests.engine.conftest import harness, llm, pg_database, pg_url, store_for

__all__ = ["any_store", "fake", "harness", "llm", "pg_database", "pg_url", "store_for"]
