"""Pages of zeros handed back to the kernel: the process's own memory shrinks by them, they
still read as zeros and take writes, a page holding anything else is kept as it was, and an
event loop from ``new_event_loop`` starts with its receive buffer given back and still
carries a message larger than that buffer."""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import struct
import sys

import pytest
from ember.protocol.stream import new_event_loop
from ember.protocol.zero_pages import PAGE, release_object_zero_pages, release_zero_pages

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="madvise and /proc: Linux")


def _own_pages(address: int, size: int) -> int:
    """How many of the pages wholly inside the range are in memory and this process's alone
    (``/proc/self/pagemap``: present, exclusively mapped; a given-back page that was read
    since maps the kernel's shared zero page, which is neither)."""
    first = (address + PAGE - 1) // PAGE
    end = (address + size) // PAGE
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        data = f.read((end - first) * 8)
    return sum((e >> 63) & (e >> 56) & 1 for e in struct.unpack(f"{len(data) // 8}Q", data))


def test_zero_pages_go_back_and_still_read_as_zeros():
    size = 64 * PAGE
    buf = ctypes.create_string_buffer(size)  # zeroed: every page written
    address = ctypes.addressof(buf)
    whole = _own_pages(address, size)
    assert whole >= 62
    keep_at = 10 * PAGE + 123  # one page holds something: it must be kept as it is
    buf[keep_at] = b"\x07"
    released = release_zero_pages(address, size)
    kept_page = (address + keep_at) // PAGE
    # Every whole page but the one holding the byte went back.
    assert released == (whole - 1) * PAGE
    assert _own_pages(address, size) == 1
    assert buf[keep_at] == b"\x07"
    assert _own_pages(kept_page * PAGE, PAGE) == 1
    # Given-back pages read as zeros, and take writes again.
    assert buf.raw[:keep_at] == bytes(keep_at)
    assert buf.raw[keep_at + 1 :] == bytes(size - keep_at - 1)
    buf[40 * PAGE] = b"\x01"
    assert buf[40 * PAGE] == b"\x01"
    assert _own_pages(address, size) == 2


def test_a_new_event_loop_gives_back_its_receive_buffer_and_still_works():
    pytest.importorskip("uvloop")
    loop = new_event_loop()
    try:
        size = type(loop).__basicsize__
        assert size > 200_000, "uvloop's loop carries its receive buffer inline"
        # Of the ~62 pages inside the object, the buffer's went back: a few fields remain.
        assert _own_pages(id(loop), size) <= 4
        release_object_zero_pages(loop)  # reads them again: still nothing of its own
        assert _own_pages(id(loop), size) <= 4

        async def echo_large() -> bytes:
            a, b = socket.socketpair()
            reader, writer = await asyncio.open_connection(sock=a)
            payload = os.urandom(600_000)  # more than the 256 kB buffer: several reads

            def send_all() -> None:
                b.sendall(payload)
                b.shutdown(socket.SHUT_WR)

            sender = asyncio.get_running_loop().run_in_executor(None, send_all)
            got = await asyncio.wait_for(reader.read(-1), 30)
            await sender
            writer.close()
            b.close()
            return got == payload

        assert loop.run_until_complete(echo_large())
    finally:
        loop.close()
