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
