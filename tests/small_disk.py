"""A real, small filesystem (tmpfs) that tests can fill up, for the disk-full faults.

Mounting needs root. Elsewhere the tests skip with the reason — or fail where
``AGENTIK_REQUIRE_TMPFS`` is set (CI sets it), so they can never be skipped silently there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["SmallDisk", "small_disk"]

_CHUNK = b"\0" * 65536


class SmallDisk:
    """A tmpfs of a fixed size at ``path``; ``fill`` takes every free byte, ``free`` gives
    them back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._filler = path / "filler"

    def fill(self, leave: int = 0) -> None:
        """Write until the filesystem says ENOSPC (the file stays until ``free``), then
        give ``leave`` bytes back."""
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            chunk = _CHUNK
            while chunk:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    chunk = chunk[: len(chunk) // 2]  # take the last few bytes as well
            if leave:
                os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
        finally:
            os.close(fd)

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)


def _unavailable(reason: str) -> None:
    if os.environ.get("AGENTIK_REQUIRE_TMPFS"):
        pytest.fail(f"disk-full tests are required here but cannot run: {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def small_disk(where: Path, size: str = "2m") -> Iterator[SmallDisk]:
    """Mount a tmpfs of ``size`` at ``where`` for the duration of the block."""
    if os.geteuid() != 0:
        _unavailable("mounting a small tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        _unavailable(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield SmallDisk(where)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
