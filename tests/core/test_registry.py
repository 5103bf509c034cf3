"""ToolRegistry: unique names, sources, run-time add and remove."""

from __future__ import annotations

import pytest

from engine_service.core.chat import ToolSpec
from engine_service.core.models import JSON
from engine_service.core.registry import READY, ToolRegistry
from engine_service.core.tool import Tool, ToolContext, ToolResult
from engine_service.tools.builtin import builtin_tools


class EchoTool(Tool):
    def __init__(self, name: str, source: str = "native") -> None:
        self.name = name
        self.description = f"echoes ({name})"
        self.parameters = {"type": "object", "properties": {"text": {"type": "string"}}}
        self.source = source

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        return ToolResult(str(arguments.get("text", "")))


def test_registered_tools_are_found_by_name_in_registration_order() -> None:
    first, second = EchoTool("b_echo"), EchoTool("a_echo")
    registry = ToolRegistry([first, second])
    assert registry.get("b_echo") is first
    assert registry.get("a_echo") is second
    assert registry.get("missing") is None
    assert registry.names() == ["b_echo", "a_echo"]
    assert len(registry) == 2
    assert "a_echo" in registry
    assert list(registry) == [first, second]


def test_specs_describe_the_tools_for_the_llm() -> None:
    registry = ToolRegistry([EchoTool("echo")])
    assert registry.specs() == [
        ToolSpec(
            name="echo",
            description="echoes (echo)",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}},
        )
    ]


def test_a_duplicate_name_is_a_value_error_naming_the_tool_and_its_source() -> None:
    registry = ToolRegistry([EchoTool("echo")])
    with pytest.raises(ValueError, match=r"'echo' is already registered \(from 'native'\)"):
        registry.register(EchoTool("echo", source="mcp:files"))
    assert registry.source_of("echo") == "native"


def test_an_empty_name_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty name"):
        ToolRegistry().register(EchoTool(""))


def test_source_defaults_to_the_tool_s_own_and_can_be_overridden() -> None:
    registry = ToolRegistry()
    registry.register(EchoTool("native_echo"))
    registry.register(EchoTool("remote_echo"), source="mcp:files")
    assert registry.describe() == [
        ("native_echo", "native", READY),
        ("remote_echo", "mcp:files", READY),
    ]


def test_unregister_removes_a_tool_and_returns_it() -> None:
    echo = EchoTool("echo")
    registry = ToolRegistry([echo])
    assert registry.unregister("echo") is echo
    assert registry.get("echo") is None
    assert registry.specs() == []
    assert registry.unregister("echo") is None


def test_a_name_can_be_registered_again_after_unregistering() -> None:
    registry = ToolRegistry([EchoTool("echo", source="mcp:old")])
    registry.unregister("echo")
    registry.register(EchoTool("echo", source="mcp:new"))
    assert registry.source_of("echo") == "mcp:new"


def test_unregister_source_removes_only_that_source_s_tools() -> None:
    registry = ToolRegistry(
        [EchoTool("a", source="mcp:files"), EchoTool("b"), EchoTool("c", source="mcp:files")]
    )
    assert registry.unregister_source("mcp:files") == ["a", "c"]
    assert registry.names() == ["b"]
    assert registry.unregister_source("mcp:files") == []


def test_tools_not_ready_are_listed_but_not_offered_to_the_llm() -> None:
    registry = ToolRegistry([EchoTool("a", source="mcp:files"), EchoTool("b")])
    registry.set_status("a", "disconnected")
    assert [spec.name for spec in registry.specs()] == ["b"]
    assert registry.describe() == [("a", "mcp:files", "disconnected"), ("b", "native", READY)]
    registry.set_status("a", READY)
    assert [spec.name for spec in registry.specs()] == ["a", "b"]


def test_set_status_of_an_unknown_tool_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        ToolRegistry().set_status("nope", READY)


def test_the_builtin_tools_register_without_clashes() -> None:
    registry = ToolRegistry(builtin_tools())
    assert registry.describe() == [
        ("current_time", "native", READY),
        ("calculate", "native", READY),
        ("update_state", "native", READY),
    ]
