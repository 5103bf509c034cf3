"""The plain-JSON view of protobuf values, shared with the engine: see agentik.proto_json."""

from agentik.proto_json import json_value, whole_numbers

__all__ = ["json_value", "whole_numbers"]
