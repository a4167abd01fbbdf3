"""The wire without processes: the sans-I/O codec, the in-process transport (real framing and
dispatch, no sockets), the one error path, and the listener's token check."""

from __future__ import annotations

import asyncio
import pickle
import time

import pytest
from ember.protocol import codec
from ember.protocol import connection as conn_mod
from ember.protocol.connection import DEFERRED, Connection
from ember.protocol.errors import NoHandlerError, Refused, RemoteError
from ember.protocol.inproc import pair


def run(coro):
    loop = conn_mod.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


# -- codec ---------------------------------------------------------------------------------
def test_decoder_reassembles_frames_split_anywhere():
    msgs = [(codec.REQUEST, "op", i, {"x": "y" * i}) for i in range(5)]
    stream = b"".join(codec.frame(codec.encode_request(*m[1:])) for m in msgs)
    for step in (1, 3, 7, len(stream)):
        got: list[tuple] = []
        dec = codec.Decoder()
        for i in range(0, len(stream), step):
            dec.feed(stream[i : i + step], got.append)
        assert got == msgs
        assert dec.buffered() == 0


def test_decoder_stops_when_the_receiver_does_and_keeps_the_rest():
    stream = b"".join(codec.frame(codec.encode_oneway("op", i)) for i in range(3))
    dec = codec.Decoder()
    got: list[tuple] = []
    dec.feed(stream, lambda m: got.append(m) or True)
    assert got == [(codec.ONEWAY, "op", 0)]
    dec.feed(b"", got.append)
    assert [m[2] for m in got] == [0, 1, 2]


def test_a_corrupt_frame_is_a_frame_error():
    with pytest.raises(codec.FrameError, match="undecodable"):
        codec.Decoder().feed(codec.frame(b"not a pickle"), lambda m: None)


def test_token_frames_are_bounded_and_compared():
    dec = codec.Decoder()
    with pytest.raises(codec.FrameError):
        dec.feed_raw(codec.HEADER.pack(codec.MAX_AUTH_FRAME + 1), codec.MAX_AUTH_FRAME)
    dec = codec.Decoder()
    frame = codec.encode_auth(b"t" * 64)
    assert dec.feed_raw(frame[:10], codec.MAX_AUTH_FRAME) is None
    first = dec.feed_raw(frame[10:] + b"more", codec.MAX_AUTH_FRAME)
    assert codec.check_auth(first, b"t" * 64) is None
    assert codec.check_auth(first, b"u" * 64) == "wrong cluster token"
    assert codec.check_auth(b"anything", b"u" * 64) == "no cluster token sent"
    assert dec.buffered() == 4


class Unpicklable(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")


def _raise(exc):
    try:
        raise exc
    except BaseException as e:
        return e


def test_errors_travel_as_their_type_or_as_a_named_remote_error():
    msg = pickle.loads(codec.encode_error(7, _raise(KeyError("k"))))
    exc = codec.decode_error(msg)
    assert type(exc) is KeyError and exc.args == ("k",)
    assert "in _raise" in exc.remote_traceback
    # Pickles here but cannot be rebuilt (its __init__ wants two arguments).
    exc = codec.decode_error(pickle.loads(codec.encode_error(7, _raise(Unpicklable(1, 2)))))
    assert type(exc) is RemoteError
    assert exc.type_name.endswith("Unpicklable") and "1/2" in str(exc)
    assert "in _raise" in exc.remote_traceback
    # A RemoteError passed on keeps the traceback of where it started.
    again = codec.decode_error(pickle.loads(codec.encode_error(8, exc)))
    assert again.remote_traceback == exc.remote_traceback


# -- in-process transport ------------------------------------------------------------------
def test_inproc_request_reply_oneway_and_errors():
    seen = []

    async def slow(conn, body):
        await asyncio.sleep(0)
        return body * 2

    def refuse(conn, body):
        raise Refused("not today")

    def later(conn, body):
        conn.deferred().resolve(body + 1)
        return DEFERRED

    handlers = {
        "echo": lambda c, b: b,
        "slow": slow,
        "later": later,
        "note": lambda c, b: seen.append(b),
        "refuse": refuse,
        "lambda": lambda c, b: lambda: None,  # a reply that cannot be pickled
    }

    async def main():
        server, address = await conn_mod.serve("inproc:t1", handlers, name="srv")
        assert address == "inproc:t1"
        conn = await conn_mod.connect(address, name="cli")
        try:
            assert await conn.call("echo", {"a": 1}) == {"a": 1}
            assert await conn.call("slow", 21) == 42
            assert await conn.call("later", 1) == 2
            conn.send("note", "hi")
            with pytest.raises(Refused, match="not today") as info:
                await conn.call("refuse")
            assert "in refuse" in info.value.remote_traceback
            with pytest.raises(NoHandlerError, match="no handler for 'nope'"):
                await conn.call("nope")
            with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
                await conn.call("lambda")
            replies = []
            conn.request_cb("echo", 5, lambda r, e: replies.append((r, e)))
            assert await conn.call("echo", 6) == 6  # in order: the callback ran first
            assert replies == [(5, None)] and seen == ["hi"]
        finally:
            conn.close()
            server.close()
        with pytest.raises(ConnectionRefusedError):
            await conn_mod.connect(address)

    run(main())


def test_inproc_close_fails_pending_requests_and_tells_the_peer():
    closed = []

    async def main():
        never = asyncio.Event()

        async def hang(conn, body):
            await never.wait()

        server, address = await conn_mod.serve(
            "inproc:t2", {"hang": hang}, on_close=lambda c: closed.append(c.name), name="srv"
        )
        conn = await conn_mod.connect(address)
        fut = conn.request("hang")
        await asyncio.sleep(0.01)
        conn.close("bye")
        with pytest.raises(conn_mod.ConnectionClosedError):
            await fut
        for _ in range(5):
            await asyncio.sleep(0)
        server.close()

    run(main())
    assert closed == ["srv"]


class Ping:
    """A stand-in for a catalogue message: it travels as its op and body."""

    op = "echo"

    def to_body(self):
        return {"x": 1}


def test_message_objects_travel_as_op_and_body():
    async def main():
        server, address = await conn_mod.serve("inproc:t3", {"echo": lambda c, b: b})
        conn = await conn_mod.connect(address)
        assert await conn.call(Ping()) == {"x": 1}
        conn.close()
        server.close()

    run(main())


# -- the token check -----------------------------------------------------------------------
def _token_pair(expect: bytes) -> tuple[Connection, Connection, list]:
    ran = []
    server = Connection({"put": lambda c, b: ran.append(b)}, name="srv", expect_token=expect)
    client = Connection({}, name="cli")
    return client, server, ran


def test_the_token_is_checked_before_anything_is_unpickled():
    good = b"g" * 64

    async def main():
        client, server, ran = _token_pair(good)
        pair(client, server)
        await client.send_token(good)
        assert await client.call("put", 1) is None and ran == [1]

        client, server, ran = _token_pair(good)
        pair(client, server)
        client.send("put", 2)  # sent before the token is refused: must never run
        with pytest.raises(conn_mod.AuthenticationError, match="wrong cluster token"):
            await client.send_token(b"b" * 64)
        # (the one-way frame went first, so it was read as the token frame)
        client, server, ran2 = _token_pair(good)
        pair(client, server)
        fut = client.send_token(b"b" * 64)
        client.send("put", 3)
        with pytest.raises(conn_mod.AuthenticationError, match="wrong cluster token"):
            await fut
        await asyncio.sleep(0.01)
        assert ran == [] and ran2 == [] and server.closed

    run(main())


def test_an_oversized_first_frame_is_refused_from_its_header():
    async def main():
        client, server, ran = _token_pair(b"g" * 64)
        pair(client, server)
        waiter = client.send_token(b"x")  # sets up the answer's waiter; replaced below
        server.data_received(codec.HEADER.pack(1 << 30))  # announces 1 GiB, sends nothing
        assert server.closed and server._decoder.buffered() == 4
        with pytest.raises(conn_mod.AuthenticationError, match="no cluster token sent"):
            await waiter

    run(main())


def test_an_error_raised_again_keeps_both_tracebacks():
    first = codec.decode_error(pickle.loads(codec.encode_error(1, _raise(KeyError("k")))))
    second = codec.decode_error(pickle.loads(codec.encode_error(2, _raise(first))))
    assert type(second) is KeyError
    assert second.remote_traceback.startswith(first.remote_traceback)
    assert "which was raised again here" in second.remote_traceback


def test_replies_from_many_threads_at_once_arrive_whole(tmp_path):
    # Eight threads answer 2,000 requests on one Unix socket at once: each writes straight to
    # the socket when it can, and through the loop when another thread holds the socket;
    # every reply must arrive whole and to its own request.
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(8)

    def deferred_echo(conn, body):
        reply_to = conn.deferred()
        pool.submit(reply_to.resolve_threadsafe, {"n": body, "pad": b"x" * (body % 4096)})
        return DEFERRED

    async def main():
        path = f"unix:{tmp_path}/s"
        server, address = await conn_mod.serve(path, {"echo": deferred_echo}, name="srv")
        conn = await conn_mod.connect(address, name="cli")
        try:
            replies = await asyncio.gather(*(conn.call("echo", i, 30) for i in range(2000)))
            assert [r["n"] for r in replies] == list(range(2000))
            assert all(r["pad"] == b"x" * (i % 4096) for i, r in enumerate(replies))
        finally:
            conn.close()
            server.close()

    try:
        run(main())
    finally:
        pool.shutdown()


def test_requests_from_another_thread_direct_or_batched_arrive_in_order(tmp_path):
    # A caller's thread sends 3,000 requests on one Unix socket, some written straight to
    # the socket and the rest batched into the loop's next write (as a burst of actor calls
    # is), while the loop's own thread sends requests of its own on it: the peer must get
    # every frame whole, the thread's in the order they were made, each reply its callback.
    import threading

    n = 3000
    seen: list[int] = []

    def record(conn, body):
        seen.append(body)
        return body

    loop = conn_mod.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start():
        server, address = await conn_mod.serve(f"unix:{tmp_path}/s", {"rec": record}, name="srv")
        return server, await conn_mod.connect(address, name="cli")

    server, conn = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    replies: dict[int, tuple] = {}
    all_in = threading.Event()

    def answer(i):
        def cb(reply, exc):
            replies[i] = (reply, exc)
            if len(replies) == n:
                all_in.set()

        return cb

    loop_replies: dict[int, tuple] = {}

    def from_the_loop(i):
        conn.request_cb("rec", i, lambda reply, exc: loop_replies.__setitem__(i, (reply, exc)))

    direct = 0
    try:
        for i in range(n):
            if i % 10 == 0:
                loop.call_soon_threadsafe(from_the_loop, -1 - i)
            if i % 3 == 0 and conn.request_cb_direct("rec", i, answer(i)):
                direct += 1
                continue
            assert conn.request_cb_batched("rec", i, answer(i))
        assert all_in.wait(30), f"{len(replies)} of {n} replies"
        assert [x for x in seen if x >= 0] == list(range(n))
        assert all(replies[i] == (i, None) for i in range(n))
        assert 0 < direct < n
        deadline = time.monotonic() + 30
        while len(loop_replies) < n // 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop_replies == {-1 - i: (-1 - i, None) for i in range(0, n, 10)}
    finally:

        async def stop():
            conn.close()
            server.close()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
