"""What the PostgreSQL store reads from its URL: a URL libpq cannot parse is refused without
its password, and the NOTIFY channel follows the schema the URL names."""

from __future__ import annotations

import pytest

from engine_service.stores import open_store
from engine_service.stores.postgres.dsn import channel_for
from tests.postgres_server import with_schema
from tests.stores.migrate_cli import migrate_cli


@pytest.mark.parametrize(
    "url",
    ["postgresql://agent:s3cret%zz@db.example/agentik", "postgresql://agent:s3cret@h/d?bogus=1"],
)
def test_an_unparseable_url_is_a_value_error_without_the_password(url: str) -> None:
    with pytest.raises(ValueError, match="not a PostgreSQL URL") as caught:
        open_store(url)
    assert "s3cret" not in str(caught.value)
    proc = migrate_cli(url)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "configuration error" in err
    assert "s3cret" not in out + err


def test_the_channel_follows_the_schema_the_dsn_names() -> None:
    assert channel_for("postgresql://db/agentik") == "agentik"
    assert channel_for(with_schema("postgresql://db/agentik", "tenant_a")) == "agentik_tenant_a"
    assert channel_for("host=db options='-c search_path=b,public'") == "agentik_b"
    assert len(channel_for(with_schema("postgresql://db/x", "s" * 100))) == 63
