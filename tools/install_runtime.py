"""Install agentik and its runtime dependencies into a venv with uv: ``make install`` (so
``make run``) runs this with the venv's own interpreter.

Why uv and not pip: a2a-sdk 1.3 declares ``google-api-core``, which brings google-auth,
proto-plus, requests, urllib3, charset-normalizer, pyasn1 and pyasn1-modules, although the
``a2a`` package never imports ``google.api_core``, ``google.auth`` or ``requests`` (it needs
``googleapis-common-protos``' ``google.api`` and ``google.rpc`` messages, which it declares too).
pip cannot leave out a dependency a package declares; uv can: ``[tool.uv]
override-dependencies`` in pyproject.toml gives ``google-api-core`` a marker that never holds.
``pip install .`` and a built wheel ignore that table and still work (with those eight
distributions installed and unused).

uv reads no pip configuration, so this hands uv what pip is configured with (``pip config
list``: the index, the extra indexes, find-links, constraints, trusted hosts, the certificate
bundle, the proxy and the timeout) and asks for pip's choice across indexes (the best version
from any of them), so that both resolve the same versions from the same places. uv itself is
installed with pip, so from those indexes too, pinned, into a scratch directory removed
afterwards: the venv holds what runs, not what installed it.

Usage: ``VENV/bin/python tools/install_runtime.py``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UV_VERSION = "0.13.8"

# pip reads the sections of its configuration files in this order, each overriding the ones
# before (``pip config list`` has already merged the files); PIP_* variables come last.
_SECTIONS = ("global", "install", ":env:")
# pip spells some options two ways.
_ALIASES = {"default-timeout": "timeout"}
_TRUE = frozenset({"1", "y", "yes", "t", "true", "on"})


def pip_settings(listing: str) -> dict[str, str]:
    """pip's effective install options from the output of ``pip config list``, whose lines
    read ``section.option='value'``."""
    ranked: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, equals, raw = line.partition("=")
        section, dot, option = key.partition(".")
        if not (equals and dot) or section not in _SECTIONS:
            continue
        option = _ALIASES.get(option, option)
        rank = _SECTIONS.index(section)
        if option not in ranked or rank >= ranked[option][0]:
            ranked[option] = (rank, str(ast.literal_eval(raw)))
    return {option: value for option, (_, value) in ranked.items()}


def uv_arguments(settings: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The ``uv pip install`` options and the environment variables that say to uv what
    ``settings`` (pip's options) say to pip."""
    arguments = ["--index-strategy", "unsafe-best-match"]  # pip's: the best match of all indexes
    if index := settings.get("index-url"):
        arguments += ["--default-index", index]
    for option, flag in (
        ("extra-index-url", "--index"),
        ("find-links", "--find-links"),
        ("constraint", "--constraint"),
        ("trusted-host", "--allow-insecure-host"),
    ):
        for value in settings.get(option, "").split():  # pip splits lists on whitespace
            arguments += [flag, value]
    if settings.get("no-index", "").lower() in _TRUE:
        arguments.append("--no-index")
    environment: dict[str, str] = {}
    for option, variables in (
        ("cert", ("SSL_CERT_FILE",)),
        ("client-cert", ("SSL_CLIENT_CERT",)),
        ("proxy", ("HTTP_PROXY", "HTTPS_PROXY")),
        ("timeout", ("UV_HTTP_TIMEOUT",)),
    ):
        if setting := settings.get(option):
            environment.update(dict.fromkeys(variables, setting))
    return arguments, environment


def install_uv(directory: Path) -> Path:
    """The pinned uv, installed with pip (so from pip's indexes) into ``directory``."""
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(directory)]
    subprocess.run([*pip, f"uv=={UV_VERSION}"], check=True)
    return directory / "bin" / "uv"


def main() -> int:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    arguments, environment = uv_arguments(pip_settings(listing))
    # uv only installs: it is removed afterwards (pip's cache keeps its wheel for next time).
    # Its scratch directory is in the venv, where executables run (a /tmp may be noexec).
    with tempfile.TemporaryDirectory(prefix=".uv-", dir=sys.prefix) as scratch:
        uv = install_uv(Path(scratch))
        command = [str(uv), "pip", "install", "--quiet", "--compile-bytecode"]
        # From the repository, so that uv finds pyproject.toml's [tool.uv] overrides.
        completed = subprocess.run(
            [*command, "--python", sys.executable, *arguments, "--editable", str(ROOT)],
            cwd=ROOT,
            env={**environment, **os.environ},  # what the caller set wins, as with pip
            check=False,
        )
    return completed.returncode


if __name__ == "__main__":
    sys.exit(main())
