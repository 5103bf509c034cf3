"""The checks before listening: an address already taken, and the refusal to listen
beyond loopback without authentication."""

from __future__ import annotations

import socket

import pytest

from agentik.config import AuthSettings, ConfigError, Settings, TokenEntry, load_settings
from agentik.netcheck import AddressInUse, refuse_open_exposure, refuse_taken_address

SECRET_A = "tokA-5s9Lq"

OPEN = ["0.0.0.0:50051", "192.168.1.20:50051", "[::]:50051", "10.0.0.5:8000", "example.com:1"]
LOOPBACK = ["localhost:50051", "127.0.0.1:50051", "[::1]:50051", "127.0.0.2:50051"]


@pytest.mark.parametrize("addr", OPEN)
def test_listening_beyond_loopback_without_auth_is_refused(addr: str) -> None:
    with pytest.raises(ConfigError) as caught:
        refuse_open_exposure(Settings(), addr, "engine")
    message = str(caught.value)
    assert f"the engine would listen on {addr} with no authentication" in message
    assert "AGENTIK_TOKENS" in message and "AGENTIK_ALLOW_ANONYMOUS=true" in message


@pytest.mark.parametrize("addr", OPEN + LOOPBACK)
def test_tokens_a_jwt_key_or_allow_anonymous_permit_any_address(addr: str) -> None:
    refuse_open_exposure(
        Settings(auth=AuthSettings(tokens=(TokenEntry("alice", SECRET_A),))), addr, "engine"
    )
    refuse_open_exposure(
        Settings(auth=AuthSettings(jwt_key_file="/etc/agentik/jwt.pem")), addr, "engine"
    )
    refuse_open_exposure(Settings(auth=AuthSettings(allow_anonymous=True)), addr, "engine")


@pytest.mark.parametrize("addr", LOOPBACK)
def test_loopback_needs_no_auth(addr: str) -> None:
    refuse_open_exposure(Settings(), addr, "engine")


def test_allow_anonymous_comes_from_the_environment() -> None:
    settings = load_settings(
        None, {"AGENTIK_GRPC_ADDR": "0.0.0.0:50051", "AGENTIK_ALLOW_ANONYMOUS": "true"}
    )
    refuse_open_exposure(settings, settings.engine.grpc_addr, "engine")


def test_an_address_already_taken_is_refused_naming_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(AddressInUse, match="set AGENTIK_GRPC_ADDR to another address") as said:
            refuse_taken_address(addr, "engine", "AGENTIK_GRPC_ADDR")
        assert said.value.kind == "cannot listen"  # not a mistake in the configuration
        assert "by another program" in str(said.value)
    refuse_taken_address("127.0.0.1:0", "engine", "AGENTIK_GRPC_ADDR")  # port 0: any free one
