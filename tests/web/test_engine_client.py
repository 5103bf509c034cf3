"""With several engine workers on one port, a facade worker spreads its calls over several
connections (the kernel hands each connection to one engine process)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from web_facade.engine_client import EngineClient


class _Peers(pb_grpc.AgentEngineServicer):
    """Answers GetSession with NOT_FOUND and remembers which connection each call came on."""

    def __init__(self) -> None:
        self.peers: list[str] = []

    def GetSession(
        self, request: pb.GetSessionRequest, context: grpc.ServicerContext
    ) -> pb.Session:
        self.peers.append(context.peer())
        context.abort(grpc.StatusCode.NOT_FOUND, "no such session")


@pytest.fixture
def server() -> Iterator[tuple[str, _Peers]]:
    servicer = _Peers()  # type: ignore[abstract]  # only GetSession is called
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_AgentEngineServicer_to_server(servicer, grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        grpc_server.stop(None)


def _call(client: EngineClient) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        client.engine.GetSession(pb.GetSessionRequest(session_id="s"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_calls_take_each_of_several_connections_in_turn(server: tuple[str, _Peers]) -> None:
    target, servicer = server
    client = EngineClient(target, channels=3)
    try:
        for _ in range(6):
            _call(client)
    finally:
        client.close()
    assert len(set(servicer.peers)) == 3, servicer.peers
    assert servicer.peers[:3] == servicer.peers[3:]  # in turn


def test_one_engine_one_connection(server: tuple[str, _Peers]) -> None:
    target, servicer = server
    client = EngineClient(target)
    try:
        for _ in range(4):
            _call(client)
    finally:
        client.close()
    assert len(set(servicer.peers)) == 1
