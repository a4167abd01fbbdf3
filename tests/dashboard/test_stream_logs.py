"""New log lines on the live stream (issue 4 §2), over SSE and WebSocket, against a real node:
the dashboard follows the files a client names through the node's agent, rotation included,
and stops following when the client goes."""

from __future__ import annotations

import asyncio
import json
import os
import time

import ember
import httpx
import pytest
import websockets
from ember_test_utils import wait_until


def _indexed(http: httpx.Client, name: str) -> None:
    wait_until(
        lambda: http.get("/api/logs", params={"filter": f"name={name}"}).json()["total"],
        15,
        0.2,
        f"{name} in the log index",
    )


def _no_followers_left(http: httpx.Client) -> None:
    wait_until(
        lambda: http.get("/api/stream/stats").json()["log_followers"] == 0,
        15,
        0.2,
        "the followers to stop after the client went",
    )


def test_sse_log_topic_follows_a_file_through_rotation(live):
    ctx, http, node = live
    path = os.path.join(ctx.session_dir, "logs", "streamed-sse.log")
    with open(path, "w") as f:
        f.write("first\n")
    _indexed(http, "streamed-sse.log")
    params = {
        "topics": "log",
        "log_node": node,
        "log_name": "streamed-sse.log",
        "log_lines": 5,
        "timeout": 60,
    }
    lines: list[str] = []
    events: list[str] = []
    with http.stream("GET", "/api/stream/sse", params=params) as r:
        assert r.status_code == 200
        deadline = time.monotonic() + 45
        for raw in r.iter_lines():
            assert time.monotonic() < deadline, f"stalled; saw {lines} {events}"
            if not raw.startswith("data:"):
                continue
            msg = json.loads(raw[5:])
            if msg["type"] == "hello":
                assert msg["logs"] == [{"node_id": node, "name": "streamed-sse.log"}]
                continue
            assert msg["type"] == "log" and msg["node_id"] == node
            assert msg["name"] == "streamed-sse.log"
            if msg["event"] != "lines":
                events.append(msg["event"])
                continue
            lines.extend(msg["lines"])
            if lines == ["first"]:
                with open(path, "a") as f:
                    f.write("second\n")
            elif lines[-1] == "second":
                # Rotated by rename; the new file outgrows the old offset before the next
                # read, and a last line went to the old file just before: none is lost.
                with open(path, "a") as f:
                    f.write("last-of-the-old-file\n")
                os.rename(path, path + ".1")
                with open(path, "w") as f:
                    f.write("new-file-" + "x" * 200 + "\n")
            elif lines[-1].startswith("new-file-"):
                break
    assert lines == ["first", "second", "last-of-the-old-file", "new-file-" + "x" * 200]
    assert events == ["following", "rotated"]
    # The rotated file is indexed under the live file's component.
    rotated = wait_until(
        lambda: http.get("/api/logs", params={"filter": "name=streamed-sse.log.1"}).json()["items"],
        15,
        0.2,
    )
    assert rotated[0]["component"] == "streamed-sse" and rotated[0]["rotated"] == "1"
    _no_followers_left(http)


def test_websocket_log_topic_by_pid_with_other_topics(live):
    ctx, http, node = live

    @ember.remote
    class Talker:
        def pid(self) -> int:
            return os.getpid()

        def say(self, text: str) -> None:
            print(text, flush=True)

    talker = Talker.remote()
    pid = ember.get(talker.pid.remote())
    wait_until(
        lambda: http.get("/api/logs", params={"filter": f"pid={pid}"}).json()["total"] >= 2,
        15,
        0.2,
        "the actor's log files",
    )
    url = (
        ctx.dashboard_url.replace("http://", "ws://")
        + f"/api/stream?topics=node_metrics&log_pid={pid}&log_node={node[:8]}"
    )

    async def run() -> tuple[dict, set[str], set[str]]:
        async with websockets.connect(url, open_timeout=10) as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), 10))
            marker = f"ws-log-line-{pid}"
            kinds: set[str] = set()
            seen: set[str] = set()
            following: set[str] = set()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while not (marker in seen and "node_metrics" in kinds):
                assert loop.time() < deadline, f"saw {kinds} {seen}"
                batch = json.loads(await asyncio.wait_for(ws.recv(), 20))
                for msg in batch["messages"]:
                    kinds.add(msg["type"])
                    if msg["type"] != "log":
                        continue
                    assert msg["node_id"] == node
                    if msg["event"] == "following":
                        following.add(msg["name"])
                        if len(following) == len(hello["logs"]):
                            talker.say.remote(marker)  # every file's position is taken
                    elif msg["event"] == "lines":
                        assert msg["name"].endswith(f"-{pid}.out")
                        seen.update(msg["lines"])
            return hello, kinds, seen

    hello, kinds, seen = asyncio.run(run())
    assert hello["topics"] == ["log", "node_metrics"]
    assert {f["name"] for f in hello["logs"]} == {
        f["name"]
        for f in http.get("/api/logs", params={"filter": f"pid={pid}"}).json()["items"]
        if not f["rotated"]
    }
    assert kinds <= {"log", "node_metrics", "dropped"}
    _no_followers_left(http)
    ember.kill(talker)


def test_naming_no_file_or_too_many_is_a_clear_error(live):
    ctx, http, node = live
    r = http.get("/api/stream/sse", params={"log_name": "no-such-file.log", "timeout": 1})
    assert r.status_code == 404 and "no-such-file.log" in r.json()["detail"]
    r = http.get("/api/stream/sse", params={"log_pid": 4_000_000, "timeout": 1})
    assert r.status_code == 404 and "4000000" in r.json()["detail"]
    for i in range(20):
        with open(os.path.join(ctx.session_dir, "logs", f"many-{i:02d}.log"), "w") as f:
            f.write("x\n")
    _indexed(http, "many-19.log")
    r = http.get("/api/stream/sse", params={"log_name": "many-*.log", "timeout": 1})
    assert r.status_code == 422 and "at most 16" in r.json()["detail"][0]["msg"]

    async def refused() -> int:
        url = ctx.dashboard_url.replace("http://", "ws://") + "/api/stream?log_name=nope.log"
        with pytest.raises(websockets.exceptions.InvalidStatus) as e:
            async with websockets.connect(url, open_timeout=10) as ws:
                await ws.recv()
        return e.value.response.status_code

    assert asyncio.run(refused()) == 403  # closed before accept: the handshake is refused


def test_a_slow_client_holds_the_follower_back_within_its_bound(tmp_path):
    """In-process (the real follower and pubsub over the agent's real ``LogDir``, without the
    network): a client that does not read leaves at most half its queue filled with log
    messages, the file is the buffer, and once it reads it gets every line, in order."""
    from ember.agent.logs import LogDir
    from ember.dashboard.app import DashboardContext
    from ember.dashboard.pubsub import PubSub
    from ember.dashboard.routes import stream
    from ember.dashboard.state import DashboardState

    name = "worker-ab-7.out"
    (tmp_path / name).write_text("")
    logs = LogDir(str(tmp_path))

    class DirectHub:
        async def call(self, node_id, op, body, timeout):
            if op == "log_tail":
                return logs.tail(body["name"], body["lines"])
            return logs.read(
                body["name"], body["offset"], 64, body.get("file_id"), body.get("mark")
            )

    async def run() -> list[str]:
        ctx = DashboardContext(state=DashboardState(), hub=DirectHub())
        sub = PubSub(maxlen=8).subscribe(frozenset({"log"}))
        tasks = stream._start_followers(ctx, sub, [("n1", name)], 0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not sub.queue:  # "following"
            assert loop.time() < deadline
            await asyncio.sleep(0.01)
        with open(tmp_path / name, "a") as f:
            f.writelines(f"line-{i:03d}\n" for i in range(300))
        await asyncio.sleep(1.5)  # the client reads nothing for a while
        assert 1 <= len(sub.queue) <= 4 and sub.dropped == 0
        got: list[str] = []
        while len(got) < 300:
            assert loop.time() < deadline + 20, f"got {len(got)}"
            for msg in await sub.next_batch(1.0):
                assert msg["type"] == "log"
                got.extend(msg.get("lines", []))
        await stream._stop_followers(tasks)
        assert not stream._followers
        return got

    assert asyncio.run(run()) == [f"line-{i:03d}" for i in range(300)]
