"""A2A over the engine, free of any transport: what every A2A binding shares.

A task is a chain of runs of a conversation (``convert``); a person's reply to a task that
waits for input becomes the engine's resume entries (``interrupts``); the rules every
binding checks alike (``rules``) and the A2A errors they raise (``errors``); the agent card
and its signature (``card``, ``signing``), built from settings alone. The JSON-RPC
binding (``web_facade/a2a/``) and the gRPC binding (``engine_service/a2a/``) each call the
engine their own way and answer with these.
"""
