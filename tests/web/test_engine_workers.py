"""The engine workers' own addresses made into one round-robin target (the calls balanced
over them are tested with real servers in ``test_engine_client``)."""

from __future__ import annotations

import pytest

from web_facade.engine_workers import Unbalanceable, balanced_target, host_port, resolve


@pytest.mark.parametrize(
    ("target", "parsed"),
    [
        ("127.0.0.1:50051", ("127.0.0.1", 50051)),
        ("[::1]:50051", ("::1", 50051)),
        ("ipv4:127.0.0.1:1,127.0.0.1:2", None),
        ("dns:///engine:50051", None),
        ("unix:/run/agentik.sock", None),
        ("[::1:50051", None),
    ],
)
def test_only_a_host_and_port_target_is_parsed(target: str, parsed: tuple[str, int] | None) -> None:
    assert host_port(target) == parsed


def test_the_balanced_target_lists_the_workers_in_one_family() -> None:
    assert balanced_target(("10.0.0.5:1", "10.0.0.5:2")) == "ipv4:10.0.0.5:1,10.0.0.5:2"
    assert balanced_target(("[::1]:1", "[::1]:2")) == "ipv6:[::1]:1,[::1]:2"


@pytest.mark.parametrize(
    ("listed", "target_host", "resolved"),
    [
        ("127.0.0.1:1,127.0.0.1:2", "engine.internal", ("127.0.0.1:1", "127.0.0.1:2")),
        ("0.0.0.0:1,[::]:2", "10.0.0.5", ("10.0.0.5:1", "10.0.0.5:2")),  # wildcards
        (":1", "::1", ("[::1]:1",)),  # an IPv6 target
        ("localhost:7", "x", ("127.0.0.1:7",)),  # loopback v4 first
    ],
)
def test_worker_addresses_resolve_to_ip_addresses_at_the_target_s_host(
    listed: str, target_host: str, resolved: tuple[str, ...]
) -> None:
    assert resolve(listed, target_host) == resolved


@pytest.mark.parametrize(
    ("listed", "why"),
    [
        ("127.0.0.1:1,[::1]:2", "mix IPv4 and IPv6"),
        ("127.0.0.1", "without a port"),
        ("no-such-host.invalid:1", "does not resolve"),
    ],
)
def test_worker_addresses_that_make_no_one_target_are_refused(listed: str, why: str) -> None:
    with pytest.raises(Unbalanceable, match=why):
        resolve(listed, "127.0.0.1")
