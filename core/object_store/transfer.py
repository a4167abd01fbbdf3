"""Moving object bytes between nodes: raylet to raylet, in chunks, straight between arenas.

The control messages (``export_object`` / ``unexport_object``, which pin the source copy while
it is read) travel on the raylets' framed connection. The bytes themselves travel on a
separate plain TCP connection to the source's *data port*, because the framed transport would
pickle and copy every chunk several times: here the source sends each chunk with
``os.sendfile`` from its arena file and the destination ``recv_into``s it at its place in its
own arena, so a byte is copied only by the kernel.

Data protocol (after the same token frame the framed transport uses, answered by one byte,
1 = accepted):
  request:  u16 id length, object id, u64 offset, u64 length      (the puller sends several
            ahead, ``window`` chunks at most, so the stream never idles between chunks)
  response: one status byte (1 = the bytes follow, 0 = not exported), then ``length`` bytes.
Only ranges of objects the source exported (pinned) for a pull can be read. Until its token
is accepted a peer is held to ``ember.protocol.preauth``'s limits (frame size, deadline, per-IP
cap), like a stranger at any other listener.
"""

from __future__ import annotations

import hmac
import logging
import os
import socket
import struct
import threading
import time
from typing import Any

from ember.listen_rules import rule_for
from ember.protocol import preauth
from ember.protocol.transports import TWIN_PORT_TRIES

logger = logging.getLogger("ember.transfer")

_AUTH_MAGIC = b"EMBER-AUTH1"  # same first frame as protocol.connection
_LEN = struct.Struct("<I")
_REQ_HEAD = struct.Struct("<H")
_REQ_RANGE = struct.Struct("<QQ")
_MAX_TOKEN_FRAME = 4096
# Data connections served at once; pullers bound their own pulls, this bounds many pullers.
MAX_DATA_CONNECTIONS = 64


class TransferError(ConnectionError):
    """A pull failed: the source went away, refused us, or no longer has the object."""


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    """Fills ``view`` from the socket (the kernel writes straight into it)."""
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise TransferError("the peer closed the data connection")
        got += k


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    _recv_into(sock, memoryview(buf))
    return bytes(buf)


def _recv_by(sock: socket.socket, n: int, deadline: float) -> bytes:
    """``n`` bytes, all by ``deadline`` (monotonic): a per-recv timeout alone would let a peer
    sending a byte at a time hold the connection for as long as it likes."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        sock.settimeout(left)
        k = sock.recv_into(view[got:])
        if k == 0:
            raise TransferError("the peer closed the data connection")
        got += k
    return bytes(buf)


def _listen(host: str) -> list[socket.socket]:
    """The data port on ``host`` and, like every node listener, on loopback at the same port
    (``listen_rules``); a kernel-picked port taken on loopback is picked again."""
    twin = rule_for(host, cluster=True).twin
    for _ in range(TWIN_PORT_TRIES):
        socks = [_bound(host, 0)]
        if twin is None:
            return socks
        try:
            socks.append(_bound(twin, socks[0].getsockname()[1]))
            return socks
        except OSError:
            socks[0].close()
    raise OSError(f"no port free on both {host} and {twin} for the data port")


def _bound(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    return sock


class TransferServer:
    """Serves chunks of exported objects to pulling raylets (one thread per connection)."""

    def __init__(self, arena_path: str, host: str, token: bytes) -> None:
        self.token = token
        self._fd = os.open(arena_path, os.O_RDONLY)
        self._exports: dict[bytes, tuple[int, int, int]] = {}  # {oid: (offset, size, refs)}
        self._lock = threading.Lock()
        self._socks = _listen(host)
        self.address = "tcp:{}:{}".format(*self._socks[0].getsockname()[:2])
        self._closed = False
        self._slots = threading.BoundedSemaphore(MAX_DATA_CONNECTIONS)
        self.name = f"data-port {self.address[len('tcp:') :]}"
        self.refused_busy = 0  # connections turned away at the bound (in the log too)
        for sock in self._socks:
            threading.Thread(
                target=self._accept_loop, args=(sock,), name="ember-transfer", daemon=True
            ).start()

    def export(self, object_id: bytes, offset: int, size: int) -> None:
        with self._lock:
            old = self._exports.get(object_id)
            refs = old[2] + 1 if old else 1
            self._exports[object_id] = (offset, size, refs)

    def unexport(self, object_id: bytes) -> bool:
        """Drops one export; True when it was the last (the caller unpins the object)."""
        with self._lock:
            old = self._exports.get(object_id)
            if old is None:
                return False
            if old[2] > 1:
                self._exports[object_id] = (old[0], old[1], old[2] - 1)
                return False
            del self._exports[object_id]
            return True

    def close(self) -> None:
        self._closed = True
        for sock in self._socks:
            try:
                sock.close()
            except OSError:
                pass

    def _accept_loop(self, sock: socket.socket) -> None:
        while not self._closed:
            try:
                conn, peer = sock.accept()
            except OSError:
                return
            ip = preauth.peer_ip(peer)
            if not preauth.GUARD.admit(self.name, ip):
                preauth.GUARD.refuse(self.name, peer, preauth.PER_IP)
                conn.close()
                continue
            if not self._slots.acquire(blocking=False):
                preauth.GUARD.release(self.name, ip)
                self.refused_busy += 1
                logger.warning(
                    "refused a data connection: %d already served (%d refused so far)",
                    MAX_DATA_CONNECTIONS,
                    self.refused_busy,
                )
                conn.close()  # the puller reports a failed pull and its caller retries
                continue
            threading.Thread(
                target=self._serve, args=(conn, peer), name="ember-transfer-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket, peer: Any) -> None:
        try:
            self._serve_one(conn, peer)
        finally:
            self._slots.release()

    def _authenticate(self, conn: socket.socket, peer: Any) -> bool:
        """The token frame, within preauth's deadline and size limit; the peer's slot is
        released either way."""
        guard, ip = preauth.GUARD, preauth.peer_ip(peer)
        deadline = time.monotonic() + guard.deadline
        try:
            (n,) = _LEN.unpack(_recv_by(conn, 4, deadline))
            if n > _MAX_TOKEN_FRAME:  # refused on its header, nothing more read
                guard.refuse(self.name, peer, preauth.OVERSIZED, f"{n} bytes announced")
                conn.sendall(b"\x00")
                return False
            frame = _recv_by(conn, n, deadline)
        except TimeoutError:
            guard.refuse(self.name, peer, preauth.DEADLINE, f"{guard.deadline:g} s")
            return False
        finally:
            guard.release(self.name, ip)
        if not hmac.compare_digest(frame, _AUTH_MAGIC + self.token):
            guard.refuse(self.name, peer, preauth.TOKEN)
            conn.sendall(b"\x00")
            return False
        return True

    def _serve_one(self, conn: socket.socket, peer: Any) -> None:
        try:
            if not self._authenticate(conn, peer):
                return
            conn.sendall(b"\x01")
            conn.settimeout(None)  # the puller's requests may pause between objects
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                try:
                    head = _recv_exact(conn, _REQ_HEAD.size)
                except TransferError:
                    return  # the puller is done
                (id_len,) = _REQ_HEAD.unpack(head)
                object_id = _recv_exact(conn, id_len)
                offset, length = _REQ_RANGE.unpack(_recv_exact(conn, _REQ_RANGE.size))
                export = self._exports.get(object_id)
                if export is None or offset + length > export[1]:
                    conn.sendall(b"\x00")
                    continue
                conn.sendall(b"\x01")
                pos = export[0] + offset
                end = pos + length
                while pos < end:
                    sent = os.sendfile(conn.fileno(), self._fd, pos, end - pos)
                    if sent == 0:
                        raise TransferError("the puller stopped reading")
                    pos += sent
        except (OSError, TransferError) as e:
            logger.info("data connection ended: %s", e)
        finally:
            conn.close()


def pull_into(
    data_address: str,
    token: bytes,
    object_id: bytes,
    dest: Any,
    *,
    chunk_size: int,
    window: int,
    timeout: float,
) -> None:
    """Reads the exported object ``object_id`` from ``data_address`` into the writable buffer
    ``dest`` (its size is the object's), in chunks of ``chunk_size`` with ``window`` requests
    in flight. Runs on a thread: it blocks."""
    host, _, port = data_address[len("tcp:") :].rpartition(":")
    size = len(dest)
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as e:
        raise TransferError(f"cannot reach the data port {data_address}: {e}") from e
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        frame = _AUTH_MAGIC + token
        sock.sendall(_LEN.pack(len(frame)) + frame)
        if _recv_exact(sock, 1) != b"\x01":
            raise TransferError(f"{data_address} refused the cluster token")
        chunks = [(off, min(chunk_size, size - off)) for off in range(0, size, chunk_size)]
        head = _REQ_HEAD.pack(len(object_id)) + object_id
        sent = 0

        def send_more() -> None:
            nonlocal sent
            while sent < len(chunks) and sent < received + window:
                off, n = chunks[sent]
                sock.sendall(head + _REQ_RANGE.pack(off, n))
                sent += 1

        received = 0
        view = memoryview(dest)
        send_more()
        for off, n in chunks:
            if _recv_exact(sock, 1) != b"\x01":
                raise TransferError(
                    f"the source no longer exports object {object_id.hex()} (freed or evicted)"
                )
            _recv_into(sock, view[off : off + n])
            received += 1
            send_more()
    except TimeoutError as e:
        raise TransferError(f"the transfer from {data_address} stalled for {timeout:g} s") from e
    finally:
        sock.close()
