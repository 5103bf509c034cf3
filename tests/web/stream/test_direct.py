"""Streams written by the worker's asyncio loop (``web_facade/stream/direct.py``): a real
``AioRelay`` over scripted calls, writing to one end of a real socket pair that the test
reads as an HTTP client would. Under gunicorn, every AG-UI and ``/agentik`` stream of the
e2e suites goes this way (``tests/web/e2e/test_edge.py`` cuts one that is not read)."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import grpc.aio
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.web.conftest import WAIT
from tests.web.stream.test_aio_relay import ScriptedCall, ScriptedEngine, _finished, _text
from web_facade import aio_loop
from web_facade.stream import DRAINING, HEARTBEAT, EventStream
from web_facade.stream.aio_relay import AioRelay
from web_facade.stream.direct import direct_socket
from web_facade.stream.relay import END, Item, opened

LOOP_THREAD = "agentik-aio-loop"
WRITE_TIMEOUT = 0.5


class Paced(ScriptedCall):
    """Yields its events ``gap`` seconds apart (the first at once), then ends or hangs."""

    def __init__(self, events: list[pb.Event], gap: float = 0.05, hang: bool = False) -> None:
        super().__init__(events, hang=hang)
        self.gap = gap
        self.read_count = 0

    async def read(self) -> Any:
        if self._next:
            await asyncio.sleep(self.gap)
        self.read_count += 1
        return await super().read()


class Gated(ScriptedCall):
    """Yields its first ``ahead`` events at once, the rest once ``gate`` is set."""

    def __init__(self, events: list[pb.Event], ahead: int) -> None:
        super().__init__(events)
        self.ahead = ahead
        self.gate = threading.Event()
        self.read_count = 0

    async def read(self) -> Any:
        if self._next >= self.ahead and not self.gate.is_set():
            await asyncio.to_thread(self.gate.wait)
        await asyncio.sleep(0)  # as a gRPC read: the loop runs between two messages
        self.read_count += 1
        return await super().read()


class Numbers(EventStream):
    """Each event as its seq; notes which thread encoded which seq."""

    name = "numbers"
    direct_writes = True

    def __init__(self, relay: AioRelay, heartbeat: float = 30.0) -> None:
        super().__init__(relay, heartbeat)
        self.encoded_on: dict[int, str] = {}

    def opening(self) -> bytes:
        return b"open;"

    def encode_event(self, event: pb.Event) -> bytes:
        self.encoded_on[event.seq] = threading.current_thread().name
        if event.WhichOneof("kind") == "run_finished":
            self.done = True
        if event.text_message_content.delta:
            return f"{event.seq}:{event.text_message_content.delta};".encode()
        return f"{event.seq};".encode()

    def encode_error(self, error: grpc.RpcError) -> bytes:
        return b"error;"

    def on_end(self) -> bytes:
        return b"end;"

    def on_drain(self) -> bytes:
        return b"drain;"


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(the server's end, with the worker's write timeout; the client's end)."""
    server, client = _connected()
    yield server, client
    server.close()
    client.close()


@pytest.fixture
def narrow() -> Iterator[tuple[socket.socket, socket.socket]]:
    """As ``pair``, with 16 KiB socket buffers: big messages fill them."""
    server, client = _connected(buffer=16384)
    yield server, client
    server.close()
    client.close()


def _connected(buffer: int = 0) -> tuple[socket.socket, socket.socket]:
    """A loopback TCP connection (the kernel's buffers ``buffer`` bytes when given)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.socket()
        if buffer:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
        client.connect(listener.getsockname())
        server, _ = listener.accept()
    if buffer:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
    server.settimeout(WRITE_TIMEOUT)
    return server, client


def _environ(sock: Any, protocol: str = "HTTP/1.1", method: str = "POST") -> dict[str, Any]:
    return {"SERVER_PROTOCOL": protocol, "REQUEST_METHOD": method, "gunicorn.socket": sock}


def _stream(call: ScriptedCall, server: socket.socket, heartbeat: float = 30.0) -> Numbers:
    relay = AioRelay(ScriptedEngine([call], []), "Run", pb.RunRequest())
    opened(relay, WAIT)  # as ``open_run``: the first event is in before the response starts
    stream = Numbers(relay, heartbeat)
    stream._environ = _environ(server)
    return stream


class ChunkReader:
    """Reads HTTP/1.1 chunks from the client's end of the pair."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _more(self, deadline: float) -> None:
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = self.sock.recv(1 << 20)
        assert data, "the server closed the stream"
        self.buffer += data

    def chunk(self, within: float = WAIT) -> bytes:
        deadline = time.monotonic() + within
        while b"\r\n" not in self.buffer:
            self._more(deadline)
        size_line, _, rest = self.buffer.partition(b"\r\n")
        size = int(size_line, 16)
        while len(rest) < size + 2:
            self._more(deadline)
            rest = self.buffer.partition(b"\r\n")[2]
        assert rest[size : size + 2] == b"\r\n", "a chunk not framed as HTTP/1.1's"
        self.buffer = rest[size + 2 :]
        return rest[:size]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_loop_writes_each_message_as_a_chunk_as_it_comes_and_the_body_ends(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    server, client = pair
    aio_loop.event_loop()  # its own descriptors are not the writer's
    fds = _open_fds()
    events = [_text(1), _text(2), _text(3), _finished(4)]
    stream = _stream(Paced(events), server)
    body = iter(stream)
    first = next(body)  # what gunicorn writes itself, with the head
    assert first == b"open;1:x;"
    with pytest.raises(StopIteration):
        next(body)  # the loop wrote the rest; the body ends normally
    reader = ChunkReader(client)
    assert [reader.chunk() for _ in range(3)] == [b"2:x;", b"3:x;", b"4;"]
    assert {stream.encoded_on[seq] for seq in (2, 3, 4)} == {LOOP_THREAD}
    assert stream.done
    assert stream.relay.join(WAIT)
    assert _open_fds() == fds  # the writer's own descriptor is closed


def test_a_client_that_stops_reading_is_cut_after_the_write_timeout_and_nothing_more_is_read(
    narrow: tuple[socket.socket, socket.socket],
) -> None:
    server, _client = narrow
    events = [_text(seq, 100_000) for seq in range(1, 201)]
    call = Gated(events, ahead=1)
    stream = _stream(call, server)
    body = iter(stream)
    next(body)
    cut: list[BaseException] = []

    def write() -> None:
        try:
            next(body)
        except BaseException as exc:
            cut.append(exc)

    started = time.monotonic()
    writing = threading.Thread(target=write)
    writing.start()
    time.sleep(0.05)  # the loop has taken the stream over
    call.gate.set()
    time.sleep(WRITE_TIMEOUT / 2)
    reads = call.read_count
    time.sleep(WRITE_TIMEOUT / 4)
    # The relay waits for the socket: a message or two beyond what the socket's buffers
    # took, not the 200 (20 MB) of the stream, and nothing while the socket is full.
    assert reads <= 6, reads
    assert call.read_count == reads
    writing.join(WAIT)
    waited = time.monotonic() - started
    assert WRITE_TIMEOUT * 0.9 <= waited < WAIT
    (error,) = cut
    assert isinstance(error, TimeoutError)
    assert error.errno == errno.ETIMEDOUT  # gunicorn counts it, and closes the connection
    assert call.cancelled.wait(WAIT)  # the engine call goes with the client
    assert call.read_count <= reads + 1


def test_a_slow_reader_gets_every_byte_of_messages_larger_than_the_socket_takes(
    narrow: tuple[socket.socket, socket.socket],
) -> None:
    server, client = narrow
    server.settimeout(WAIT)
    events = [_text(seq, 300_000) for seq in range(1, 9)] + [_finished(9)]
    stream = _stream(Paced(events, gap=0.0), server)
    body = iter(stream)
    first = next(body)
    ended: list[BaseException | None] = []

    def finish() -> None:
        try:
            next(body)
        except StopIteration:
            ended.append(None)
        except BaseException as exc:
            ended.append(exc)

    writing = threading.Thread(target=finish)
    writing.start()
    reader = ChunkReader(client)
    received = [first]
    while not received[-1].endswith(b"9;"):
        time.sleep(0.01)  # slower than the loop writes: the socket fills
        received.append(reader.chunk())
    writing.join(WAIT)
    assert ended == [None]
    text = b"".join(received).decode()
    assert text == "open;" + "".join(f"{seq}:{'x' * 300_000};" for seq in range(1, 9)) + "9;"


def test_a_client_that_left_ends_the_body_with_a_broken_pipe(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    server, client = pair
    call = Paced([_text(1), _text(2), _finished(3)], gap=0.2)
    stream = _stream(call, server)
    body = iter(stream)
    next(body)
    client.close()
    with pytest.raises(BrokenPipeError) as left:
        next(body)
    assert left.value.errno == errno.EPIPE  # gunicorn closes it quietly
    assert stream.encoded_on[2] == LOOP_THREAD


def test_a_quiet_stream_gets_heartbeats_and_ends_with_its_drain_frames(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    server, client = pair
    call = Paced([_text(1)], hang=True)
    stream = _stream(call, server, heartbeat=0.2)
    body = iter(stream)
    next(body)
    ended: list[str] = []
    finishing = threading.Thread(target=lambda: ended.append(repr(list(body))))
    finishing.start()
    reader = ChunkReader(client)
    try:
        assert reader.chunk(within=2.0) == HEARTBEAT
        assert reader.chunk(within=2.0) == HEARTBEAT
        DRAINING.set()
        assert reader.chunk(within=2.0) == b"drain;"
        finishing.join(WAIT)
    finally:
        DRAINING.clear()
    assert ended == ["[]"]  # ended normally
    assert call.cancelled.wait(WAIT)


def test_the_engine_stream_ending_or_breaking_ends_the_body_with_the_protocols_frames(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    server, client = pair
    broken = grpc.aio.AioRpcError(
        grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), "boom"
    )
    call = Paced([_text(1), _text(2)])
    call.error = broken
    stream = _stream(call, server)
    body = iter(stream)
    next(body)
    with pytest.raises(StopIteration):
        next(body)
    reader = ChunkReader(client)
    assert [reader.chunk(), reader.chunk()] == [b"2:x;", b"error;"]

    server2, client2 = _connected()
    try:
        stream = _stream(Paced([_text(1), _text(2)]), server2)
        body = iter(stream)
        next(body)
        with pytest.raises(StopIteration):
            next(body)
        reader = ChunkReader(client2)
        assert [reader.chunk(), reader.chunk()] == [b"2:x;", b"end;"]
    finally:
        server2.close()
        client2.close()


def test_what_the_relay_queued_before_the_loop_took_over_is_written_first() -> None:
    call = Gated([_text(seq) for seq in range(1, 8)], ahead=5)
    relay = AioRelay(ScriptedEngine([call], []), "Run", pb.RunRequest())
    deadline = time.monotonic() + WAIT
    while relay._queue.qsize() < 5:
        assert time.monotonic() < deadline, "the relay did not read ahead"
        time.sleep(0.01)
    taken = relay.get(WAIT)  # the reader took one
    assert isinstance(taken, pb.Event) and taken.seq == 1
    later: list[Item] = []

    def sink(items: list[Item]) -> None:
        later.extend(items)

    async def attach() -> list[Item]:
        return relay.attach(sink)

    waiting = aio_loop.run(attach(), WAIT)
    assert [item.seq for item in waiting] == [2, 3, 4, 5]  # type: ignore[union-attr]
    call.gate.set()
    assert relay.join(WAIT)
    assert [getattr(item, "seq", item) for item in later] == [6, 7, END]
    assert relay.get_nowait() is None  # nothing more went through the queue


def test_the_loop_writes_only_plain_http_1_1_sockets_with_a_write_timeout(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    server, _client = pair
    assert direct_socket(_environ(server)) is server
    assert direct_socket(None) is None
    assert direct_socket(_environ(server, protocol="HTTP/1.0")) is None  # not chunked
    assert direct_socket(_environ(server, method="HEAD")) is None  # no body
    assert direct_socket({"SERVER_PROTOCOL": "HTTP/1.1", "REQUEST_METHOD": "GET"}) is None

    class Wrapped(socket.socket):  # as ssl.SSLSocket is
        pass

    assert direct_socket(_environ(Wrapped.__new__(Wrapped))) is None
    blocking = socket.socket()
    try:
        assert direct_socket(_environ(blocking)) is None  # no write timeout
    finally:
        blocking.close()


def test_a_stream_the_loop_may_not_write_is_written_by_the_response_thread(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    server, _client = pair
    stream = _stream(Paced([_text(1), _text(2), _finished(3)]), server)
    stream._environ = _environ(server, protocol="HTTP/1.0")
    chunks = list(stream)
    assert b"".join(chunks) == b"open;1:x;2:x;3;"
    assert set(stream.encoded_on.values()) == {threading.current_thread().name}
