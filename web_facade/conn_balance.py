"""Open-connection counts the web workers share, so that one worker does not take them all.

Every worker of the facade waits on the same listening socket; when many clients connect
at once, the worker that happens to be awake accepts nearly all of them (and keeps them
for all their kept-alive requests) while the others idle. Each worker therefore publishes
its open-connection count in its slot of a small shared array of int32 (one slot per
worker, -1 for a worker that is not running, booting or stopping); a worker that holds
more than the least loaded *other* live worker plus :data:`SLACK` stops accepting for
:data:`PAUSE` seconds after an accept, so that the others take the next connections
(``web_facade.gunicorn_worker.EdgeThreadWorker``).

The array is an anonymous shared mapping made by gunicorn's master (``agentik web``:
``web_facade.gunicorn_conf.pre_fork``, inherited through ``fork``) or a memfd made by
``agentik serve`` (``web_facade.serve_web``, inherited through ``exec`` like the
listening socket). Its size is fixed when it is made; a worker that finds no free slot
runs as if there were no array.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

__all__ = ["PAUSE", "SLACK", "Slots"]

SLACK = 2
"""Connections a worker may hold beyond the least loaded other worker before it pauses."""
PAUSE = 0.001
"""Seconds a worker that holds too many stops accepting for, after an accept. Never
longer: a peer that is stuck or dead slows the busy worker's accepts, never stops them."""
FREE = -1
"""A slot's value when no running worker owns it."""
_SIZE = 4  # int32


class Slots:
    """``count`` int32 slots on a shared mapping (all :data:`FREE` when made)."""

    def __init__(self, mapping: mmap.mmap, fd: int = -1) -> None:
        self._mapping = mapping
        self._view = memoryview(mapping).cast("i")
        self.fd = fd
        """The memfd behind the mapping (``agentik serve``), -1 for an anonymous one."""
        self.owners: list[Any] = [None] * len(self._view)
        """Who owns each slot (the master's own bookkeeping; a worker does not use it)."""

    @classmethod
    def anonymous(cls, count: int) -> Slots:
        """Slots on an anonymous mapping, shared with the processes forked after this."""
        slots = cls(mmap.mmap(-1, max(count, 1) * _SIZE))
        slots.clear()
        return slots

    @classmethod
    def memfd(cls, count: int) -> Slots:
        """Slots on a memfd, whose descriptor a child inherits (``pass_fds``)."""
        fd = os.memfd_create("agentik-web-balance")
        try:
            os.ftruncate(fd, max(count, 1) * _SIZE)
            slots = cls(mmap.mmap(fd, max(count, 1) * _SIZE), fd)
        except BaseException:
            os.close(fd)
            raise
        slots.clear()
        return slots

    @classmethod
    def from_fd(cls, fd: int) -> Slots:
        """The slots a parent made with :meth:`memfd`, from the inherited descriptor."""
        size = os.fstat(fd).st_size
        if size < _SIZE or size % _SIZE:
            raise ValueError(f"not a slot array: {size} bytes")
        return cls(mmap.mmap(fd, size), fd)

    def __len__(self) -> int:
        return len(self._view)

    def clear(self) -> None:
        for index in range(len(self._view)):
            self._view[index] = FREE

    def __getitem__(self, index: int) -> int:
        value: int = self._view[index]
        return value

    def __setitem__(self, index: int, value: int) -> None:
        self._view[index] = value

    def least_other(self, index: int) -> int | None:
        """The smallest count among the live slots other than ``index`` (None: none)."""
        least: int | None = None
        for other, value in enumerate(self._view):
            if other != index and value >= 0 and (least is None or value < least):
                least = value
        return least

    def claim(self, owner: Any, live: Any) -> int:
        """A free slot for ``owner`` (the master's side), marked :data:`FREE` until the
        owner runs and says its count; -1 when every slot is taken. A slot whose owner is
        not in ``live`` (a collection) is free, even if its exit was never reported."""
        for index, current in enumerate(self.owners):
            if current is None or current not in live:
                self.owners[index] = owner
                self._view[index] = FREE
                return index
        return -1

    def release(self, owner: Any) -> None:
        """``owner`` stopped: its slot is free and no longer counted."""
        for index, current in enumerate(self.owners):
            if current is not None and current == owner:
                self.owners[index] = None
                self._view[index] = FREE

    def close(self) -> None:
        self._view.release()
        self._mapping.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
