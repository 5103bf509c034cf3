"""JSON Patch (RFC 6902) over JSON Pointers (RFC 6901), for the session's shared state.

``apply_patch(doc, ops)`` returns a new document and never changes ``doc`` or the
values inside ``ops``. A patch is atomic: the first failing operation raises
:class:`JsonPatchError` (naming the operation's index, its path and why) and no
result is produced.

With ``max_bytes`` a patch is bounded before it costs memory: it holds at most
``MAX_PATCH_OPERATIONS`` operations; the document's size as compact JSON is kept exactly
as each operation applies, and an operation that would take it past ``max_bytes`` fails
before its value is copied in; and its ``copy`` operations copy at most ``COPY_FACTOR``
times ``max_bytes`` in all. So one ``add`` and n ``copy`` operations from the root (which
double the document n times) stop at the limit, and the work of one patch stays
proportional to the limit and the patch's own size.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from engine_service.core.models import JSON

__all__ = ["MAX_PATCH_OPERATIONS", "JsonPatchError", "apply_patch", "json_equal", "json_size"]

MAX_PATCH_OPERATIONS = 1000
"""Operations one bounded patch may hold."""
COPY_FACTOR = 2
"""A bounded patch's ``copy`` operations copy at most this many times ``max_bytes`` in all."""

_OPS = ("add", "remove", "replace", "move", "copy", "test")
_BAD_ESCAPE = re.compile(r"~(?![01])")


class JsonPatchError(ValueError):
    """A patch (or one of its operations) cannot be applied."""

    def __init__(self, message: str, *, index: int | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.index = index
        self.path = path


class _OpFailed(Exception):
    """Why one operation failed; turned into a ``JsonPatchError`` with its context."""


def _parse_pointer(pointer: str) -> list[str]:
    """Split a JSON Pointer into unescaped reference tokens (``""`` is the whole doc)."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise _OpFailed(f"JSON pointer {pointer!r} must be empty or start with '/'")
    tokens = []
    for raw in pointer[1:].split("/"):
        if _BAD_ESCAPE.search(raw):
            raise _OpFailed(f"JSON pointer {pointer!r} has a '~' not followed by 0 or 1")
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tokens


def json_equal(a: JSON, b: JSON) -> bool:
    """JSON equality: numbers compare by value, but booleans are not numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return False


def _kind(value: JSON) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a value"


def _pointer(tokens: Sequence[str]) -> str:
    """The JSON Pointer for ``tokens`` (escaping ``~`` and ``/``)."""
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


def _short(value: JSON) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _array_index(token: str, length: int, *, allow_end: bool) -> int:
    """The list index a token names; ``allow_end`` lets ``-`` or ``len`` mean "append"."""
    if token == "-":
        if allow_end:
            return length
        raise _OpFailed("'-' names the position after the last array element, which has no value")
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        raise _OpFailed(f"{token!r} is not an array index")
    index = int(token)
    limit = length if allow_end else length - 1
    if index > limit:
        raise _OpFailed(f"array index {index} is out of range (array length {length})")
    return index


def _resolve(doc: JSON, tokens: Sequence[str]) -> JSON:
    """The value the tokens point at; it must exist."""
    node = doc
    for depth, token in enumerate(tokens):
        if isinstance(node, dict):
            if token not in node:
                where = _pointer(tokens[:depth]) or "the document root"
                raise _OpFailed(f"member {token!r} does not exist in {where}")
            node = node[token]
        elif isinstance(node, list):
            node = node[_array_index(token, len(node), allow_end=False)]
        else:
            raise _OpFailed(f"cannot look up {token!r} in {_kind(node)}")
    return node


def _container(doc: JSON, tokens: Sequence[str]) -> dict[str, Any] | list[Any]:
    """The object or array holding the last token's location."""
    parent = _resolve(doc, tokens[:-1])
    if not isinstance(parent, dict | list):
        raise _OpFailed(f"the parent of the target is {_kind(parent)}, not an object or array")
    return parent


def json_size(value: JSON) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON, as the stores write it."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


class _Budget:
    """The document's exact size as compact JSON while a patch applies, and what its
    ``copy`` operations have copied; with no limit nothing is measured."""

    def __init__(self, doc: JSON, max_bytes: int | None) -> None:
        self.max_bytes = max_bytes
        self.size = json_size(doc) if max_bytes is not None else 0
        self.copied = 0

    def measure(self, value: JSON) -> int:
        return json_size(value) if self.max_bytes is not None else 0

    def on(self, cost: Callable[[], int]) -> int:
        """``cost()`` when sizes are kept, else 0 (nothing is computed)."""
        return cost() if self.max_bytes is not None else 0

    def change(self, delta: int) -> None:
        """Account for ``delta`` bytes; fail, changing nothing, when growing past the limit."""
        limit = self.max_bytes
        if limit is not None and delta > 0 and self.size + delta > limit:
            raise _OpFailed(
                f"the state would grow to {self.size + delta} bytes as JSON, over its limit"
                f" of {limit} bytes (max_state_bytes)"
            )
        self.size += delta

    def copy(self, size: int) -> None:
        self.copied += size
        if self.max_bytes is not None and self.copied > COPY_FACTOR * self.max_bytes:
            raise _OpFailed(
                f"the patch's copy operations would copy more than"
                f" {COPY_FACTOR * self.max_bytes} bytes in all ({COPY_FACTOR} times"
                " max_state_bytes, the most one patch may copy)"
            )


def _slot(parent: dict[str, Any] | list[Any], token: str, *, others: bool) -> int:
    """Bytes a member costs besides its value: ``"key":`` in an object, plus a comma when
    the container holds ``others``."""
    key = json_size(token) + 1 if isinstance(parent, dict) else 0
    return key + (1 if others else 0)


def _add(doc: JSON, tokens: Sequence[str], value: JSON, budget: _Budget, size: int | None) -> JSON:
    """Add ``value`` (``size`` bytes; None: already counted, as for a move) at ``tokens``."""
    if not tokens:
        budget.change((budget.measure(value) if size is None else size) - budget.size)
        return value
    parent = _container(doc, tokens)
    token = tokens[-1]
    grows = 0 if size is None else size
    if isinstance(parent, dict):
        if token in parent:
            budget.change(grows - budget.measure(parent[token]))
        else:
            budget.change(grows + budget.on(lambda: _slot(parent, token, others=bool(parent))))
        parent[token] = value
    else:
        index = _array_index(token, len(parent), allow_end=True)
        budget.change(grows + budget.on(lambda: _slot(parent, token, others=bool(parent))))
        parent.insert(index, value)
    return doc


def _remove(
    doc: JSON, tokens: Sequence[str], budget: _Budget, *, counted: bool = True
) -> tuple[JSON, JSON]:
    """Remove the target; return the new document and the removed value (whose size is
    uncounted when ``counted`` is False: it is being moved)."""
    if not tokens:
        raise _OpFailed("cannot remove the whole document")
    parent = _container(doc, tokens)
    token = tokens[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise _OpFailed(f"member {token!r} does not exist")
        value = parent[token]
    else:
        index = _array_index(token, len(parent), allow_end=False)
        value = parent[index]
    freed = budget.on(lambda: _slot(parent, token, others=len(parent) > 1))
    budget.change(-freed - (budget.measure(value) if counted else 0))
    if isinstance(parent, dict):
        del parent[token]
    else:
        del parent[index]
    return doc, value


def _replace(doc: JSON, tokens: Sequence[str], value: JSON, budget: _Budget) -> JSON:
    if not tokens:
        budget.change(budget.measure(value) - budget.size)
        return value
    parent = _container(doc, tokens)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise _OpFailed(f"member {tokens[-1]!r} does not exist")
        budget.change(budget.measure(value) - budget.measure(parent[tokens[-1]]))
        parent[tokens[-1]] = value
    else:
        index = _array_index(tokens[-1], len(parent), allow_end=False)
        budget.change(budget.measure(value) - budget.measure(parent[index]))
        parent[index] = value
    return doc


def _member(op: dict[str, JSON], name: str) -> JSON:
    if name not in op:
        raise _OpFailed(f"the operation has no {name!r} member")
    return op[name]


def _pointer_member(op: dict[str, JSON], name: str) -> str:
    value = _member(op, name)
    if not isinstance(value, str):
        raise _OpFailed(f"{name!r} must be a JSON pointer string, not {_kind(value)}")
    return value


def _apply_one(doc: JSON, op: dict[str, JSON], budget: _Budget) -> JSON:
    name = op["op"]
    tokens = _parse_pointer(_pointer_member(op, "path"))
    if name == "add":
        value = _member(op, "value")
        return _add(doc, tokens, copy.deepcopy(value), budget, budget.measure(value))
    if name == "remove":
        return _remove(doc, tokens, budget)[0]
    if name == "replace":
        return _replace(doc, tokens, copy.deepcopy(_member(op, "value")), budget)
    if name == "test":
        expected = _member(op, "value")
        if not json_equal(_resolve(doc, tokens), expected):
            raise _OpFailed(f"test failed: the value there is not {_short(expected)}")
        return doc
    source_pointer = _pointer_member(op, "from")
    source = _parse_pointer(source_pointer)
    if name == "copy":
        # Measured and counted before the deep copy, which is what would cost the memory.
        original = _resolve(doc, source)
        size = budget.measure(original)
        budget.copy(size)
        return _add(doc, tokens, copy.deepcopy(original), budget, size)
    # move
    if source == list(tokens):
        _resolve(doc, source)
        return doc
    if len(tokens) > len(source) and list(tokens[: len(source)]) == source:
        raise _OpFailed(f"cannot move {source_pointer!r} into one of its own children")
    doc, value = _remove(doc, source, budget, counted=False)
    return _add(doc, tokens, value, budget, None)


def apply_patch(doc: JSON, ops: Sequence[JSON], *, max_bytes: int | None = None) -> JSON:
    """Apply RFC 6902 operations to a deep copy of ``doc`` and return the result.

    With ``max_bytes`` the patch is bounded (see the module's docstring): it fails before
    taking the document past ``max_bytes`` bytes of JSON. A document already over it may
    still shrink.
    """
    if not isinstance(ops, list | tuple):
        raise JsonPatchError(f"a JSON Patch must be an array of operations, not {_kind(ops)}")
    if max_bytes is not None and len(ops) > MAX_PATCH_OPERATIONS:
        raise JsonPatchError(
            f"the patch has {len(ops)} operations; one patch may have at most"
            f" {MAX_PATCH_OPERATIONS}"
        )
    budget = _Budget(doc, max_bytes)
    result = copy.deepcopy(doc)
    for index, op in enumerate(ops):
        path = op.get("path") if isinstance(op, dict) else None
        label = f"operation {index}"
        try:
            if not isinstance(op, dict):
                raise _OpFailed("an operation must be a JSON object")
            name = op.get("op")
            if name not in _OPS:
                raise _OpFailed(f"unknown op {name!r}; expected one of {', '.join(_OPS)}")
            label = f"operation {index} ({name} {path!r})"
            result = _apply_one(result, op, budget)
        except _OpFailed as exc:
            raise JsonPatchError(
                f"{label}: {exc}", index=index, path=path if isinstance(path, str) else None
            ) from None
    return result
