"""The checks of single values (``agentik.config.checks`` and the addresses'): store
URLs, gRPC addresses and targets, browser origins, an LLM API's base URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik.config import ConfigError, load_settings


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "store",
    [
        "memory://",
        "sqlite:///agentik.db",
        "sqlite:////var/lib/agentik/agentik.db",
        "sqlite:///:memory:",
        "postgresql://user:pw@db:5432/agentik",
        "postgres://db/agentik",
        "POSTGRESQL://db/agentik",
    ],
)
def test_supported_store_urls_are_accepted(store: str) -> None:
    assert load_settings(None, {"AGENTIK_STORE": store}).engine.store == store


@pytest.mark.parametrize(
    "addr", ["localhost:1", "10.0.0.5:65535", "[::1]:50051", "engine-1.internal:0", "db_1:5"]
)
def test_valid_addresses_are_accepted(addr: str) -> None:
    assert load_settings(None, {"AGENTIK_HTTP_ADDR": addr}).web.http_addr == addr


@pytest.mark.parametrize(
    ("target", "kept"),
    [
        ("127.0.0.1:50051", "127.0.0.1:50051"),
        ("localhost:50051", "localhost:50051"),
        ("engine-1.internal:6000", "engine-1.internal:6000"),
        ("[::1]:50051", "[::1]:50051"),
        ("ipv4:10.0.0.1:50051", "ipv4:10.0.0.1:50051"),
        ("ipv4:10.0.0.1:50051,10.0.0.2:50051", "ipv4:10.0.0.1:50051,10.0.0.2:50051"),
        ("IPv4:10.0.0.1:1", "ipv4:10.0.0.1:1"),
        ("ipv6:[::1]:1,[::1]:2", "ipv6:[::1]:1,[::1]:2"),
        ("ipv6:[fe80::1]:50051", "ipv6:[fe80::1]:50051"),
        ("dns:///engine:50051", "dns:///engine:50051"),
        ("dns:engine:50051", "dns:engine:50051"),
        ("dns://10.0.0.53/engine:50051", "dns://10.0.0.53/engine:50051"),
        ("dns://resolver:5353/engine:50051", "dns://resolver:5353/engine:50051"),
        ("dns://[::1]/engine:50051", "dns://[::1]/engine:50051"),
        ("unix:/run/agentik/engine.sock", "unix:/run/agentik/engine.sock"),
        ("unix:///run/agentik/engine.sock", "unix:///run/agentik/engine.sock"),
        ("unix:engine.sock", "unix:engine.sock"),
    ],
)
def test_every_grpc_target_form_is_accepted(target: str, kept: str) -> None:
    assert load_settings(None, {"AGENTIK_ENGINE_TARGET": target}).web.engine_target == kept


def test_a_target_list_in_toml(tmp_path: Path) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text('[web]\nengine_target = "ipv4:127.0.0.1:1,127.0.0.1:2"\n')
    assert load_settings(path, {}).web.engine_target == "ipv4:127.0.0.1:1,127.0.0.1:2"


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("engine", "must be HOST:PORT"),
        ("engine:", "must be HOST:PORT"),
        ("engine:0", "between 1 and 65535"),
        ("engine:http", "must be HOST:PORT"),
        ("::1:50051", "IPv6 address in brackets"),
        ("10.0.0.1:1,10.0.0.2:2", "needs the ipv4: or ipv6: prefix"),
        ("engine a:1", "must not contain spaces"),
        ("ipv4:", "needs at least one address"),
        ("ipv4:10.0.0.1", "must be A.B.C.D:PORT"),
        ("ipv4:engine:50051", "a host name goes in dns:///HOST:PORT"),
        ("ipv4:10.0.0.1:1,,10.0.0.2:2", "empty entry"),
        ("ipv4:10.0.0.1:1,", "empty entry"),
        ("ipv4:10.0.0.1:70000", "port between 1 and 65535"),
        ("ipv4:300.0.0.1:1", "must be A.B.C.D:PORT"),
        ("ipv6:::1:50051", "must be [IPv6]:PORT"),
        ("ipv6:[::1]", "must be [IPv6]:PORT"),
        ("ipv6:[nope]:1", "no valid IPv6 address"),
        ("ipv6:[::1]:0", "port between 1 and 65535"),
        ("dns:///", "needs HOST:PORT"),
        ("dns:///engine", "must be HOST:PORT"),
        ("dns://resolver", "dns://RESOLVER/HOST:PORT"),
        ("dns://bad_resolver!/engine:1", "the DNS resolver"),
        ("unix:", "path of a socket file"),
        ("unix:///", "path of a socket file"),
        ("unix://relative.sock", "needs an absolute path"),
        ("http://engine:80", "unknown scheme 'http'"),
        ("grpc:engine:1", "unknown scheme 'grpc'"),
        ("xds:///engine", "unknown scheme 'xds'"),
    ],
)
def test_a_bad_engine_target_names_the_forms(target: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"AGENTIK_ENGINE_TARGET": target})
    message = str(caught.value)
    assert "engine_target" in message and "env AGENTIK_ENGINE_TARGET" in message
    assert why in message
    assert "ipv4:A.B.C.D:PORT" in message and "dns:///HOST:PORT" in message


@pytest.mark.parametrize(
    ("written", "origin"),
    [
        ("HTTPS://App.Example", "https://app.example"),
        ("https://app.example:443", "https://app.example"),
        ("http://localhost:80", "http://localhost"),
        ("http://localhost:5173", "http://localhost:5173"),
        ("http://[::1]:3000", "http://[::1]:3000"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("chrome-extension://abcdef", "chrome-extension://abcdef"),
    ],
)
def test_cors_origins_are_kept_as_a_browser_writes_them(written: str, origin: str) -> None:
    assert load_settings(None, {"AGENTIK_CORS_ORIGINS": written}).web.cors_origins == (origin,)


def test_cors_origins_come_from_toml_deduplicated_and_star_only_when_alone(
    tmp_path: Path,
) -> None:
    listed = _write(tmp_path, '[web]\ncors_origins = ["https://a.example", "https://A.example"]\n')
    assert load_settings(listed, {}).web.cors_origins == ("https://a.example",)
    star = tmp_path / "star.toml"
    star.write_text('[web]\ncors_origins = ["*"]\n')
    assert load_settings(star, {}).web.cors_origins == ("*",)
    assert load_settings(None, {"AGENTIK_CORS_ORIGINS": "*"}).web.cors_origins == ("*",)
    empty = tmp_path / "empty.toml"
    empty.write_text("[web]\ncors_origins = []\n")
    assert load_settings(empty, {}).web.cors_origins == ()


@pytest.mark.parametrize("tail", ["/chat/completions", "/chat/completions/", "/completions"])
def test_an_llm_base_url_of_the_chat_endpoint_is_refused_naming_the_base(tail: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"OPENAI_BASE_URL": f"http://127.0.0.1:9/v1{tail}"})
    assert f"must stop before {tail.rstrip('/')}" in str(caught.value)
    assert "use 'http://127.0.0.1:9/v1'" in str(caught.value)
