"""Ray 0.8's Tune Client API: ``tune.run(..., with_server=True, server_port=4321)`` serves the
running experiment over HTTP, and ``TuneClient`` (or curl) reads and steers it:

- ``GET /trials`` and ``GET /trials/<trial_id>``: each trial's id, trainable, config, status
  and last result (JSON, where Ray 0.8 sent pickles: a client never unpickles a server's bytes);
- ``PUT /trials/<trial_id>``: stop that trial;
- ``POST /trials`` with ``{"name": ..., "spec": {"config": {...}}}``: add a trial;
- ``PUT /stop``: stop the whole experiment.

The server binds 127.0.0.1 only (forward the port, as the seed says, to reach it from
elsewhere). Requests are queued and applied by the controller's own loop on its next turn
(never from the server's thread, which would race the loop)."""

from __future__ import annotations

import json
import queue
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.error import HTTPError
from urllib.request import Request, urlopen

from ember.tune.files import to_json
from ember.tune.stopper import Stopper
from ember.tune.trial import Trial

MAX_BODY = 64 * 1024  # an added trial's spec; anything larger is refused
MAX_QUEUED = 1000  # requests waiting for the loop's next turn


def trial_info(trial: Trial) -> dict:
    return {
        "id": trial.trial_id,
        "trainable_name": trial.trainable_name,
        "config": trial.config,
        "status": trial.status,
        "result": {k: v for k, v in trial.last_result.items() if k != "config"} or None,
        "logdir": trial.local_path,
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # the experiment's output is the progress table, not an access log

    def _send(self, code: int, body: dict) -> None:
        data = to_json(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _parts(self) -> list[str]:
        return [p for p in self.path.split("?")[0].split("/") if p]

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = self._parts()
        trials = list(self.server.loop.trials)
        if parts == ["trials"]:
            self._send(200, {"trials": [trial_info(t) for t in trials]})
        elif len(parts) == 2 and parts[0] == "trials":
            found = [t for t in trials if t.trial_id == parts[1]]
            if not found:
                self._send(404, {"error": f"no trial {parts[1]!r} in this experiment"})
            else:
                self._send(200, {"trial": trial_info(found[0])})
        else:
            self._send(404, {"error": "GET /trials or /trials/<trial_id>"})

    def do_PUT(self) -> None:  # noqa: N802
        parts = self._parts()
        if parts == ["stop"]:
            self._queue(("stop_experiment", None), {"stopped": "experiment"})
        elif len(parts) == 2 and parts[0] == "trials":
            if parts[1] not in self.server.loop.by_id:
                self._send(404, {"error": f"no trial {parts[1]!r} in this experiment"})
                return
            self._queue(("stop_trial", parts[1]), {"stopped": parts[1]})
        else:
            self._send(404, {"error": "PUT /trials/<trial_id> or /stop"})

    def do_POST(self) -> None:  # noqa: N802
        if self._parts() != ["trials"]:
            self._send(404, {"error": "POST /trials"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._send(413, {"error": f"a trial's spec is at most {MAX_BODY} bytes"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            config = (body.get("spec") or {}).get("config", {})
            if not isinstance(config, dict):
                raise ValueError("spec.config must be an object")
        except (ValueError, AttributeError) as e:
            self._send(400, {"error": f'POST /trials takes {{"name", "spec": {{"config"}}}}: {e}'})
            return
        trial_id = uuid.uuid4().hex[:8]
        self._queue(("add_trial", (trial_id, body.get("name") or "", config)), {"added": trial_id})

    def _queue(self, request: tuple, answer: dict) -> None:
        try:
            self.server.requests.put_nowait(request)
        except queue.Full:
            self._send(503, {"error": "too many requests waiting for the experiment's loop"})
            return
        self._send(200, answer)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, loop: Any) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.loop = loop
        self.requests: queue.Queue = queue.Queue(MAX_QUEUED)


class TuneServer(Stopper):
    """Serves the experiment; wraps its stopper so that queued requests are applied on the
    controller's loop (``stop_all`` runs there on every turn)."""

    def __init__(self, loop: Any, port: int) -> None:
        if not isinstance(port, int) or not 0 <= port < 65536:
            raise ValueError(f"server_port must be a port number, got {port!r}")
        self.loop = loop
        self.inner = loop.stopper
        try:
            self.http = _Server(port, loop)
        except OSError as e:
            raise ValueError(
                f"the Tune server cannot listen on 127.0.0.1:{port} ({e.strerror}); "
                "pass another server_port"
            ) from e
        self.port = self.http.server_address[1]
        self.stopped = False
        loop.stopper = self
        self.thread = threading.Thread(target=self.http.serve_forever, name="tune-server")
        self.thread.daemon = True
        self.thread.start()

    def __call__(self, trial_id: str, result: dict) -> bool:
        return self.inner(trial_id, result)

    def stop_all(self) -> bool:
        while True:
            try:
                kind, arg = self.http.requests.get_nowait()
            except queue.Empty:
                break
            if kind == "stop_experiment":
                self.stopped = True
            elif kind == "stop_trial":
                self.loop.stop_trial(self.loop.by_id[arg])
            else:
                trial_id, name, config = arg
                tag = f"{len(self.loop.trials)}_{name}" if name else str(len(self.loop.trials))
                self.loop.add_trial(Trial(trial_id, config, tag, self.loop.trainable_name))
        return self.inner.stop_all() or self.stopped

    def shutdown(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(timeout=5)


class TuneClient:
    """Client of a running experiment's Tune server (``tune.run(with_server=True)``)."""

    def __init__(self, tune_address: str, port_forward: int) -> None:
        self.tune_address = tune_address
        self.port_forward = port_forward
        self._path = f"http://{tune_address}:{port_forward}"

    def _call(self, method: str, path: str, body: dict | None = None, timeout: Any = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = Request(f"{self._path}/{path}", data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urlopen(request, timeout=timeout or 30) as response:
                return json.loads(response.read())
        except HTTPError as e:
            raise ValueError(f"{method} /{path}: {json.loads(e.read()).get('error')}") from None

    def get_all_trials(self, timeout: float | None = None) -> dict:
        return self._call("GET", "trials", timeout=timeout)

    def get_trial(self, trial_id: str, timeout: float | None = None) -> dict:
        return self._call("GET", f"trials/{trial_id}", timeout=timeout)

    def add_trial(self, name: str, specification: dict) -> dict:
        return self._call("POST", "trials", {"name": name, "spec": specification})

    def stop_trial(self, trial_id: str) -> dict:
        return self._call("PUT", f"trials/{trial_id}")

    def stop_experiment(self) -> dict:
        return self._call("PUT", "stop")
