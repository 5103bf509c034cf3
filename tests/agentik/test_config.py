"""Settings: defaults, the TOML file, environment overrides and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik.config import (
    DEFAULT_SYSTEM_PROMPT,
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
from engine_service.build import context_limits
from tests.agentik.settings_rows import describe, setting_keys


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text, encoding="utf-8")
    return path


# --- defaults -----------------------------------------------------------------------


def test_without_file_or_env_every_setting_has_its_default() -> None:
    settings = load_settings(None, {})
    assert settings == Settings()
    assert settings.engine.grpc_addr == "127.0.0.1:50051"
    assert settings.engine.store == "sqlite:///.agentik/agentik.db"
    assert settings.llm.base_url is None
    assert settings.llm.api_key is None
    assert settings.llm.model == "gpt-4o-mini"
    assert settings.llm.system_prompt == DEFAULT_SYSTEM_PROMPT
    assert settings.llm.max_tool_rounds == 8
    assert settings.llm.timeout == 120.0
    assert settings.llm.first_token_timeout == 60.0
    assert settings.llm.max_retries == 2
    assert settings.tools.timeout == 30.0
    assert settings.engine.max_concurrent_runs == 512
    assert settings.engine.event_retention == 604800.0
    assert settings.engine.shutdown_grace == 10.0
    assert settings.engine.workers == 1
    assert settings.engine.max_message_bytes == 4194304
    assert settings.engine.max_event_bytes == 1048576
    assert settings.engine.stream_buffer_bytes == 8388608
    assert settings.log.level == "INFO"
    assert settings.web.http_addr == "127.0.0.1:8000"
    assert settings.web.engine_target == "127.0.0.1:50051"
    assert settings.web.workers == 2
    assert settings.web.threads == 64
    assert settings.web.header_timeout == 5.0
    assert settings.web.body_timeout == 15.0
    assert settings.web.queue_timeout == 2.0
    assert settings.web.heartbeat_interval == 15.0
    assert settings.web.max_body_bytes == 1048576
    assert settings.web.on_disconnect == "continue"
    assert settings.web.cors_origins == ()
    assert settings.mcp.servers == ()


def test_each_toml_table_is_a_model_read_nested() -> None:
    settings = Settings(llm=LlmSettings(timeout=5.0), web=WebSettings(workers=3))
    assert (settings.llm.timeout, settings.web.workers, settings.engine.workers) == (5.0, 3, 1)
    assert settings.web.engine_target == "127.0.0.1:50051"  # derived from [engine] grpc_addr
    with pytest.raises(TypeError, match="'llm_timeout'"):
        Settings(llm_timeout=5.0)  # type: ignore[call-arg]


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(AttributeError):
        settings.llm = settings.llm  # type: ignore[misc]


# --- TOML ---------------------------------------------------------------------------

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


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_engine_workers_from_env_must_be_a_positive_integer(value: str) -> None:
    with pytest.raises(ConfigError, match=r"engine_workers \(from env AGENTIK_ENGINE_WORKERS\)"):
        load_settings(None, {"AGENTIK_ENGINE_WORKERS": value})


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


def test_mcp_entries_must_be_tables(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must be an array of tables"):
        load_settings(_write(tmp_path, "[mcp]\nservers = 'x'\n"), {})
    with pytest.raises(ConfigError, match=r"\[\[mcp.servers\]\] entry 2 .* must be a table"):
        load_settings(_write(tmp_path, "[mcp]\nservers = [{name = 'a'}, 3]\n"), {})
    with pytest.raises(ConfigError, match=r"unknown key 'mcp\.server'"):
        load_settings(_write(tmp_path, "[[mcp.server]]\nname = 'a'\n"), {})


def test_an_mcp_servers_limits_have_defaults_and_bounds(tmp_path: Path) -> None:
    entry = '[[mcp.servers]]\nname = "s"\ncommand = "x"\n'
    [server] = load_settings(_write(tmp_path, entry), {}).mcp.servers
    limits = (server.max_message_bytes, server.max_tools, server.max_tool_bytes)
    assert limits == (16 * 1024 * 1024, 512, 64 * 1024)
    assert server.max_progress_events == 1000
    for key, value, why in [
        ("max_message_bytes", 1000, "must be between 65536 and 1073741824 bytes; got 1000"),
        ("max_tools", 0, "must be between 1 and 100000"),
        ("max_tool_bytes", 100, "must be between 1024 and 16777216 bytes"),
        ("max_progress_events", -1, "must be"),
        ("max_message_bytes", "big", "must be an integer"),
    ]:
        text = entry + f"{key} = {value!r}\n".replace("'", '"')
        with pytest.raises(ConfigError, match=rf"{key} of \[\[mcp.servers\]\] .*{why}"):
            load_settings(_write(tmp_path, text), {})


# --- environment --------------------------------------------------------------------


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


# --- engine_target ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grpc_addr", "target"),
    [
        ("127.0.0.1:6000", "127.0.0.1:6000"),
        ("0.0.0.0:6000", "127.0.0.1:6000"),
        ("[::]:6000", "[::1]:6000"),
        ("engine:6000", "engine:6000"),
    ],
)
def test_engine_target_defaults_to_a_dialable_grpc_addr(grpc_addr: str, target: str) -> None:
    assert load_settings(None, {"AGENTIK_GRPC_ADDR": grpc_addr}).web.engine_target == target


def test_an_explicit_engine_target_is_kept() -> None:
    env = {"AGENTIK_GRPC_ADDR": "0.0.0.0:6000", "AGENTIK_ENGINE_TARGET": "engine:6000"}
    assert load_settings(None, env).web.engine_target == "engine:6000"


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


# --- validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env_var", "value", "setting", "why"),
    [
        ("AGENTIK_MAX_TOOL_ROUNDS", "0", "max_tool_rounds", "must be positive"),
        ("AGENTIK_MAX_TOOL_ROUNDS", "eight", "max_tool_rounds", "must be an integer"),
        ("AGENTIK_MAX_TOOL_ROUNDS", "2.5", "max_tool_rounds", "must be an integer"),
        ("AGENTIK_LLM_MAX_RETRIES", "-1", "llm_max_retries", "must be at least 0"),
        ("AGENTIK_LLM_TIMEOUT", "0", "llm_timeout", "must be positive"),
        ("AGENTIK_LLM_TIMEOUT", "soon", "llm_timeout", "must be a number of seconds"),
        ("AGENTIK_LLM_TIMEOUT", "inf", "llm_timeout", "must be a finite number"),
        ("AGENTIK_LLM_FIRST_TOKEN_TIMEOUT", "-5", "llm_first_token_timeout", "must be positive"),
        ("AGENTIK_TOOL_TIMEOUT", "nan", "tool_timeout", "must be a finite number"),
        ("AGENTIK_MAX_CONCURRENT_RUNS", "-3", "max_concurrent_runs", "must be positive"),
        ("AGENTIK_EVENT_RETENTION", "-1", "event_retention", "must not be negative"),
        ("AGENTIK_SHUTDOWN_GRACE", "-0.5", "shutdown_grace", "must not be negative"),
        ("AGENTIK_RESUME_RUNS", "maybe", "resume_runs", "must be true or false"),
        ("AGENTIK_MAX_RESUMES", "0", "max_resumes", "must be positive"),
        ("AGENTIK_TOOLS_IN_DOUBT", "retry", "tools_in_doubt", "must be one of"),
        ("AGENTIK_MAX_MESSAGE_BYTES", "0", "max_message_bytes", "must be positive"),
        ("AGENTIK_MAX_EVENT_BYTES", "100", "max_event_bytes", "must be between 16384 and"),
        ("AGENTIK_MAX_EVENT_BYTES", "4194304", "max_event_bytes", "must be between 16384 and"),
        ("AGENTIK_STREAM_BUFFER_BYTES", "1k", "stream_buffer_bytes", "must be an integer"),
        ("AGENTIK_WEB_WORKERS", "0", "web_workers", "must be positive"),
        ("AGENTIK_WEB_THREADS", "many", "web_threads", "must be an integer"),
        ("AGENTIK_WEB_HEADER_TIMEOUT", "0", "web_header_timeout", "must be positive"),
        ("AGENTIK_WEB_BODY_TIMEOUT", "soon", "web_body_timeout", "must be a number of seconds"),
        ("AGENTIK_WEB_QUEUE_TIMEOUT", "-1", "web_queue_timeout", "must not be negative"),
        ("AGENTIK_HEARTBEAT", "0", "heartbeat_interval", "must be positive"),
        ("AGENTIK_MAX_BODY_BYTES", "-1", "max_body_bytes", "must be positive"),
        ("AGENTIK_GRPC_ADDR", "50051", "grpc_addr", "must be HOST:PORT"),
        ("AGENTIK_GRPC_ADDR", "localhost:", "grpc_addr", "must be HOST:PORT"),
        ("AGENTIK_GRPC_ADDR", ":50051", "grpc_addr", "valid host name"),
        ("AGENTIK_GRPC_ADDR", "localhost:http", "grpc_addr", "must be HOST:PORT"),
        ("AGENTIK_GRPC_ADDR", "localhost:70000", "grpc_addr", "port must be between 0 and 65535"),
        ("AGENTIK_GRPC_ADDR", "::1:50051", "grpc_addr", "IPv6 address in brackets"),
        ("AGENTIK_GRPC_ADDR", "[nope]:50051", "grpc_addr", "valid IPv6 address"),
        ("AGENTIK_GRPC_ADDR", "300.1.1.1:50051", "grpc_addr", "valid host name or IP"),
        ("AGENTIK_HTTP_ADDR", "my host:80", "http_addr", "valid host name"),
        ("AGENTIK_ENGINE_TARGET", "engine:0", "engine_target", "between 1 and 65535"),
        ("AGENTIK_STORE", "mysql://db/agentik", "store", "unknown store scheme 'mysql'"),
        ("AGENTIK_STORE", "agentik.db", "store", "must be a URL"),
        ("AGENTIK_STORE", "sqlite://agentik.db", "store", "needs three slashes"),
        ("AGENTIK_STORE", "sqlite:///", "store", "needs three slashes and a path"),
        ("AGENTIK_STORE", "memory://x", "store", "takes nothing after the scheme"),
        ("AGENTIK_LOG_LEVEL", "verbose", "log_level", "must be one of DEBUG, INFO"),
        ("AGENTIK_ON_DISCONNECT", "abort", "on_disconnect", "must be one of continue, cancel"),
        ("OPENAI_BASE_URL", "localhost:11434", "openai_base_url", "http:// or https:// URL"),
        ("AGENTIK_MODEL", "   ", "model", "must not be empty"),
        ("AGENTIK_CORS_ORIGINS", "app.example", "cors_origins", "is not an origin"),
        ("AGENTIK_CORS_ORIGINS", "https://app.example/", "cors_origins", "has a path"),
        ("AGENTIK_CORS_ORIGINS", "https://app.example/ui", "cors_origins", "has a path"),
        ("AGENTIK_CORS_ORIGINS", "https://u@app.example", "cors_origins", "has user info"),
        ("AGENTIK_CORS_ORIGINS", "https://app.example:99999", "cors_origins", "invalid port"),
        ("AGENTIK_CORS_ORIGINS", "https://my app", "cors_origins", "no valid host"),
        ("AGENTIK_CORS_ORIGINS", "*,https://a.example", "cors_origins", "give it alone"),
    ],
)
def test_a_bad_env_value_names_the_setting_the_variable_and_the_value(
    env_var: str, value: str, setting: str, why: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {env_var: value})
    message = str(caught.value)
    assert message.startswith(f"invalid {setting} (from env {env_var}): ")
    assert why in message
    assert message.endswith(f"got {value!r}")


@pytest.mark.parametrize(
    ("toml", "setting", "key", "why", "shown"),
    [
        ("[llm]\nmax_tool_rounds = '8'", "max_tool_rounds", "[llm] max_tool_rounds", "str", "'8'"),
        (
            "[llm]\nmax_tool_rounds = 8.0",
            "max_tool_rounds",
            "[llm] max_tool_rounds",
            "float",
            "8.0",
        ),
        (
            "[llm]\nmax_tool_rounds = true",
            "max_tool_rounds",
            "[llm] max_tool_rounds",
            "bool",
            "True",
        ),
        ("[llm]\ntimeout = 'fast'", "llm_timeout", "[llm] timeout", "seconds, not str", "'fast'"),
        ("[llm]\ntimeout = inf", "llm_timeout", "[llm] timeout", "finite", "inf"),
        ("[llm]\nmodel = 5", "model", "[llm] model", "must be a string", "5"),
        ("[tools]\ntimeout = -1", "tool_timeout", "[tools] timeout", "must be positive", "-1"),
        ("[engine]\nstore = 'redis://x'", "store", "[engine] store", "'redis'", "'redis://x'"),
        ("[web]\nworkers = 0", "web_workers", "[web] workers", "must be positive", "0"),
        ("[engine]\nworkers = 0", "engine_workers", "[engine] workers", "must be positive", "0"),
        ("[engine]\nworkers = '2'", "engine_workers", "[engine] workers", "str", "'2'"),
        ("[log]\nlevel = 'loud'", "log_level", "[log] level", "must be one of", "'loud'"),
        ("[web]\nhttp_addr = 8000", "http_addr", "[web] http_addr", "must be a string", "8000"),
        (
            "[web]\ncors_origins = 'https://a.example'",
            "cors_origins",
            "[web] cors_origins",
            "must be an array of origins, not str",
            "'https://a.example'",
        ),
        (
            "[web]\ncors_origins = [1]",
            "cors_origins",
            "[web] cors_origins",
            "every origin must be a string, not int",
            "[1]",
        ),
    ],
)
def test_a_bad_toml_value_names_the_setting_the_key_and_the_value(
    tmp_path: Path, toml: str, setting: str, key: str, why: str, shown: str
) -> None:
    path = _write(tmp_path, toml + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})
    message = str(caught.value)
    assert message.startswith(f"invalid {setting} (from {key} in {str(path)!r}): ")
    assert why in message
    assert message.endswith(f"got {shown}")


def test_a_bad_toml_value_is_reported_even_when_env_would_override_it(tmp_path: Path) -> None:
    path = _write(tmp_path, "[llm]\nmax_tool_rounds = 0\n")
    with pytest.raises(ConfigError, match="max_tool_rounds"):
        load_settings(path, {"AGENTIK_MAX_TOOL_ROUNDS": "4"})


def test_a_bad_api_key_value_is_never_echoed(tmp_path: Path) -> None:
    path = _write(tmp_path, "[llm]\napi_key = 12345\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})
    assert "12345" not in str(caught.value)
    assert "openai_api_key" in str(caught.value)
    assert "[llm] api_key" in str(caught.value)


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


# --- describing ---------------------------------------------------------------------


def test_describe_lists_every_setting_with_its_env_var_and_masks_the_api_key() -> None:
    rows = describe(load_settings(None, {"OPENAI_API_KEY": "sk-very-secret"}))
    by_name = {name: (env, value) for name, env, value in rows}
    assert by_name["openai_api_key"] == ("OPENAI_API_KEY", "***")
    assert by_name["openai_base_url"] == ("OPENAI_BASE_URL", "(not set)")
    assert by_name["max_tool_rounds"] == ("AGENTIK_MAX_TOOL_ROUNDS", "8")
    assert by_name["heartbeat_interval"] == ("AGENTIK_HEARTBEAT", "15.0")
    assert by_name["cors_origins"] == ("AGENTIK_CORS_ORIGINS", "(none)")
    assert by_name["tokens_per_day"] == ("AGENTIK_TOKENS_PER_DAY", "0")
    assert by_name["web_discard_body_bytes"] == ("AGENTIK_WEB_DISCARD_BODY_BYTES", "0")

    assert by_name["context_tokens"] == ("AGENTIK_CONTEXT_TOKENS", "0")
    assert by_name["reserve_output_tokens"] == ("AGENTIK_RESERVE_OUTPUT_TOKENS", "0")
    assert by_name["compaction"] == ("AGENTIK_COMPACTION", "summarize")
    assert by_name["tools_max_result_chars"] == ("AGENTIK_TOOLS_MAX_RESULT_CHARS", "50000")

    assert by_name["webhooks_max_attempts"] == ("AGENTIK_WEBHOOKS_MAX_ATTEMPTS", "8")
    assert by_name["webhooks_allow_private"] == ("AGENTIK_WEBHOOKS_ALLOW_PRIVATE", "False")
    assert by_name["resume_runs"] == ("AGENTIK_RESUME_RUNS", "True")
    assert by_name["max_resumes"] == ("AGENTIK_MAX_RESUMES", "3")
    assert by_name["tools_idempotent"] == (
        "AGENTIK_TOOLS_IDEMPOTENT",
        "current_time, calculate",
    )
    assert by_name["tools_in_doubt"] == ("AGENTIK_TOOLS_IN_DOUBT", "ask")
    assert by_name["default_agent"] == ("AGENTIK_DEFAULT_AGENT", "agentik")
    assert by_name["agent_max_depth"] == ("AGENTIK_AGENT_MAX_DEPTH", "3")
    assert by_name["a2a_grpc_url"] == ("AGENTIK_A2A_GRPC_URL", "")
    assert by_name["a2a_max_request_id_chars"] == ("AGENTIK_A2A_MAX_REQUEST_ID_CHARS", "256")
    assert by_name["input_modalities"] == ("AGENTIK_INPUT_MODALITIES", "text, image")
    assert by_name["max_media_parts"] == ("AGENTIK_MAX_MEDIA_PARTS", "16")
    assert by_name["web_stream_reader"][0] == "AGENTIK_WEB_STREAM_READER"
    assert by_name["gc_threshold"] == ("AGENTIK_GC_THRESHOLD", "10000")
    assert by_name["web_gc_threshold"] == ("AGENTIK_WEB_GC_THRESHOLD", "10000")
    assert by_name["llm_max_idle_connections"] == ("AGENTIK_LLM_MAX_IDLE_CONNECTIONS", "256")
    assert by_name["llm_idle_timeout"] == ("AGENTIK_LLM_IDLE_TIMEOUT", "30.0")
    assert by_name["llm_round_timeout"] == ("AGENTIK_LLM_ROUND_TIMEOUT", "1800.0")
    assert by_name["llm_max_answer_bytes"] == ("AGENTIK_LLM_MAX_ANSWER_BYTES", "8388608")
    assert by_name["max_tool_calls_per_round"] == ("AGENTIK_MAX_TOOL_CALLS_PER_ROUND", "128")
    assert by_name["max_streams"] == ("AGENTIK_MAX_STREAMS", "0")
    assert by_name["max_streams_per_caller"] == ("AGENTIK_MAX_STREAMS_PER_CALLER", "0")
    assert by_name["max_sessions_per_caller"] == ("AGENTIK_MAX_SESSIONS_PER_CALLER", "10000")
    assert len(rows) == 94
    assert all("sk-very-secret" not in value for _, _, value in rows)


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("AGENTIK_LLM_MAX_ANSWER_BYTES", "1000", "must be at least 1024"),
        ("AGENTIK_LLM_ROUND_TIMEOUT", "0", "must be positive"),
        ("AGENTIK_MAX_TOOL_CALLS_PER_ROUND", "0", "must be positive"),
    ],
)
def test_a_bad_bound_of_an_llm_round_is_refused_naming_it(name: str, value: str, said: str) -> None:
    with pytest.raises(ConfigError, match=f"{name}.*{said}"):
        load_settings(None, {name: value})


@pytest.mark.parametrize("name", ["AGENTIK_GC_THRESHOLD", "AGENTIK_WEB_GC_THRESHOLD"])
def test_a_collector_threshold_out_of_bounds_is_refused_naming_it(name: str) -> None:
    with pytest.raises(ConfigError, match="gc_threshold"):
        load_settings(None, {name: "2000000"})
    with pytest.raises(ConfigError, match="gc_threshold"):
        load_settings(None, {name: "-1"})
    assert load_settings(None, {name: "0"})  # 0: Python's own


def test_the_api_key_is_kept_out_of_the_repr() -> None:
    assert "sk-very-secret" not in repr(Settings(llm=LlmSettings(api_key="sk-very-secret")))


def test_setting_keys_give_env_var_and_toml_key_for_every_setting() -> None:
    keys = setting_keys()
    assert ("max_tool_rounds", "AGENTIK_MAX_TOOL_ROUNDS", "[llm] max_tool_rounds") in keys
    assert ("tool_timeout", "AGENTIK_TOOL_TIMEOUT", "[tools] timeout") in keys
    assert ("log_level", "AGENTIK_LOG_LEVEL", "[log] level") in keys
    assert [name for name, _, _ in keys] == [name for name, _, _ in describe(Settings())]
    assert len({env for _, env, _ in keys}) == len(keys)


def test_the_a2a_card_settings_come_from_toml_and_bad_skills_name_the_setting(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path,
        """
[a2a]
public_url = "https://agent.example/"
name = "helper"

[[a2a.skills]]
id = "chat"
name = "Chat"
description = "Talks."
""",
    )
    settings = load_settings(str(path), {})
    assert settings.a2a.public_url == "https://agent.example/"
    assert settings.a2a.name == "helper"
    assert settings.a2a.skills == ({"id": "chat", "name": "Chat", "description": "Talks."},)
    with pytest.raises(ConfigError, match=r"agent_skills.*AGENTIK_AGENT_SKILLS"):
        load_settings(None, {"AGENTIK_AGENT_SKILLS": '[{"id": "x"}]'})
    with pytest.raises(ConfigError, match="public_url"):
        load_settings(None, {"AGENTIK_PUBLIC_URL": "ftp://nope"})


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


def test_the_state_limit_and_the_store_retry_time_come_from_toml_or_env_and_are_checked(
    tmp_path: Path,
) -> None:
    assert (Settings().engine.max_state_bytes, Settings().engine.store_retry_seconds) == (
        1048576,
        5.0,
    )
    path = _write(tmp_path, "[engine]\nmax_state_bytes = 2048\nstore_retry_seconds = 0.5\n")
    settings = load_settings(str(path), {})
    assert (settings.engine.max_state_bytes, settings.engine.store_retry_seconds) == (2048, 0.5)
    env = {"AGENTIK_MAX_STATE_BYTES": "4096", "AGENTIK_STORE_RETRY_SECONDS": "0"}
    settings = load_settings(str(path), env)
    assert (settings.engine.max_state_bytes, settings.engine.store_retry_seconds) == (4096, 0.0)
    with pytest.raises(ConfigError, match=r"invalid max_state_bytes \(from env"):
        load_settings(None, {"AGENTIK_MAX_STATE_BYTES": "0"})
    with pytest.raises(ConfigError, match=r"invalid store_retry_seconds \(from \[engine\]"):
        load_settings(str(_write(tmp_path, "[engine]\nstore_retry_seconds = -1\n")), {})


def test_the_token_budget_and_the_discard_bound_come_from_env_and_toml(tmp_path: Path) -> None:
    settings = load_settings(
        None, {"AGENTIK_TOKENS_PER_DAY": "50000", "AGENTIK_WEB_DISCARD_BODY_BYTES": "123"}
    )
    assert (settings.auth.tokens_per_day, settings.discard_body_bytes) == (50000, 123)
    path = _write(tmp_path, "[auth]\ntokens_per_day = 7\n[web]\ndiscard_body_bytes = 9\n")
    from_toml = load_settings(str(path), {})
    assert (from_toml.auth.tokens_per_day, from_toml.web.discard_body_bytes) == (7, 9)
    with pytest.raises(ConfigError, match="AGENTIK_TOKENS_PER_DAY"):
        load_settings(None, {"AGENTIK_TOKENS_PER_DAY": "-1"})


def test_the_grpc_request_limit_follows_the_body_limit_and_the_discard_bound_defaults() -> None:
    default = Settings()
    assert default.request_message_bytes == 4 * 1024 * 1024
    assert default.discard_body_bytes == 4 * 1024 * 1024
    raised = load_settings(None, {"AGENTIK_MAX_BODY_BYTES": str(8 << 20)})
    assert raised.request_message_bytes == 16 << 20
    assert raised.discard_body_bytes == 16 << 20


# --- the context budget (docs/conversations.md) ------------------------------------


def test_the_context_budget_comes_from_the_model_name_unless_set() -> None:
    assert context_limits(load_settings(None, {"AGENTIK_MODEL": "gpt-4o-mini"})).window == 128_000
    assert context_limits(load_settings(None, {"AGENTIK_MODEL": "llama3:8b"})).window == 8_192
    assert context_limits(load_settings(None, {"AGENTIK_MODEL": "something-new"})).window == 128_000
    small = context_limits(
        load_settings(None, {"AGENTIK_CONTEXT_TOKENS": "4000", "AGENTIK_COMPACTION": "TRIM"})
    )
    assert (small.window, small.reserve, small.budget) == (4000, 1000, 3000)
    assert small.compaction == "trim"
    big = context_limits(load_settings(None, {"AGENTIK_CONTEXT_TOKENS": "200000"}))
    assert (big.reserve, big.max_result_chars) == (4096, 50_000)


def test_bad_context_settings_name_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"AGENTIK_COMPACTION.*summarize, trim, off"):
        load_settings(None, {"AGENTIK_COMPACTION": "squash"})
    with pytest.raises(ConfigError, match="AGENTIK_TOOLS_MAX_RESULT_CHARS"):
        load_settings(None, {"AGENTIK_TOOLS_MAX_RESULT_CHARS": "0"})
    with pytest.raises(ConfigError, match=r"context_tokens .100. must be 0 .* or at least 512"):
        load_settings(None, {"AGENTIK_CONTEXT_TOKENS": "100"})
    with pytest.raises(ConfigError, match="must be less than context_tokens"):
        load_settings(
            None, {"AGENTIK_CONTEXT_TOKENS": "4000", "AGENTIK_RESERVE_OUTPUT_TOKENS": "4000"}
        )


def test_the_webhooks_table_reads_env_and_a_bad_secret_is_named_hidden() -> None:
    settings = load_settings(
        None,
        {
            "AGENTIK_WEBHOOKS_ALLOW_PRIVATE": "true",
            "AGENTIK_WEBHOOKS_MAX_ATTEMPTS": "3",
            "AGENTIK_WEBHOOKS_BASE_DELAY": "0.5",
            "AGENTIK_WEBHOOK_SECRET": "whsec_c2VjcmV0",
        },
    )
    hooks = settings.webhooks
    assert (hooks.allow_private, hooks.max_attempts, hooks.base_delay) == (True, 3, 0.5)
    assert hooks.secret == "whsec_c2VjcmV0" and "c2VjcmV0" not in repr(settings)
    with pytest.raises(ConfigError) as refused:
        load_settings(None, {"AGENTIK_WEBHOOK_SECRET": "whsec_not base64!"})
    assert "webhook_secret" in str(refused.value) and "not base64!" not in str(refused.value)
    with pytest.raises(ConfigError, match="webhooks_max_attempts"):
        load_settings(None, {"AGENTIK_WEBHOOKS_MAX_ATTEMPTS": "0"})


# --- the one converter --------------------------------------------------------------


def test_a_field_of_a_type_the_converter_does_not_know_needs_a_check() -> None:
    from agentik.config import _value

    with pytest.raises(TypeError, match=r"list\[int\] needs a check"):
        _value("list[int]", {}, [1], False)
    assert _value("list[int]", {"check": lambda raw, env: tuple(raw)}, [1], False) == (1,)


def test_every_array_of_tables_is_bounded(tmp_path: Path) -> None:
    servers = "".join(f'[[mcp.servers]]\nname = "s{n}"\ncommand = "x"\n' for n in range(257))
    with pytest.raises(ConfigError, match=r"\[\[mcp.servers\]\] in .*: at most 256, got 257"):
        load_settings(_write(tmp_path, servers), {})
    agents = "".join(
        f'[[a2a.agents]]\nname = "a{n}"\nurl = "https://a.example/"\n' for n in range(257)
    )
    with pytest.raises(ConfigError, match=r"at most 256, got 257"):
        load_settings(_write(tmp_path, agents), {})


def test_an_entry_shows_a_wrong_value_unless_it_is_secret(tmp_path: Path) -> None:
    path = _write(tmp_path, '[[agents]]\nname = "a"\nmax_runs = "2"\n')
    with pytest.raises(
        ConfigError, match=r"invalid max_runs of .*\('a'\): must be an integer, not str; got '2'"
    ):
        load_settings(path, {})
    path = _write(tmp_path, '[[agents]]\nname = "a"\napi_key = 5\n')
    with pytest.raises(ConfigError, match=r"invalid api_key of .*: must be a string, not int$"):
        load_settings(path, {})


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_request_id_limit_that_is_not_a_positive_integer_is_refused_naming_it(
    value: str,
) -> None:
    with pytest.raises(ConfigError, match="AGENTIK_A2A_MAX_REQUEST_ID_CHARS"):
        load_settings(None, {"AGENTIK_A2A_MAX_REQUEST_ID_CHARS": value})


@pytest.mark.parametrize("tail", ["/chat/completions", "/chat/completions/", "/completions"])
def test_an_llm_base_url_of_the_chat_endpoint_is_refused_naming_the_base(tail: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"OPENAI_BASE_URL": f"http://127.0.0.1:9/v1{tail}"})
    assert f"must stop before {tail.rstrip('/')}" in str(caught.value)
    assert "use 'http://127.0.0.1:9/v1'" in str(caught.value)


def test_an_agents_base_url_of_the_chat_endpoint_is_refused_naming_the_agent(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, '[[agents]]\nname = "r"\nbase_url = "http://h/v1/chat/completions"\n')
    with pytest.raises(ConfigError, match=r"invalid base_url of \[\[agents\]\] entry 1 .*'r'"):
        load_settings(path, {})
