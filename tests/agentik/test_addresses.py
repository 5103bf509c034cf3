"""Network addresses: listen addresses, engine targets, loopback. The settings' errors for
them (naming the setting) are tested in config/test_checks.py; these are the rules themselves."""

from __future__ import annotations

import pytest

from agentik.addresses import (
    check_address,
    check_target,
    dialable,
    display_url,
    is_loopback,
    valid_host,
)


@pytest.mark.parametrize("addr", ["localhost:50051", "127.0.0.1:1", "[::1]:80", "127.0.0.2:9"])
def test_loopback_addresses_are_loopback(addr: str) -> None:
    assert is_loopback(addr)


@pytest.mark.parametrize("addr", ["0.0.0.0:1", "[::]:1", "10.0.0.5:80", "example.com:1", "x"])
def test_other_addresses_are_not_loopback(addr: str) -> None:
    assert not is_loopback(addr)


@pytest.mark.parametrize("host", ["localhost", "a.example", "10.1.2.3", "under_score"])
def test_host_names_and_ipv4_addresses_are_valid_hosts(host: str) -> None:
    assert valid_host(host)


@pytest.mark.parametrize("host", ["", "999.1.1.1", "-a", "a b", "a."])
def test_other_hosts_are_not(host: str) -> None:
    assert not valid_host(host)


def test_a_listen_address_needs_a_port_in_range() -> None:
    assert check_address("[::1]:0") == "[::1]:0"
    with pytest.raises(ValueError, match="port must be between 1 and 65535"):
        check_address("h:0", 1)
    with pytest.raises(ValueError, match=r"put an IPv6 address in brackets"):
        check_address("::1:80")


@pytest.mark.parametrize(
    "target", ["h:1", "ipv4:1.2.3.4:5,1.2.3.4:6", "ipv6:[::1]:5", "dns:///h:1", "unix:/s"]
)
def test_every_target_form_is_kept_as_given(target: str) -> None:
    assert check_target(target) == target


def test_a_bad_target_names_every_form() -> None:
    with pytest.raises(ValueError, match=r"needs the ipv4: or ipv6: prefix; use HOST:PORT, "):
        check_target("a:1,b:2")


@pytest.mark.parametrize(
    ("addr", "dialed"),
    [("0.0.0.0:1", "127.0.0.1:1"), ("[::]:2", "[::1]:2"), ("h:3", "h:3"), ("[::1]:4", "[::1]:4")],
)
def test_a_wildcard_listen_address_is_dialed_on_loopback(addr: str, dialed: str) -> None:
    assert dialable(addr) == dialed


def test_a_url_for_logs_has_no_credentials_query_or_fragment() -> None:
    assert display_url("https://u:pw@h.example:8443/mcp?k=1#f") == "https://h.example:8443/mcp"
