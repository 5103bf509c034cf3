"""The SSRF guard: what a webhook URL may name, at registration and at connect time."""

from __future__ import annotations

import pytest

from engine_service.webhooks.guard import WebhookRefused, check_url, resolve_checked


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://hooks.example.com/in", "must use https (plain http only with [webhooks]"),
        ("ftp://hooks.example.com/in", "must use https"),
        ("https://127.0.0.1/in", "a loopback address"),
        ("https://[::1]:8443/in", "a loopback address"),
        ("https://localhost/in", "a loopback address"),
        ("https://10.1.2.3/in", "a private address"),
        ("https://192.168.0.10/in", "a private address"),
        ("https://[fd12::1]/in", "a private address"),
        ("https://169.254.1.1/in", "a link-local address"),
        ("https://169.254.169.254/latest/meta-data", "a cloud metadata address"),
        ("https://[::ffff:127.0.0.1]/in", "a loopback address"),
        ("https://100.64.0.1/in", "a reserved address"),
        ("https://0.0.0.0/in", "an unspecified address"),
        ("https://user:pw@hooks.example.com/in", "must not hold credentials"),
        ("https:///in", "names no host"),
        ("https://hooks.example.com/a b", "whitespace"),
        ("https://hooks.example.com:99999/", "not a valid URL"),
        ("https://hooks.example.com/" + "a" * 3000, "longer than 2048"),
    ],
)
def test_clearly_refused_urls_are_refused_naming_why(url: str, why: str) -> None:
    with pytest.raises(WebhookRefused, match="webhook") as refused:
        check_url(url, allow_private=False)
    assert why in str(refused.value)


def test_a_public_https_url_passes_with_its_parts() -> None:
    target = check_url("https://Hooks.example.com:8443/in?x=1", allow_private=False)
    assert (target.scheme, target.host, target.port, target.path) == (
        "https",
        "hooks.example.com",
        8443,
        "/in?x=1",
    )


def test_allow_private_lets_http_and_private_addresses_through_but_never_metadata() -> None:
    assert check_url("http://127.0.0.1:9/x", allow_private=True).port == 9
    assert check_url("http://10.0.0.5/x", allow_private=True).host == "10.0.0.5"
    with pytest.raises(WebhookRefused, match="metadata"):
        check_url("http://169.254.169.254/", allow_private=True)


def stub(answers: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            raise OSError("no such name")
        return answers[host]

    return resolve


@pytest.mark.parametrize(
    ("addresses", "why"),
    [
        (["127.0.0.1"], "resolves to a loopback address"),
        (["10.9.8.7"], "resolves to a private address"),
        (["93.184.215.14", "192.168.1.1"], "resolves to a private address"),
        (["fe80::1"], "resolves to a link-local address"),
        (["169.254.169.254"], "resolves to a cloud metadata address"),
    ],
)
async def test_every_resolved_address_is_checked_at_connect_time(
    addresses: list[str], why: str
) -> None:
    # A name that passed at registration (not an address) and now resolves inward: the
    # rebinding case. The check is on the addresses the connection would use.
    target = check_url("https://rebind.example.com/in", allow_private=False)
    with pytest.raises(WebhookRefused, match=why):
        await resolve_checked(
            target, allow_private=False, resolver=stub({"rebind.example.com": addresses})
        )


async def test_public_addresses_pass_and_a_name_that_does_not_resolve_is_named() -> None:
    target = check_url("https://hooks.example.com/in", allow_private=False)
    resolver = stub(
        {"hooks.example.com": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]}
    )
    assert await resolve_checked(target, allow_private=False, resolver=resolver) == [
        "93.184.215.14",
        "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
    ]
    gone = check_url("https://gone.example.com/in", allow_private=False)
    with pytest.raises(WebhookRefused, match=r"'gone\.example\.com' does not resolve"):
        await resolve_checked(gone, allow_private=False, resolver=resolver)


def test_an_internationalised_name_goes_on_in_its_ascii_form() -> None:
    assert check_url("https://bücher.example/in", allow_private=False).host == (
        "xn--bcher-kva.example"
    )
    with pytest.raises(WebhookRefused, match="not a valid name"):
        check_url("https://" + "ü" * 70 + ".example/", allow_private=False)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        # NAT64 (RFC 6052): a DNS64/NAT64 network delivers to the IPv4 address inside.
        ("https://[64:ff9b::a9fe:a9fe]/", "a cloud metadata address inside an IPv6 address"),
        ("https://[64:ff9b::a00:1]/", "a private address inside an IPv6 address (NAT64 form)"),
        ("https://[64:ff9b::7f00:1]/", "a loopback address inside an IPv6 address (NAT64 form)"),
        ("https://[64:ff9b:1::a00:1]/", "a local-use NAT64 address"),
        # 6to4: a relay delivers to the IPv4 address in bits 16-47.
        ("https://[2002:a9fe:a9fe::]/", "a cloud metadata address inside an IPv6 address"),
        ("https://[2002:c0a8:1::1]/", "a private address inside an IPv6 address (6to4 form)"),
        ("https://[2002:7f00:1::]/", "a loopback address inside an IPv6 address (6to4 form)"),
        # IPv4-compatible (deprecated), IPv4-mapped and IPv4-translated (SIIT).
        ("https://[::7f00:1]:39399/", "a loopback address inside an IPv6 address"),
        ("https://[::a9fe:a9fe]/", "a cloud metadata address inside an IPv6 address"),
        ("https://[::5db8:d70e]/", "a deprecated IPv4-compatible IPv6 address"),
        ("https://[::ffff:a9fe:a9fe]/", "a cloud metadata address inside an IPv6 address"),
        ("https://[::ffff:0:7f00:1]/", "a loopback address inside an IPv6 address (IPv4-trans"),
        # Teredo: the server and the (obfuscated) client address are both IPv4 addresses.
        ("https://[2001:0:a00:1::]/", "a private address inside an IPv6 address (Teredo form)"),
        ("https://[2001:0:5db8:d70e::80ff:fffe]/", "a loopback address inside an IPv6 address"),
        ("https://[2001:0:5db8:d70e::fefd:fcfb]/", "a reserved address"),  # both public
        # Deprecated site-local, and special-purpose blocks Python's is_global lets through.
        ("https://[fec0::1]/", "a deprecated site-local address"),
        ("https://[100::1]/", "a reserved address"),
        ("https://[3fff::1]/", "a reserved address"),
        ("https://192.0.0.8/", "a reserved address"),
        ("https://192.88.99.1/", "a reserved address"),
    ],
)
def test_ipv6_forms_of_inward_addresses_are_refused_naming_why(url: str, why: str) -> None:
    with pytest.raises(WebhookRefused, match="webhook") as refused:
        check_url(url, allow_private=False)
    assert why in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "https://[64:ff9b::a9fe:a9fe]/",
        "https://[2002:a9fe:a9fe::]/",
        "https://[::a9fe:a9fe]/",
        "https://[::ffff:0:a9fe:a9fe]/",
        "https://[2001:0:a9fe:a9fe::]/",
        "http://[::7f00:1]/",
        "http://[fec0::1]/",
        "http://[64:ff9b:1::a00:1]/",
    ],
)
def test_allow_private_still_refuses_metadata_and_deprecated_ipv6_forms(url: str) -> None:
    with pytest.raises(WebhookRefused, match="webhook"):
        check_url(url, allow_private=True)


def test_allow_private_takes_the_ipv6_forms_of_a_private_address() -> None:
    for url in ("http://[64:ff9b::a00:1]/", "http://[2002:a00:1::]/", "http://[::ffff:a00:1]/"):
        assert check_url(url, allow_private=True).port == 80


def test_ipv6_forms_of_a_public_address_pass() -> None:
    # A DNS64 resolver answers a public name with its NAT64 form: that must keep working.
    for url in ("https://[64:ff9b::5db8:d70e]/in", "https://[2002:5db8:d70e::1]/in"):
        assert check_url(url, allow_private=False).path == "/in"


async def test_an_ipv6_form_of_an_inward_address_is_refused_at_connect_time_too() -> None:
    target = check_url("https://rebind.example.com/in", allow_private=False)
    resolver = stub({"rebind.example.com": ["64:ff9b::a9fe:a9fe"]})
    with pytest.raises(WebhookRefused, match="resolves to a cloud metadata address inside"):
        await resolve_checked(target, allow_private=False, resolver=resolver)


@pytest.mark.parametrize(
    "host",
    [
        "0x7f000001",
        "2130706433",
        "017700000001",
        "127.1",
        "0177.0.0.1",
        "127.0.0.1.",
        "0x7f.1",
        "0",
        "0xa9.0xfe.0xa9.0xfe",
        "2852039166",  # 169.254.169.254
    ],
)
def test_an_ipv4_address_in_any_form_the_resolver_reads_is_refused_at_registration(
    host: str,
) -> None:
    with pytest.raises(WebhookRefused, match=r"host is an? (loopback|cloud metadata|unspec)"):
        check_url(f"https://{host}/in", allow_private=False)


@pytest.mark.parametrize("host", ["0x5db8d70e", "1572394766", "93.184.55054", "93.184.215.14."])
def test_a_public_ipv4_address_in_another_form_is_refused_naming_its_dotted_form(
    host: str,
) -> None:
    with pytest.raises(WebhookRefused, match=r"write it as 93\.184\.215\.14$"):
        check_url(f"https://{host}/in", allow_private=False)


@pytest.mark.parametrize("host", ["08.1.2.3", "1.2.3.4.5", "256.1.1.1", "1.2.65536", "a.0x"])
def test_a_host_ending_in_a_number_that_is_no_ipv4_address_is_refused(host: str) -> None:
    with pytest.raises(WebhookRefused, match="neither a name nor a valid IPv4 address"):
        check_url(f"https://{host}/in", allow_private=False)


@pytest.mark.parametrize("host", ["foo.localhost", "a.b.LOCALHOST", "localhost.", "x.localhost."])
def test_localhost_names_are_loopback(host: str) -> None:
    with pytest.raises(WebhookRefused, match="a loopback address"):
        check_url(f"https://{host}/in", allow_private=False)
    assert check_url(f"http://{host}/in", allow_private=True).path == "/in"


def test_names_that_only_look_like_numbers_or_localhost_pass() -> None:
    for host in ("1e100.net", "localhost.example.com", "mylocalhost", "0x1.example", "123abc"):
        assert check_url(f"https://{host}/in", allow_private=False).host == host
