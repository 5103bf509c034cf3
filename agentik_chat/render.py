"""A turn's events as terminal output: the answer as it streams, reasoning dimmed, each tool
call and result on a line of its own.

The answer goes to ``text``; everything around it (reasoning, tool lines, notices) goes to
``aside``. Interactively both are the terminal; piped, ``aside`` is stderr, so stdout holds
the answer alone. When both reach one place (a terminal, or one file or pipe: ``2>&1``), a
line left open on one is ended before the other writes, so a notice never lands in the middle
of the answer.
"""

from __future__ import annotations

import json
import os
from typing import Any, TextIO

from agentik_chat.api import Event

__all__ = ["Renderer"]

_DIM, _RESET = "\x1b[2m", "\x1b[0m"
_RESULT_CHARS = 400
"""A tool result longer than this is cut on screen (the conversation keeps all of it)."""


class Renderer:
    """Writes one conversation's events; keeps track of where the cursor is."""

    def __init__(self, text: TextIO, aside: TextIO, *, color: bool) -> None:
        self._text = text
        self._aside = aside
        self._color = color
        # One screen: a line left open on one stream is ended before the other writes.
        # Two destinations (stdout to a file): the answer gets no line breaks of the aside's.
        self._one_screen = _one_place(text, aside)
        self._reasoning: set[str] = set()
        self._args: dict[str, list[str]] = {}
        self._names: dict[str, str] = {}
        self._open: dict[int, TextIO] = {}
        """The streams whose last line is not finished, by ``id``."""
        self._in_reasoning = False

    def event(self, event: Event) -> None:
        """Show one event; events the client does not know are skipped, as the API asks."""
        data = event.data
        handler = getattr(self, f"_on_{event.type}", None)
        if handler is not None:
            handler(data)

    def notice(self, line: str) -> None:
        """A line of the client's own (``[interrupted]``, a refusal), on a line of its own."""
        self._line(self._aside, line)

    def finish(self) -> None:
        """End the lines the turn left open."""
        for stream in list(self._open.values()):
            self._end_line(stream)

    # --- events ----------------------------------------------------------------------

    def _on_start_response(self, data: dict[str, Any]) -> None:
        self._end_line(self._text)  # each answer of the turn starts on a line of its own

    def _on_start_reasoning(self, data: dict[str, Any]) -> None:
        self._reasoning.add(str(data.get("message_id")))

    def _on_append_text(self, data: dict[str, Any]) -> None:
        text = str(data.get("text", ""))
        if str(data.get("message_id")) in self._reasoning:
            if not self._in_reasoning:
                self._end_line(self._aside)
                self._write(self._aside, "thinking: ", dim=True)
                self._in_reasoning = True
            self._write(self._aside, text, dim=True)
            return
        if self._in_reasoning:
            self._end_line(self._aside)
            self._in_reasoning = False
        self._write(self._text, text)

    def _on_tool_call_start(self, data: dict[str, Any]) -> None:
        call_id = str(data.get("tool_call_id"))
        self._names[call_id] = str(data.get("name"))
        self._args[call_id] = []

    def _on_tool_call_args(self, data: dict[str, Any]) -> None:
        self._args.setdefault(str(data.get("tool_call_id")), []).append(str(data.get("delta")))

    def _on_tool_call_end(self, data: dict[str, Any]) -> None:
        call_id = str(data.get("tool_call_id"))
        arguments = "".join(self._args.pop(call_id, []))
        self._line(self._aside, f"→ {self._names.get(call_id, 'tool')} {arguments}")

    def _on_tool_call_result(self, data: dict[str, Any]) -> None:
        content = str(data.get("content", ""))
        if len(content) > _RESULT_CHARS:
            content = content[:_RESULT_CHARS] + f"… ({len(content)} characters)"
        marker = "✗" if data.get("is_error") else "←"
        name = self._names.get(str(data.get("tool_call_id")), "tool")
        self._line(self._aside, f"{marker} {name}: {content}")

    def _on_custom(self, data: dict[str, Any]) -> None:
        if data.get("name") == "tool_progress" and isinstance(data.get("value"), dict):
            value = data["value"]
            total = f"/{value['total']}" if value.get("total") else ""
            message = f" {value['message']}" if value.get("message") else ""
            self._line(self._aside, f"… {value.get('progress')}{total}{message}", dim=True)

    def _on_compacted(self, data: dict[str, Any]) -> None:
        how = "summarised" if data.get("mode") == "summarize" else "left out"
        self._line(
            self._aside,
            f"[earlier messages {how} for the model: {data.get('covered')} messages, "
            f"{data.get('tokens_before')} → {data.get('tokens_after')} tokens]",
            dim=True,
        )

    def _on_retry(self, data: dict[str, Any]) -> None:
        # The engine answering died mid-answer; another one asks the LLM again.
        self.finish()
        self._line(self._aside, "[the answer was cut; asking again]")

    def _on_interrupted(self, data: dict[str, Any]) -> None:
        self._line(self._aside, "[interrupted]")

    def _on_error(self, data: dict[str, Any]) -> None:
        self._line(self._aside, f"error: {data.get('message')} ({data.get('code')})")

    def _on_input_required(self, data: dict[str, Any]) -> None:
        self.finish()

    # --- output ----------------------------------------------------------------------

    def _write(self, stream: TextIO, text: str, *, dim: bool = False) -> None:
        if not text:
            return
        if self._one_screen:
            for other in [o for o in self._open.values() if o is not stream]:
                self._end_line(other)
        if dim and self._color:
            text = f"{_DIM}{text}{_RESET}"
        stream.write(text)
        stream.flush()
        if text.endswith("\n"):
            self._open.pop(id(stream), None)
        else:
            self._open[id(stream)] = stream

    def _line(self, stream: TextIO, line: str, *, dim: bool = False) -> None:
        self._end_line(stream)
        self._in_reasoning = False
        self._write(stream, line + "\n", dim=dim)

    def _end_line(self, stream: TextIO) -> None:
        if self._open.pop(id(stream), None) is not None:
            stream.write("\n")
            stream.flush()


def _one_place(text: TextIO, aside: TextIO) -> bool:
    """Whether what is written to ``text`` and to ``aside`` ends up in one place: one stream,
    two terminals (a person sees both), or one file or pipe (``2>&1``)."""
    if text is aside or (text.isatty() and aside.isatty()):
        return True
    try:
        return os.path.sameopenfile(text.fileno(), aside.fileno())
    except (OSError, ValueError):  # no file descriptor (a StringIO), or a closed one
        return False


def arguments_text(arguments: object) -> str:
    """A tool call's arguments as one line of JSON (or the LLM's text when not JSON)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)
