"""How MCP tools look to the LLM: names within the OpenAI charset, results as tool results."""

from __future__ import annotations

import base64
import re

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from engine_service.core.models import ImagePart
from engine_service.tools.mcp.results import disambiguate, tool_name, tool_result

PNG = b"\x89PNG\r\n\x1a\n not really the rest of an image"
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_a_tool_name_is_the_server_name_two_underscores_and_the_tool_name() -> None:
    assert tool_name("time", "get_current_time") == "time__get_current_time"
    assert tool_name("my-server", "do-it") == "my-server__do-it"


def test_characters_outside_the_openai_charset_become_underscores() -> None:
    assert tool_name("files", "read.file/v2 é") == "files__read_file_v2__"


def test_a_long_name_is_cut_to_64_characters_ending_in_a_hash() -> None:
    long = tool_name("server", "x" * 100)
    assert len(long) == 64 and OPENAI_NAME.match(long)
    assert long.startswith("server__xxx")
    assert long != tool_name("server", "x" * 99)
    assert long == tool_name("server", "x" * 100)


def test_disambiguating_keeps_names_apart_and_within_the_charset() -> None:
    first, second = disambiguate("s__a_b", "a.b"), disambiguate("s__a_b", "a b")
    assert first != second
    assert OPENAI_NAME.match(first) and OPENAI_NAME.match(second)


def test_text_blocks_become_the_result_text() -> None:
    result = tool_result(CallToolResult(content=[TextContent(text="one"), TextContent(text="two")]))
    assert (result.content, result.is_error, result.parts) == ("one\n\ntwo", False, [])


def test_an_image_becomes_an_image_part_and_a_note_for_the_llm() -> None:
    encoded = base64.b64encode(PNG).decode()
    result = tool_result(
        CallToolResult(
            content=[TextContent(text="a dot"), ImageContent(data=encoded, mime_type="image/png")]
        )
    )
    assert result.parts == [ImagePart(data=PNG, mime_type="image/png")]
    assert result.content.startswith("a dot\n\n[image (image/png, ")


def test_structured_content_without_text_becomes_json_text() -> None:
    result = tool_result(CallToolResult(content=[], structured_content={"a": [1, "é"]}))
    assert result.content == '{"a": [1, "é"]}'


def test_structured_content_beside_text_leaves_the_text_alone() -> None:
    result = tool_result(
        CallToolResult(content=[TextContent(text='{"a": 1}')], structured_content={"a": 1})
    )
    assert result.content == '{"a": 1}'


def test_an_error_result_is_an_error_the_llm_reads() -> None:
    failed = tool_result(CallToolResult(content=[TextContent(text="bad input")], is_error=True))
    assert (failed.content, failed.is_error) == ("error: bad input", True)
    silent = tool_result(CallToolResult(content=[], is_error=True))
    assert silent.is_error and silent.content == "error: the tool reported an error"


def test_resources_become_text_where_they_can() -> None:
    result = tool_result(
        CallToolResult(
            content=[
                EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="hello")),
                EmbeddedResource(
                    resource=BlobResourceContents(
                        uri="file:///a.png",
                        blob=base64.b64encode(PNG).decode(),
                        mime_type="image/png",
                    )
                ),
                EmbeddedResource(resource=BlobResourceContents(uri="file:///a.bin", blob="AAAA")),
                ResourceLink(uri="file:///b.txt", name="b"),
                AudioContent(data="AAAA", mime_type="audio/wav"),
            ]
        )
    )
    lines = result.content.split("\n\n")
    assert lines[0] == "hello"
    assert lines[1].startswith("[image file:///a.png (image/png, ")
    assert lines[2] == "[resource file:///a.bin (application/octet-stream) omitted]"
    assert lines[3] == "[resource link: file:///b.txt (b)]"
    assert lines[4] == "[audio (audio/wav) omitted]"
    assert result.parts == [ImagePart(data=PNG, mime_type="image/png")]


def test_an_empty_result_says_so() -> None:
    assert tool_result(CallToolResult(content=[])).content == "(the tool returned nothing)"
