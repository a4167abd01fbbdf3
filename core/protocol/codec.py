"""The wire format, without I/O: bytes in, messages out; messages in, bytes out.

Nothing here touches a socket or an event loop, so it can be tested with plain bytes and
reused by any transport (the asyncio ``Connection``, the in-process backend, a blocking
client).

Frames:
- A frame is a 4-byte little-endian length and that many bytes of payload.
- A payload is a pickled tuple, one of:
  ``(REQUEST, op, req_id, body)``: expects a ``REPLY`` or an ``ERROR`` with the same id;
  ``(REPLY, req_id, result)``;
  ``(ERROR, req_id, pickled_exception_or_None, type_name, message, traceback_text)``;
  ``(ONEWAY, op, body)``: expects nothing.
- The first frame a client sends to a TCP listener is not pickled: it is ``AUTH_MAGIC`` and
  the cluster token, at most ``MAX_AUTH_FRAME`` bytes. The listener compares it in constant
  time before it unpickles anything, and answers with the one-way ``AUTH_OK`` or
  ``AUTH_REFUSED`` (whose body says why).

An error travels with its exception pickled on its own, so an exception that pickles on one
side but cannot be rebuilt on the other (a class the caller cannot import, an ``__init__``
with other arguments than ``args``) costs that one reply, not the whole connection: the
caller gets a ``RemoteError`` naming the type and message instead.
"""

from __future__ import annotations

import hmac
import pickle
import struct
import traceback
from collections.abc import Callable
from typing import Any

from ember.protocol.errors import RemoteError

REQUEST, REPLY, ERROR, ONEWAY = 0, 1, 2, 3
HEADER = struct.Struct("<I")
HEADER_SIZE = HEADER.size
# A frame's length field is 32 bits; anything at or above 2 GiB is a corrupt stream.
MAX_FRAME = (1 << 31) - 1
AUTH_MAGIC = b"EMBER-AUTH1"
# The magic and a 64-character token fit with room to spare; a first frame announcing more
# than this is refused after its 4-byte header, so an unauthenticated peer cannot make a
# listener buffer more than this much.
MAX_AUTH_FRAME = 4096
AUTH_OK = "__auth_ok__"
AUTH_REFUSED = "__auth_refused__"

_pack = HEADER.pack
_unpack_from = HEADER.unpack_from
_dumps = pickle.dumps
_loads = pickle.loads
_HIGHEST = pickle.HIGHEST_PROTOCOL


class FrameError(ValueError):
    """The byte stream cannot be read any further (a corrupt or oversized frame)."""


# -- messages → bytes ----------------------------------------------------------------------
def frame(payload: bytes) -> bytes:
    """One frame: the length header and the payload."""
    return _pack(len(payload)) + payload


def encode_request(op: str, rid: int, body: Any) -> bytes:
    return _dumps((REQUEST, op, rid, body), _HIGHEST)


def encode_oneway(op: str, body: Any) -> bytes:
    return _dumps((ONEWAY, op, body), _HIGHEST)


def encode_reply(rid: int, result: Any) -> bytes:
    return _dumps((REPLY, rid, result), _HIGHEST)


def encode_error(rid: int, exc: BaseException) -> bytes:
    """An error reply: the exception (pickled separately, or None if it cannot be), its type
    name and message, and the handler's traceback as text."""
    try:
        pickled: bytes | None = _dumps(exc, _HIGHEST)
    except Exception:
        pickled = None
    try:
        local = "".join(traceback.format_exception(exc)) if exc.__traceback__ else ""
    except Exception:  # a broken __str__ must not cost the reply
        local = ""
    # An error that itself came from another process keeps where it started.
    earlier = getattr(exc, "remote_traceback", "") or ""
    if earlier and local:
        tb = f"{earlier}\nwhich was raised again here:\n{local}"
    else:
        tb = earlier or local
    try:
        message = str(exc)
    except Exception:
        message = f"<{type(exc).__name__} with an unprintable message>"
    return _dumps((ERROR, rid, pickled, _type_name(exc), message, tb), _HIGHEST)


def encode_auth(token: bytes) -> bytes:
    """The client's first frame to a TCP listener (a frame, header included)."""
    return frame(AUTH_MAGIC + token)


def encode_auth_refused(reason: str) -> bytes:
    return frame(encode_oneway(AUTH_REFUSED, reason))


# -- bytes → messages ----------------------------------------------------------------------
def decode_error(msg: tuple) -> BaseException:
    """The exception an ``ERROR`` message stands for: the handler's own exception when it can
    be rebuilt here, else a ``RemoteError`` naming it; either way ``remote_traceback`` holds
    the handler's traceback text."""
    _, _, pickled, type_name, message, tb = msg
    exc: BaseException | None = None
    if pickled is not None:
        try:
            exc = _loads(pickled)
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        short = type_name.rsplit(".", 1)[-1]
        exc = RemoteError(f"{short}: {message}", type_name=type_name, remote_traceback=tb)
    else:
        try:
            exc.remote_traceback = tb  # type: ignore[attr-defined]
        except AttributeError:  # an exception type with __slots__ and no __dict__
            pass
    return exc


def check_auth(frame_payload: bytes, token: bytes) -> str | None:
    """None when the first frame presents ``token``; else why it is refused. The comparison
    takes the same time wherever the first difference is."""
    if hmac.compare_digest(frame_payload, AUTH_MAGIC + token):
        return None
    return (
        "wrong cluster token" if frame_payload.startswith(AUTH_MAGIC) else "no cluster token sent"
    )


class Decoder:
    """Reassembles frames from the byte stream and unpickles them.

    ``feed(data, on_message)`` calls ``on_message(msg)`` for each complete message in order;
    a true return value means the receiver has stopped (its connection closed), and nothing
    more is decoded. Partial frames wait in the buffer for the next ``feed``.

    ``feed_raw`` is for the listener's side of the token check: it returns the first frame's
    bytes unpickled, once complete, and refuses a frame announcing more than ``limit`` bytes
    as soon as its header is in, without buffering it.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def buffered(self) -> int:
        return len(self._buf)

    def feed(
        self, data: bytes, on_message: Callable[[tuple], Any], keep_raised: bool = False
    ) -> None:
        """``keep_raised``: a frame whose ``on_message`` raised (or that an interrupt caught
        before it was handed on) stays buffered, to be handed on again by the next feed:
        for a receiver that hands each message on once whatever the number of tries (a
        reply channel, read by a thread Ctrl-C can interrupt anywhere)."""
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        try:
            while end - pos >= 4:
                (n,) = _unpack_from(buf, pos)
                if end - pos - 4 < n:
                    break
                start = pos + 4
                stop = start + n
                try:
                    msg = _loads(memoryview(buf)[start:stop])
                except Exception as e:  # nothing after a corrupt frame can be trusted
                    raise FrameError(f"undecodable frame: {e}") from e
                if not keep_raised:
                    pos = stop
                stopped = on_message(msg)
                pos = stop
                if stopped:
                    break
        finally:
            if pos:
                del buf[:pos]

    def feed_raw(self, data: bytes, limit: int) -> bytes | None:
        """The first whole frame's payload, unpickled, or None while it is incomplete. Raises
        ``FrameError`` for a frame longer than ``limit``. Bytes after the frame stay buffered
        for ``feed``."""
        buf = self._buf
        buf += data
        if len(buf) < 4:
            return None
        (n,) = _unpack_from(buf, 0)
        if n > limit:
            raise FrameError(f"a first frame of {n} bytes is longer than a token frame")
        if len(buf) - 4 < n:
            return None
        payload = bytes(buf[4 : 4 + n])
        del buf[: 4 + n]
        return payload


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    if module in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"
