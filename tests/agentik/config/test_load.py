"""Loading the settings (``agentik.config.load``): the TOML file, found by path or
``AGENTIK_CONFIG``, read as UTF-8 with its tables and keys named in errors; the
environment over the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik.config import (
    ConfigError,
    EngineSettings,
    LlmSettings,
    LogSettings,
    McpServerConfig,
    McpSettings,
    Settings,
    ToolsSettings,
    WebSettings,
    load_settings,
)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text, encoding="utf-8")
    return path


FULL_TOML = """
[engine]
grpc_addr = "0.0.0.0:6000"
store = "postgresql://agentik:secret@db:5432/agentik"
max_concurrent_runs = 64
max_message_bytes = 1000
event_retention = 0
shutdown_grace = 2.5
workers = 4

[llm]
base_url = "http://localhost:11434/v1"
api_key = "sk-from-file"
model = "llama3"
system_prompt = "Be terse."
max_tool_rounds = 3
timeout = 30
first_token_timeout = 5.5
max_retries = 0

[tools]
timeout = 4

[log]
level = "debug"

[web]
http_addr = "[::]:8080"
engine_target = "engine:6000"
workers = 4
threads = 8
heartbeat_interval = 5
max_body_bytes = 2048
on_disconnect = "CANCEL"
cors_origins = ["https://app.example", "http://localhost:5173"]

[[mcp.servers]]
name = "files"
command = ["mcp-files", "--root", "/data"]

[[mcp.servers]]
name = "web"
url = "http://localhost:9000/mcp"
"""


def test_a_toml_file_sets_every_setting(tmp_path: Path) -> None:
    settings = load_settings(str(_write(tmp_path, FULL_TOML)), {})
    assert settings == Settings(
        engine=EngineSettings(
            grpc_addr="0.0.0.0:6000",
            store="postgresql://agentik:secret@db:5432/agentik",
            max_concurrent_runs=64,
            event_retention=0.0,
            shutdown_grace=2.5,
            workers=4,
            max_message_bytes=1000,
        ),
        llm=LlmSettings(
            base_url="http://localhost:11434/v1",
            api_key="sk-from-file",
            model="llama3",
            system_prompt="Be terse.",
            max_tool_rounds=3,
            timeout=30.0,
            first_token_timeout=5.5,
            max_retries=0,
        ),
        tools=ToolsSettings(timeout=4.0),
        log=LogSettings(level="DEBUG"),
        web=WebSettings(
            http_addr="[::]:8080",
            engine_target="engine:6000",
            workers=4,
            threads=8,
            heartbeat_interval=5.0,
            max_body_bytes=2048,
            on_disconnect="cancel",
            cors_origins=("https://app.example", "http://localhost:5173"),
        ),
        mcp=McpSettings(
            servers=(
                McpServerConfig(
                    name="files", transport="stdio", command="mcp-files", args=("--root", "/data")
                ),
                McpServerConfig(name="web", transport="http", url="http://localhost:9000/mcp"),
            )
        ),
    )
    assert isinstance(settings.llm.timeout, float)


def test_the_file_can_be_named_by_agentik_config(tmp_path: Path) -> None:
    path = _write(tmp_path, '[llm]\nmodel = "from-env-file"\n')
    assert load_settings(None, {"AGENTIK_CONFIG": str(path)}).llm.model == "from-env-file"


def test_the_path_argument_wins_over_agentik_config(tmp_path: Path) -> None:
    path = _write(tmp_path, '[llm]\nmodel = "from-argument"\n')
    env = {"AGENTIK_CONFIG": str(tmp_path / "elsewhere.toml")}
    assert load_settings(path, env).llm.model == "from-argument"


def test_an_empty_file_gives_the_defaults(tmp_path: Path) -> None:
    assert load_settings(_write(tmp_path, ""), {}) == Settings()


def test_a_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="does not exist") as caught:
        load_settings(missing, {})
    assert missing in str(caught.value)
    with pytest.raises(ConfigError, match="from env AGENTIK_CONFIG"):
        load_settings(None, {"AGENTIK_CONFIG": missing})


def test_invalid_toml_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "[llm\nmodel = 1")
    with pytest.raises(ConfigError, match="is not valid TOML") as caught:
        load_settings(path, {})
    assert str(path) in str(caught.value)


def test_an_unknown_section_is_an_error_suggesting_the_right_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown section 'engin'.*did you mean 'engine'"):
        load_settings(_write(tmp_path, "[engin]\ngrpc_addr = '1.2.3.4:5'\n"), {})


def test_an_unknown_key_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'modle' in \[llm\].*did you mean 'model'"):
        load_settings(_write(tmp_path, "[llm]\nmodle = 'x'\n"), {})


@pytest.mark.parametrize(
    ("line", "hint"),
    [
        ("model = 'x'", "did you mean [llm] model?"),
        ("modle = 'x'", "did you mean [llm] model?"),
        ("approval = ['calculate']", "did you mean [tools] approval?"),
        ("timeout = 3", "did you mean [llm] timeout or [tools] timeout or [webhooks] timeout?"),
        ("zzzzqq = 1", "put it under its table's line"),
    ],
)
def test_a_key_above_every_table_is_named_as_outside_any_table_with_its_table(
    tmp_path: Path, line: str, hint: str
) -> None:
    path = _write(tmp_path, f"{line}\n[llm]\nmodel = 'y'\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})
    key = line.split()[0]
    assert str(caught.value) == f"{key!r} in {str(path)!r} is outside any table: {hint}"


def test_a_config_file_saved_as_utf16_is_one_line_saying_to_save_it_as_utf8(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentik.toml"
    path.write_bytes("[llm]\nmodel = 'x'\n".encode("utf-16"))
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})
    assert str(caught.value) == (
        f"config file {str(path)!r} is not UTF-8 text: it is UTF-16 (Windows Notepad's "
        '"Unicode"); save it as UTF-8'
    )


def test_a_config_file_in_another_encoding_names_the_first_byte_that_is_not_utf8(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentik.toml"
    path.write_bytes("[llm]\nmodel = 'caf\u00e9'\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"is not UTF-8 text \(byte 0xe9 at offset 18\)"):
        load_settings(path, {})


def test_a_utf8_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "agentik.toml"
    path.write_bytes(b"\xef\xbb\xbf[llm]\nmodel = 'x'\n")
    assert load_settings(path, {}).llm.model == "x"


def test_a_section_that_is_not_a_table_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'llm' .* must be a table \(\[llm\]\)"):
        load_settings(_write(tmp_path, "llm = 'x'\n"), {})


MCP_NEEDING_A_SECRET = """
[web]
workers = 3

[[mcp.servers]]
name = "secret"
command = "mcp-secret"
env = { TOKEN = "${AGENTIK_TEST_MCP_TOKEN}" }
"""


def test_the_web_loads_settings_without_the_engine_mcp_servers(tmp_path: Path) -> None:
    path = _write(tmp_path, MCP_NEEDING_A_SECRET)
    web = load_settings(path, {}, mcp=False)
    assert web.web.workers == 3
    assert web.mcp.servers == ()
    with pytest.raises(ConfigError, match="'AGENTIK_TEST_MCP_TOKEN', which is unset"):
        load_settings(path, {})
    engine = load_settings(path, {"AGENTIK_TEST_MCP_TOKEN": "t"})
    assert [server.name for server in engine.mcp.servers] == ["secret"]


def test_env_beats_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, '[llm]\nmodel = "from-file"\nmax_tool_rounds = 3\n')
    settings = load_settings(path, {"AGENTIK_MODEL": "from-env"})
    assert settings.llm.model == "from-env"
    assert settings.llm.max_tool_rounds == 3


def test_env_sets_every_setting() -> None:
    env = {
        "AGENTIK_GRPC_ADDR": "localhost:7000",
        "AGENTIK_STORE": "memory://",
        "OPENAI_BASE_URL": "https://example.test/v1",
        "OPENAI_API_KEY": "sk-env\n",
        "AGENTIK_MODEL": "gpt-x",
        "AGENTIK_SYSTEM_PROMPT": "  Speak like a pirate.  ",
        "AGENTIK_MAX_TOOL_ROUNDS": "12",
        "AGENTIK_LLM_TIMEOUT": "90",
        "AGENTIK_LLM_FIRST_TOKEN_TIMEOUT": "7.5",
        "AGENTIK_LLM_MAX_RETRIES": "0",
        "AGENTIK_TOOL_TIMEOUT": "1e1",
        "AGENTIK_MAX_CONCURRENT_RUNS": "1",
        "AGENTIK_EVENT_RETENTION": "0",
        "AGENTIK_SHUTDOWN_GRACE": "0",
        "AGENTIK_ENGINE_WORKERS": "3",
        "AGENTIK_MAX_MESSAGE_BYTES": "65536",
        "AGENTIK_LOG_LEVEL": "warning",
        "AGENTIK_HTTP_ADDR": "0.0.0.0:80",
        "AGENTIK_ENGINE_TARGET": "engine_service:7000",
        "AGENTIK_WEB_WORKERS": "3",
        "AGENTIK_WEB_THREADS": "16",
        "AGENTIK_WEB_HEADER_TIMEOUT": "2.5",
        "AGENTIK_WEB_BODY_TIMEOUT": "30",
        "AGENTIK_WEB_QUEUE_TIMEOUT": "0",
        "AGENTIK_HEARTBEAT": "2",
        "AGENTIK_MAX_BODY_BYTES": "100",
        "AGENTIK_ON_DISCONNECT": "cancel",
        "AGENTIK_CORS_ORIGINS": " https://a.example , https://b.example:8443,",
    }
    assert load_settings(None, env) == Settings(
        engine=EngineSettings(
            grpc_addr="localhost:7000",
            store="memory://",
            max_concurrent_runs=1,
            event_retention=0.0,
            shutdown_grace=0.0,
            workers=3,
            max_message_bytes=65536,
        ),
        llm=LlmSettings(
            base_url="https://example.test/v1",
            api_key="sk-env",
            model="gpt-x",
            system_prompt="  Speak like a pirate.  ",
            max_tool_rounds=12,
            timeout=90.0,
            first_token_timeout=7.5,
            max_retries=0,
        ),
        tools=ToolsSettings(timeout=10.0),
        log=LogSettings(level="WARNING"),
        web=WebSettings(
            http_addr="0.0.0.0:80",
            engine_target="engine_service:7000",
            workers=3,
            threads=16,
            header_timeout=2.5,
            body_timeout=30.0,
            queue_timeout=0.0,
            heartbeat_interval=2.0,
            max_body_bytes=100,
            on_disconnect="cancel",
            cors_origins=("https://a.example", "https://b.example:8443"),
        ),
    )


def test_an_empty_env_var_counts_as_unset(tmp_path: Path) -> None:
    path = _write(tmp_path, '[llm]\nmodel = "from-file"\n')
    settings = load_settings(path, {"AGENTIK_MODEL": "", "OPENAI_API_KEY": ""})
    assert settings.llm.model == "from-file"
    assert settings.llm.api_key is None


def test_unrelated_env_vars_are_ignored() -> None:
    assert load_settings(None, {"HOME": "/root", "PATH": "/bin"}) == Settings()


def test_a_bad_toml_value_is_reported_even_when_env_would_override_it(tmp_path: Path) -> None:
    path = _write(tmp_path, "[llm]\nmax_tool_rounds = 0\n")
    with pytest.raises(ConfigError, match="max_tool_rounds"):
        load_settings(path, {"AGENTIK_MAX_TOOL_ROUNDS": "4"})
