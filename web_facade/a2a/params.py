"""ProtoJSON params read into the SDK's protobuf requests, refused in A2A's words.

``json_format.ParseDict`` alone words a value of the wrong type with Python's exception
text (``invalid literal for int() with base 10: 'abc'``, ``'int' object is not iterable``)
and names no list index; and, told to ignore unknown fields as the SDK does, it also drops
an enum name it does not know (``ListTasks {"status": "BOGUS"}`` listed every task) and
reads bytes with a lenient base64 that skips what is not base64 (``"!!!"`` is zero bytes).
So :func:`parse_params` first walks the params along the request's descriptor and refuses
what is not of its field's type as InvalidParams, ``field: must be ...``, the field named
as the client wrote it (``message.parts[1].raw``); unknown fields are still ignored.
"""

from __future__ import annotations

import re
from typing import Any, Final, TypeVar, cast

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message as ProtoMessage

from web_facade.a2a.errors import invalid_params

__all__ = ["parse_params"]

P = TypeVar("P", bound=ProtoMessage)

_INTEGER_RANGES: Final[dict[int, tuple[int, int]]] = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
"""Each integer type's range, as ProtoJSON takes it (a number, or a string of digits)."""

_WELL_KNOWN: Final[dict[str, tuple[type | None, str]]] = {
    "google.protobuf.Struct": (dict, "must be an object"),
    "google.protobuf.ListValue": (list, "must be a list"),
    "google.protobuf.Value": (None, ""),  # any JSON value
    "google.protobuf.Timestamp": (str, "must be an RFC 3339 timestamp string"),
    "google.protobuf.Duration": (str, "must be a duration string such as 1.5s"),
    "google.protobuf.FieldMask": (str, "must be a string of field paths"),
}
"""Well-known types ProtoJSON writes as other JSON: what each must be."""

_DIGITS = re.compile(r"-?[0-9]+")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")
"""ProtoJSON bytes: base64, standard or URL-safe alphabet, padding optional."""


def parse_params(params: dict[str, Any], message: P) -> P:
    """``params`` (ProtoJSON) as ``message``; InvalidParams naming the field for a value
    that is not of its field's type. Unknown fields are ignored, as the SDK does."""
    _check_message(params, cast(Descriptor, message.DESCRIPTOR), "")
    try:
        return json_format.ParseDict(params, message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:  # what the walk does not see (two of a oneof)
        text = str(exc)
        fields = re.findall(r"Failed to parse (\w+) field", text)
        reason = text.rsplit("field: ", 1)[-1].rstrip(".") or text
        raise invalid_params(".".join(fields) or "params", reason) from None


def _check_message(value: object, descriptor: Descriptor, where: str) -> None:
    if not isinstance(value, dict):
        raise invalid_params(where or "params", "must be an object")
    fields = {f.json_name: f for f in descriptor.fields} | {f.name: f for f in descriptor.fields}
    for key, item in value.items():
        field = fields.get(key)
        if field is None or item is None:  # unknown (ignored), or null: the default
            continue
        path = f"{where}.{key}" if where else key
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            if not isinstance(item, dict):
                raise invalid_params(path, "must be an object")
        elif field.is_repeated:
            if not isinstance(item, list):
                raise invalid_params(path, "must be a list")
            for index, element in enumerate(item):
                if element is None:
                    raise invalid_params(f"{path}[{index}]", "must not be null")
                _check_value(element, field, f"{path}[{index}]")
        else:
            _check_value(item, field, path)


def _check_value(value: object, field: FieldDescriptor, where: str) -> None:
    """Refuse ``value`` for ``field`` unless ProtoJSON reads it as the client meant."""
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        assert field.message_type is not None
        known = _WELL_KNOWN.get(field.message_type.full_name)
        if known is None:
            _check_message(value, field.message_type, where)
        elif known[0] is not None and not isinstance(value, known[0]):
            raise invalid_params(where, known[1])
    elif kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        values = field.enum_type.values
        if isinstance(value, str) and any(v.name == value for v in values):
            return
        number = isinstance(value, int) and not isinstance(value, bool)
        if number and any(v.number == value for v in values):
            return
        names = ", ".join(v.name for v in values if v.number != 0)
        raise invalid_params(where, f"must be one of {names}")
    elif kind == FieldDescriptor.TYPE_STRING:
        if not isinstance(value, str):
            raise invalid_params(where, "must be a string")
    elif kind == FieldDescriptor.TYPE_BOOL:
        if not isinstance(value, bool):
            raise invalid_params(where, "must be true or false")
    elif kind == FieldDescriptor.TYPE_BYTES:
        if not isinstance(value, str) or not _is_base64(value):
            raise invalid_params(where, "must be base64 (standard or URL-safe alphabet)")
    elif kind in _INTEGER_RANGES:
        _check_integer(value, _INTEGER_RANGES[kind], where)
    elif isinstance(value, bool) or not isinstance(value, int | float | str):
        raise invalid_params(where, "must be a number")  # float and double


def _check_integer(value: object, bounds: tuple[int, int], where: str) -> None:
    if isinstance(value, float) and value.is_integer():
        number: int | None = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        # Past 20 digits it is out of any range (and int() of a huge string is refused).
        number = int(value) if len(value) <= 21 else bounds[1] + 1
    else:
        number = None
    low, high = bounds
    if number is None:
        raise invalid_params(where, "must be an integer")
    if not low <= number <= high:
        raise invalid_params(where, f"must be an integer between {low} and {high}")


def _is_base64(text: str) -> bool:
    if not _BASE64.fullmatch(text):
        return False
    data = text.rstrip("=")
    if len(data) % 4 == 1:  # no base64 leaves one character over
        return False
    return len(text) == len(data) or len(text) % 4 == 0  # padding only to a whole quantum
