"""``[[mcp.servers]]`` in the config file: typed, validated, errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik.config import DEFAULT_CONNECT_TIMEOUT, ConfigError, McpServerConfig, load_settings


def _load(
    tmp_path: Path, text: str, env: dict[str, str] | None = None
) -> tuple[McpServerConfig, ...]:
    path = tmp_path / "agentik.toml"
    path.write_text(text, encoding="utf-8")
    return load_settings(path, env or {}).mcp.servers


def test_a_stdio_server_is_read_with_its_command_args_env_and_cwd(tmp_path: Path) -> None:
    [server] = _load(
        tmp_path,
        """
[[mcp.servers]]
name = "time"
transport = "stdio"
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
env = { TZ = "UTC" }
cwd = "/srv"
connect_timeout = 5
call_timeout = 90
tools = ["get_current_time"]
""",
    )
    assert server == McpServerConfig(
        name="time",
        transport="stdio",
        command="mcp-server-time",
        args=("--local-timezone", "UTC"),
        env={"TZ": "UTC"},
        cwd="/srv",
        connect_timeout=5.0,
        call_timeout=90.0,
        tools=("get_current_time",),
    )
    assert server.target == "mcp-server-time --local-timezone UTC"


def test_http_and_sse_servers_are_read_with_url_and_headers(tmp_path: Path) -> None:
    web, events = _load(
        tmp_path,
        """
[[mcp.servers]]
name = "web"
url = "https://user:pw@mcp.example.com:8443/mcp?x=1"
headers = { Authorization = "Bearer abc" }

[[mcp.servers]]
name = "events"
transport = "SSE"
url = "http://127.0.0.1:9000/sse"
""",
    )
    assert (web.transport, web.headers, web.call_timeout) == (
        "http",
        {"Authorization": "Bearer abc"},
        None,
    )
    assert web.connect_timeout == DEFAULT_CONNECT_TIMEOUT
    assert web.target == "https://mcp.example.com:8443/mcp"
    assert "abc" not in repr(web)
    assert (events.transport, events.url) == ("sse", "http://127.0.0.1:9000/sse")


def test_the_transport_is_inferred_and_a_command_may_be_an_array(tmp_path: Path) -> None:
    files, web = _load(
        tmp_path,
        """
[[mcp.servers]]
name = "files"
command = ["mcp-files", "--root", "/data"]
args = ["--read-only"]

[[mcp.servers]]
name = "web"
url = "http://localhost:9000/mcp"
""",
    )
    assert (files.transport, files.command, files.args) == (
        "stdio",
        "mcp-files",
        ("--root", "/data", "--read-only"),
    )
    assert web.transport == "http"


def test_variables_in_env_and_headers_come_from_the_environment(tmp_path: Path) -> None:
    text = """
[[mcp.servers]]
name = "gh"
command = "mcp-github"
env = { GITHUB_TOKEN = "${GH_TOKEN}", PLAIN = "a$b" }

[[mcp.servers]]
name = "web"
url = "http://localhost:9000/mcp"
headers = { Authorization = "Bearer ${WEB_TOKEN}" }
"""
    gh, web = _load(tmp_path, text, {"GH_TOKEN": "t1", "WEB_TOKEN": "t2"})
    assert gh.env == {"GITHUB_TOKEN": "t1", "PLAIN": "a$b"}
    assert web.headers == {"Authorization": "Bearer t2"}
    with pytest.raises(ConfigError, match=r"invalid headers.Authorization .*'WEB_TOKEN'.* unset"):
        _load(tmp_path, text, {"GH_TOKEN": "t1"})


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            'name = "x"\ncomand = "a"',
            r"unknown key 'comand' in \[\[mcp.servers\]\] entry 1 .*did you mean 'command'",
        ),
        ('command = "a"', r"entry 1 .* needs 'name'"),
        ('name = "a b"\ncommand = "a"', r"invalid name of .*A-Z a-z 0-9 _ -; got 'a b'"),
        (f'name = "{"n" * 33}"\ncommand = "a"', r"invalid name .*1 to 32 characters"),
        ('name = "x"', r"\('x'\) needs either 'command' \(stdio\) or 'url'"),
        (
            'name = "x"\ntransport = "ws"\nurl = "http://h/"',
            r"invalid transport of .*\('x'\): must be one of stdio, http, sse",
        ),
        (
            'name = "x"\nurl = "ftp://h/"',
            r"invalid url of .*must be an http:// or https:// URL; got 'ftp://h/'",
        ),
        (
            'name = "x"\ntransport = "stdio"\nurl = "http://h/"',
            r"invalid url of .*does not apply to the stdio transport",
        ),
        (
            'name = "x"\ncommand = "a"\nheaders = { A = "b" }',
            r"invalid headers of .*does not apply to the stdio transport",
        ),
        (
            'name = "x"\nurl = "http://h/"\nenv = { A = "b" }',
            r"invalid env of .*does not apply to the http transport",
        ),
        ('name = "x"\ncommand = "a"\nargs = "b"', r"invalid args of .*must be an array of strings"),
        ('name = "x"\ncommand = []', r"invalid command of .*a program name or a non-empty array"),
        (
            'name = "x"\ncommand = "a"\nenv = { A = 1 }',
            r"invalid env.A of .*must be a string, not int",
        ),
        (
            'name = "x"\nurl = "http://h/"\nheaders = { "A B" = "c" }',
            r"invalid headers .*not a valid HTTP header name",
        ),
        (
            'name = "x"\ncommand = "a"\ncall_timeout = 0',
            r"invalid call_timeout of .*must be a positive number of seconds; got 0",
        ),
        ('name = "x"\ncommand = "a"\nconnect_timeout = "5"', r"invalid connect_timeout .*not str"),
        (
            'name = "x"\ncommand = "a"\ntools = ["a", 1]',
            r"invalid tools of .*must be an array of strings",
        ),
    ],
)
def test_a_bad_entry_is_an_error_naming_the_entry_and_the_field(
    tmp_path: Path, entry: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, f"[[mcp.servers]]\n{entry}\n")


def test_two_servers_cannot_share_a_name(tmp_path: Path) -> None:
    text = '[[mcp.servers]]\nname = "a"\ncommand = "x"\n\n[[mcp.servers]]\nname = "a"\nurl = "http://h/"\n'
    with pytest.raises(ConfigError, match=r"entry 2 .*the server name 'a' is used twice"):
        _load(tmp_path, text)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text, encoding="utf-8")
    return path


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
