"""The A2A 1.0 AgentCard JSON schema, built from the a2a-sdk's own ``lf.a2a.v1`` protobuf
descriptors the way the spec's schema is generated from ``a2a.proto``: ProtoJSON names
(camelCase), ``additionalProperties: false`` on every message, ``required`` from
``google.api.field_behavior = REQUIRED``, at most one field of each ``oneof``.

Built at test time from the installed package, so it follows the SDK's version of the spec
and no schema file is copied into the repository.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, cast

from a2a.types import AgentCard
from google.protobuf.descriptor import Descriptor, FieldDescriptor

__all__ = ["agent_card_schema"]

_SCALARS: dict[int, dict[str, Any]] = {
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BYTES: {"type": "string"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_INT32: {"type": "integer"},
    FieldDescriptor.TYPE_SINT32: {"type": "integer"},
    FieldDescriptor.TYPE_SFIXED32: {"type": "integer"},
    FieldDescriptor.TYPE_UINT32: {"type": "integer", "minimum": 0},
    FieldDescriptor.TYPE_FIXED32: {"type": "integer", "minimum": 0},
    # ProtoJSON writes 64-bit integers as strings and reads either.
    FieldDescriptor.TYPE_INT64: {"type": ["integer", "string"]},
    FieldDescriptor.TYPE_SINT64: {"type": ["integer", "string"]},
    FieldDescriptor.TYPE_SFIXED64: {"type": ["integer", "string"]},
    FieldDescriptor.TYPE_UINT64: {"type": ["integer", "string"]},
    FieldDescriptor.TYPE_FIXED64: {"type": ["integer", "string"]},
    FieldDescriptor.TYPE_FLOAT: {"type": ["number", "string"]},
    FieldDescriptor.TYPE_DOUBLE: {"type": ["number", "string"]},
}


_FIELD_BEHAVIOR = "google.api.field_behavior"
_REQUIRED = 2  # google.api.FieldBehavior.REQUIRED


def _required(field: FieldDescriptor) -> bool:
    for option, value in field.GetOptions().ListFields():
        if option.full_name == _FIELD_BEHAVIOR:
            return _REQUIRED in value
    return False


class _Builder:
    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}

    def message(self, descriptor: Descriptor) -> dict[str, Any]:
        """A ``$ref`` to the message's definition, made on first use."""
        name = descriptor.full_name
        if name.startswith("google.protobuf."):
            return {}  # well-known types (Struct, Timestamp, ...) have their own JSON forms
        if name not in self.defs:
            self.defs[name] = {}  # placed first: messages may refer to themselves
            self.defs[name] = self._object(descriptor)
        return {"$ref": f"#/$defs/{name}"}

    def _object(self, descriptor: Descriptor) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {field.json_name: self._field(field) for field in descriptor.fields},
            "additionalProperties": False,
        }
        required = [field.json_name for field in descriptor.fields if _required(field)]
        if required:
            schema["required"] = required
        pairs = [
            {"required": [a.json_name, b.json_name]}
            for oneof in descriptor.oneofs
            if not oneof.name.startswith("_")  # proto3 `optional` fields, not a real oneof
            for a, b in combinations(oneof.fields, 2)
        ]
        if pairs:
            schema["not"] = {"anyOf": pairs}
        return schema

    def _field(self, field: FieldDescriptor) -> dict[str, Any]:
        message = field.message_type
        if message is not None and message.GetOptions().map_entry:
            value = message.fields_by_name["value"]
            return {"type": "object", "additionalProperties": self._single(value)}
        if field.is_repeated:
            return {"type": "array", "items": self._single(field)}
        return self._single(field)

    def _single(self, field: FieldDescriptor) -> dict[str, Any]:
        if field.message_type is not None:
            return self.message(field.message_type)
        if field.enum_type is not None:
            values = field.enum_type.values
            return {"enum": [value.name for value in values] + [value.number for value in values]}
        return dict(_SCALARS[field.type])


def agent_card_schema() -> dict[str, Any]:
    """The JSON schema (2020-12) of an A2A 1.0 ``AgentCard``."""
    builder = _Builder()
    root = builder.message(cast(Descriptor, AgentCard.DESCRIPTOR))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **root,
        "$defs": builder.defs,
    }
