"""``agentik grpc METHOD [JSON]``: call one engine RPC from the shell, where grpcurl is not
at hand (Debian does not package it).

The request is the method's message in JSON (ProtoJSON: ``session_id`` or ``sessionId``,
enums by name); the answer is printed as JSON, one line per event for the streaming
methods. The token comes from ``--token`` or ``AGENTIK_TOKEN``. It uses the generated stubs,
so it knows exactly the methods of this engine's contract.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

__all__ = ["add_command"]

_STREAMING = frozenset({"Run", "Subscribe"})


def _methods() -> dict[str, tuple[Any, Any]]:
    """Method name → (request class, response class) of ``AgentEngine``."""
    from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["AgentEngine"]
    return {
        method.name: (
            getattr(pb, method.input_type.name),
            getattr(pb, method.output_type.name),
        )
        for method in service.methods
    }


def _call(args: argparse.Namespace) -> int:
    import grpc
    from google.protobuf import json_format

    from agentik.config import ConfigError, load_settings
    from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc

    methods = _methods()
    if args.method not in methods:
        print(
            f"agentik grpc: no method {args.method!r}; the engine has: {', '.join(methods)}",
            file=sys.stderr,
        )
        return 2
    request_class, _ = methods[args.method]
    try:
        request = json_format.Parse(args.json or "{}", request_class())
    except json_format.ParseError as exc:
        print(
            f"agentik grpc: the request is not a {request_class.__name__}: {exc}", file=sys.stderr
        )
        return 2
    target = args.target
    if not target:
        try:
            target = load_settings(args.config, os.environ, mcp=False).web.engine_target
        except ConfigError as exc:
            print(f"agentik: configuration error: {exc}", file=sys.stderr)
            return 2
    token = args.token or os.environ.get("AGENTIK_TOKEN", "")
    source = "--token" if args.token else "AGENTIK_TOKEN" if token else ""
    metadata = [("authorization", f"Bearer {token}")] if token else []
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.AgentEngineStub(channel)
        call = getattr(stub, args.method)
        try:
            if args.method in _STREAMING:
                for event in call(request, metadata=metadata):
                    print(_json(event), flush=True)
            else:
                print(_json(call(request, metadata=metadata, timeout=args.timeout)))
        except grpc.RpcError as exc:
            print(f"agentik grpc: {_refusal(exc, target, source)}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
    return 0


_NOT_CONNECTED = ("failed to connect", "connection refused", "dns resolution failed")
"""How gRPC words a call that never reached an engine (its status is UNAVAILABLE, as an
engine's own refusal can be)."""


def _refusal(exc: Any, target: str, token_source: str) -> str:
    """The line for a failed call: the status and the engine's words, or what to do when
    no engine answered or the token is missing or refused."""
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    name = code.name if code is not None else "UNKNOWN"
    details = str(exc.details() or "")
    if name == "UNAVAILABLE" and any(words in details.lower() for words in _NOT_CONNECTED):
        return (
            f"cannot reach the engine at {target}: is `make run` (or `agentik engine`) "
            "running? (--target or AGENTIK_ENGINE_TARGET names another)"
        )
    if name == "UNAUTHENTICATED" and not token_source:
        return f"{name}: the engine needs a token: set AGENTIK_TOKEN or pass --token"
    if name == "UNAUTHENTICATED":
        return f"{name}: the token in {token_source} was refused: {details}"
    return f"{name}: {details}"


def _json(message: Any) -> str:
    from google.protobuf import json_format

    return json.dumps(
        json_format.MessageToDict(message, preserving_proto_field_name=True),
        ensure_ascii=False,
    )


def add_command(commands: Any) -> None:
    """Add ``grpc`` to the ``agentik`` command."""
    parser = commands.add_parser(
        "grpc",
        help="call one engine RPC with a JSON request (like grpcurl), e.g. "
        "agentik grpc ListSessions '{\"limit\": 5}'",
    )
    parser.add_argument("method", help="an AgentEngine method, e.g. Run, ListSessions")
    parser.add_argument("json", nargs="?", help="the request as JSON (default: {})")
    parser.add_argument(
        "--target", help="the engine's gRPC target (default: $AGENTIK_ENGINE_TARGET / grpc_addr)"
    )
    parser.add_argument("--token", help="bearer token (default: $AGENTIK_TOKEN)")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds for a unary call (default 30)"
    )
    parser.set_defaults(handler=_call)
