"""A TCP proxy whose connections a test can cut, as a dying host or network would."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

WAIT = 15.0
"""Upper bound for connecting upstream, in seconds."""


class CuttableProxy:
    """A TCP proxy to one engine port; :meth:`cut_to` drops every connection (with a
    reset, like a dead host) and sends new ones to another port. :meth:`hold` stops
    passing the engine's answers on (they are dropped at the cut)."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._generation = 0
        self._holding = threading.Event()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream), timeout=WAIT)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
                generation = self._generation
                self.connections += 1
            for source, sink, held in ((client, server, False), (server, client, True)):
                threading.Thread(
                    target=self._pump, args=(source, sink, held, generation), daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, held: bool, gen: int) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                while held and self._holding.is_set() and gen == self._generation:
                    time.sleep(0.005)
                if gen != self._generation:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def hold(self) -> None:
        self._holding.set()

    def cut_to(self, upstream: int) -> None:
        with self._lock:
            self.upstream = upstream
            self._generation += 1
            dropped, self._sockets = self._sockets, []
        self._holding.clear()
        for sock in dropped:
            # A close alone does not reach the peer while a pump thread is in recv.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._listener.close()
        self.cut_to(self.upstream)
