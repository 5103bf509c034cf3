"""Auth settings: AGENTIK_TOKENS and ``[[auth.tokens]]`` parsing and masking, and the
engine's refusal to listen beyond loopback without authentication."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentik.config import ConfigError, TokenEntry, load_settings
from tests.agentik.config.settings_rows import describe

ROOT = Path(__file__).resolve().parents[3]
SECRET_A = "tokA-5s9Lq"
SECRET_B = "tokB-8Wm2x"


def _tokens(value: str) -> tuple[TokenEntry, ...]:
    return load_settings(None, {"AGENTIK_TOKENS": value}).auth.tokens


def _pairs(entries: tuple[TokenEntry, ...]) -> list[tuple[str, str]]:
    return [(e.principal, e.token) for e in entries]


def _refused(value: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _tokens(value)
    message = str(caught.value)
    assert "auth_tokens" in message and "AGENTIK_TOKENS" in message
    for secret in (SECRET_A, SECRET_B, "to k"):
        assert secret not in message, message
    return message


# --- AGENTIK_TOKENS ------------------------------------------------------------------


def test_tokens_from_the_environment_ignore_spaces_around_entries_and_empty_ones() -> None:
    parsed = _tokens(f"  alice:{SECRET_A} ,, bob:{SECRET_B}  ,")
    assert _pairs(parsed) == [("alice", SECRET_A), ("bob", SECRET_B)]
    settings = load_settings(None, {"AGENTIK_TOKENS": f"alice:{SECRET_A}"})
    assert settings.auth_enabled


def test_a_token_may_hold_a_colon_after_the_first() -> None:
    assert _pairs(_tokens("svc:a:b:c")) == [("svc", "a:b:c")]


def test_no_tokens_means_no_authentication() -> None:
    assert not load_settings(None, {"AGENTIK_TOKENS": ""}).auth_enabled
    assert not load_settings(None, {}).auth_enabled


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (f"alice:{SECRET_A},bob", "entry 2 is not PRINCIPAL:TOKEN"),
        (f"alice{SECRET_A}", "entry 1 is not PRINCIPAL:TOKEN"),
        (f"al ice:{SECRET_A}", "principal 'al ice'"),
        (f"a/b:{SECRET_A}", "principal 'a/b'"),
        (f":{SECRET_A}", "principal ''"),
        (f"{'x' * 129}:{SECRET_A}", "1-128"),
        ("alice:to k", "printable ASCII without spaces"),
        ("alice:", "must be a non-empty string"),
        (f"alice:{SECRET_A}\u00e9", "printable ASCII"),
        (f"alice:{SECRET_A},bob:{SECRET_A}", "'alice' and 'bob' have the same token"),
    ],
    ids=[
        "missing-colon",
        "no-colon-at-all",
        "space-in-principal",
        "slash-in-principal",
        "empty-principal",
        "long-principal",
        "space-in-token",
        "empty-token",
        "non-ascii-token",
        "duplicate-token",
    ],
)
def test_a_bad_token_list_is_refused_without_showing_a_token(value: str, hint: str) -> None:
    message = _refused(value)
    assert hint in message
    assert "(hidden)" in message


def test_one_principal_may_have_several_tokens_and_repeat_one() -> None:
    parsed = _tokens(f"alice:{SECRET_A},alice:{SECRET_B},alice:{SECRET_A}")
    assert {e.principal for e in parsed} == {"alice"}
    assert {e.token for e in parsed} == {SECRET_A, SECRET_B}


# --- [[auth.tokens]] -----------------------------------------------------------------


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_toml_tokens_expand_environment_variables(tmp_path: Path) -> None:
    path = _toml(
        tmp_path,
        """
        [auth]
        admins = ["ops"]
        [[auth.tokens]]
        principal = "alice"
        token = "${ALICE_TOKEN}"
        [[auth.tokens]]
        principal = "bob"
        token = "pre-${BOB_PART}-post"
        [[auth.tokens]]
        principal = "ops"
        token = "literal-ops-token"
        """,
    )
    settings = load_settings(path, {"ALICE_TOKEN": SECRET_A, "BOB_PART": "mid"})
    assert _pairs(settings.auth.tokens) == [
        ("alice", SECRET_A),
        ("bob", "pre-mid-post"),
        ("ops", "literal-ops-token"),
    ]
    assert settings.auth.admins == ("ops",)


@pytest.mark.parametrize("env", [{}, {"ALICE_TOKEN": ""}], ids=["unset", "empty"])
def test_an_unset_variable_in_a_toml_token_names_the_variable_only(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = _toml(
        tmp_path,
        f"""
        [[auth.tokens]]
        principal = "bob"
        token = "{SECRET_B}"
        [[auth.tokens]]
        principal = "alice"
        token = "${{ALICE_TOKEN}}"
        """,
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env)
    message = str(caught.value)
    assert "'ALICE_TOKEN'" in message and "unset" in message
    assert SECRET_B not in message


def test_the_same_token_for_two_principals_in_toml_is_refused(tmp_path: Path) -> None:
    path = _toml(
        tmp_path,
        """
        [[auth.tokens]]
        principal = "alice"
        token = "${SHARED}"
        [[auth.tokens]]
        principal = "bob"
        token = "${SHARED}"
        """,
    )
    with pytest.raises(ConfigError, match="'alice' and 'bob' have the same token") as caught:
        load_settings(path, {"SHARED": SECRET_A})
    assert SECRET_A not in str(caught.value)


def test_an_unknown_key_in_a_token_table_is_refused(tmp_path: Path) -> None:
    path = _toml(
        tmp_path,
        f"""
        [[auth.tokens]]
        principal = "alice"
        token = "{SECRET_A}"
        admin = true
        """,
    )
    with pytest.raises(ConfigError, match="unknown key 'admin'; known: principal, token") as caught:
        load_settings(path, {})
    assert SECRET_A not in str(caught.value)


def test_tokens_must_be_an_array_of_tables(tmp_path: Path) -> None:
    path = _toml(tmp_path, f'[auth]\ntokens = "alice:{SECRET_A}"\n')
    with pytest.raises(ConfigError, match=r"array of tables") as caught:
        load_settings(path, {})
    assert SECRET_A not in str(caught.value)


def test_the_environment_overrides_toml_tokens(tmp_path: Path) -> None:
    path = _toml(tmp_path, f'[[auth.tokens]]\nprincipal = "alice"\ntoken = "{SECRET_A}"\n')
    settings = load_settings(path, {"AGENTIK_TOKENS": f"bob:{SECRET_B}"})
    assert _pairs(settings.auth.tokens) == [("bob", SECRET_B)]


# --- masking -------------------------------------------------------------------------


def test_describe_and_repr_never_show_a_token() -> None:
    settings = load_settings(
        None, {"AGENTIK_TOKENS": f"alice:{SECRET_A},bob:{SECRET_B}", "AGENTIK_ADMINS": "ops"}
    )
    rows = {name: shown for name, _, shown in describe(settings)}
    assert rows["auth_tokens"] == "***"
    assert rows["admins"] == "ops"
    everything = f"{describe(settings)} {settings!r} {settings.auth.tokens!r}"
    assert SECRET_A not in everything and SECRET_B not in everything


def _engine_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTIK_", "OPENAI_"))}
    env.update(AGENTIK_STORE=f"sqlite:///{tmp_path / 'engine.db'}", **extra)
    return env


def _agentik_engine(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentik.cli", *args, "engine"],
        cwd=ROOT,
        env=_engine_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.processes
def test_agentik_engine_on_all_interfaces_without_tokens_exits_2(tmp_path: Path) -> None:
    result = _agentik_engine(tmp_path, AGENTIK_GRPC_ADDR="0.0.0.0:0")
    assert result.returncode == 2, result.stderr
    assert "configuration error" in result.stderr
    assert "would listen on 0.0.0.0:0 with no authentication" in result.stderr
    assert "AGENTIK_TOKENS" in result.stderr
    assert "engine listening" not in result.stderr


@pytest.mark.processes
def test_agentik_engine_with_an_unset_token_variable_exits_2(tmp_path: Path) -> None:
    path = _toml(
        tmp_path,
        f"""
        [[auth.tokens]]
        principal = "bob"
        token = "{SECRET_B}"
        [[auth.tokens]]
        principal = "alice"
        token = "${{AGENTIK_TEST_UNSET_TOKEN}}"
        """,
    )
    result = _agentik_engine(tmp_path, "--config", str(path), AGENTIK_GRPC_ADDR="127.0.0.1:0")
    assert result.returncode == 2, result.stderr
    assert "'AGENTIK_TEST_UNSET_TOKEN'" in result.stderr
    assert SECRET_B not in result.stderr


# -- the share of run slots one principal may hold -------------------------------------


@pytest.mark.parametrize(
    ("env", "runs"),
    [
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}"}, 128),  # a quarter of 512
        ({"AGENTIK_JWT_KEY_FILE": "/etc/agentik/jwt.pem"}, 128),
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}", "AGENTIK_MAX_CONCURRENT_RUNS": "10"}, 2),
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}", "AGENTIK_MAX_CONCURRENT_RUNS": "2"}, 1),
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}", "AGENTIK_CALLER_RUN_SHARE": "0.5"}, 256),
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}", "AGENTIK_CALLER_RUN_SHARE": "1"}, 0),
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}", "AGENTIK_MAX_RUNS_PER_CALLER": "500"}, 500),
        ({}, 0),  # no authentication: one caller, the engine's limit is its limit
    ],
)
def test_with_authentication_one_principal_may_hold_a_share_of_the_runs_by_default(
    env: dict[str, str], runs: int
) -> None:
    assert load_settings(None, env).runs_per_caller == runs


@pytest.mark.parametrize(
    ("env", "engine", "per_caller"),
    [
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}"}, 2048, 256),  # four per slot; twice 128
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}", "AGENTIK_MAX_CONCURRENT_RUNS": "10"}, 40, 4),
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}", "AGENTIK_MAX_RUNS_PER_CALLER": "3"}, 2048, 6),
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}", "AGENTIK_CALLER_RUN_SHARE": "1"}, 2048, 0),
        (
            {
                "AGENTIK_TOKENS": f"alice:{SECRET_A}",
                "AGENTIK_MAX_STREAMS": "100",
                "AGENTIK_MAX_STREAMS_PER_CALLER": "7",
            },
            100,
            7,
        ),
        ({"AGENTIK_MAX_STREAMS_PER_CALLER": "7"}, 2048, 0),  # one caller: the engine's limit
    ],
)
def test_the_open_streams_of_the_engine_and_of_one_principal_are_bounded_by_default(
    env: dict[str, str], engine: int, per_caller: int
) -> None:
    settings = load_settings(None, env)
    assert (settings.engine_streams, settings.streams_per_caller) == (engine, per_caller)


@pytest.mark.parametrize(
    ("env", "sessions"),
    [
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}"}, 10_000),
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}", "AGENTIK_MAX_SESSIONS_PER_CALLER": "5"}, 5),
        ({"AGENTIK_TOKENS": f"alice:{SECRET_A}", "AGENTIK_MAX_SESSIONS_PER_CALLER": "0"}, 0),
        ({"AGENTIK_MAX_SESSIONS_PER_CALLER": "5"}, 0),  # one caller, the operator: no limit
    ],
)
def test_with_authentication_one_principal_may_keep_ten_thousand_conversations_by_default(
    env: dict[str, str], sessions: int
) -> None:
    assert load_settings(None, env).sessions_per_caller == sessions


@pytest.mark.parametrize("value", ["0", "-0.1", "1.5", "nan", "a quarter"])
def test_a_caller_run_share_outside_0_to_1_is_a_config_error_naming_it(value: str) -> None:
    with pytest.raises(
        ConfigError, match=r"invalid caller_run_share \(from env AGENTIK_CALLER_RUN_SHARE\)"
    ):
        load_settings(None, {"AGENTIK_CALLER_RUN_SHARE": value})
