"""A function trainable as a Trainable: the function runs in a thread of the trial's actor and
each ``tune.report`` hands one result over and waits until the loop asks for the next, so the
loop can stop the trial between any two results (as in Ray)."""

from __future__ import annotations

import inspect
import queue
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ember.tune.checkpoint import Checkpoint
from ember.tune.trainable import session
from ember.tune.trainable.trainable import Trainable

REPORT_WAIT_S = 3600.0  # the longest one step waits for its function's next report


class _StopTrial(BaseException):
    """Raised inside the function at its next report when the trial is stopped."""


def call_style(fn: Any) -> str:
    """How to call a function trainable: ``config`` alone, or ``(config, reporter)``,
    or with ``checkpoint_dir`` (Ray 1.x)."""
    params = list(inspect.signature(fn).parameters.values())
    names = [p.name for p in params]
    if "checkpoint_dir" in names:
        return "checkpoint_dir"
    required = [
        p
        for p in params
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(required) >= 2:
        return "reporter"
    if not params:
        raise ValueError(
            f"a function trainable takes a config argument; {fn.__name__}() takes none"
        )
    return "config"


class FunctionTrainable(Trainable, session.Session):
    _function: Any = None  # set on the subclass made for each function

    def setup(self, config: dict) -> None:
        self._items: queue.Queue = queue.Queue()
        self._resume = threading.Semaphore(0)
        self._thread: threading.Thread | None = None
        self._stopping = False
        # Buffered (``train_buffered``): the function may run this many results ahead of the
        # loop, each holding a slot until the loop takes it; a result with a checkpoint still
        # waits for the loop (its checkpoint must be the trial's when the loop decides).
        self._ahead = 0
        self._slots = threading.Semaphore(0)
        self._waiting = False  # the function waits on _resume for the loop's next call
        self._held: tuple | None = None  # an item taken after results, for the next call
        self._last_report = time.time()
        self.checkpoint: Checkpoint | None = None
        self.context = self._context

    def restore(self, checkpoint_dir: str, iteration: int = 0, time_total: float = 0.0) -> None:
        self._iteration, self._time_total = iteration, time_total
        name = Path(checkpoint_dir).name
        if name.startswith("checkpoint_") and name[11:].isdigit():
            self._checkpoint_index = int(name[11:]) + 1
        self.checkpoint = Checkpoint(checkpoint_dir)

    def save(self) -> str:
        # A function checkpoints by reporting one; there is nothing more to save.
        if self.checkpoint is None:
            return ""
        return Path(self.checkpoint.path).name

    def _run(self) -> None:
        session.set_session(self)
        fn = type(self)._function
        try:
            style = call_style(fn)
            if style == "reporter":
                fn(self.config, session.Reporter())
            elif style == "checkpoint_dir":
                fn(self.config, checkpoint_dir=self.checkpoint.path if self.checkpoint else None)
            else:
                fn(self.config)
        except _StopTrial:
            return
        except BaseException as e:  # noqa: BLE001 - the trial's error, whatever it is
            self._items.put(("error", e))
            return
        self._items.put(("done", None))

    def report(self, metrics: dict, checkpoint: Checkpoint | None = None) -> None:
        if self._stopping:
            raise _StopTrial()
        lockstep = self._ahead == 0 or checkpoint is not None
        if lockstep:
            self._waiting = True  # before the put: the loop reads it once it has the item
        self._items.put(("result", (metrics, checkpoint, time.time())))
        if lockstep:
            self._resume.acquire()
        else:
            self._slots.acquire()
        if self._stopping:
            raise _StopTrial()

    def train_buffered(self, most: int) -> list[dict]:
        """The results the function has reported since the last call, at least one, at most
        ``most`` (waiting for the first): one round trip for many results when the loop
        decides nothing between them that the function must wait for (FIFO, ASHA, median
        stopping). The list ends at a result with a checkpoint, at the end of the function
        (``__done__``), or before its error (raised at the next call)."""
        if self._thread is None:
            self._ahead = max(0, most - 1)
            self._slots = threading.Semaphore(self._ahead)
        if self._held is not None:
            kind, payload = self._held
            self._held = None
            if kind == "error":
                raise payload
            return [{"__done__": True}]
        if self._thread is None:
            self._start()
        elif self._waiting:
            self._waiting = False
            self._resume.release()
        out: list[dict] = []
        while len(out) < most:
            try:
                if out:
                    kind, payload = self._items.get_nowait()
                else:
                    kind, payload = self._items.get(timeout=REPORT_WAIT_S)
            except queue.Empty:
                if out:
                    break
                raise TimeoutError(f"no tune.report in {REPORT_WAIT_S:.0f} s") from None
            if kind != "result":
                if not out:
                    if kind == "error":
                        raise payload
                    return [{"__done__": True}]
                self._held = (kind, payload)
                break
            checkpoint = payload[1]
            out.append(self._result(payload))
            if checkpoint is not None:
                break  # the function waits for the loop's next call (lockstep)
            self._slots.release()
        return out

    def _start(self) -> None:
        self._last_report = time.time()
        self._thread = threading.Thread(target=self._run, name="tune-trial", daemon=True)
        self._thread.start()

    def train(self) -> dict:
        if self._thread is None:
            self._start()
        else:
            self._waiting = False
            self._resume.release()
        try:
            kind, payload = self._items.get(timeout=REPORT_WAIT_S)
        except queue.Empty:
            raise TimeoutError(f"no tune.report in {REPORT_WAIT_S:.0f} s") from None
        if kind == "error":
            raise payload
        if kind == "done":
            return {"__done__": True}
        return self._result(payload)

    def _result(self, payload: tuple) -> dict:
        """A reported ``(metrics, checkpoint, when)`` as the trial's next result."""
        metrics, checkpoint, at = payload
        result = dict(metrics)
        result.setdefault("timestamp", int(at))
        result["checkpoint_dir_name"] = self._persist(checkpoint) if checkpoint else None
        if checkpoint is not None:
            result["should_checkpoint"] = True
        took = at - self._last_report
        self._last_report = at
        return self._fill(result, took)

    def _persist(self, checkpoint: Checkpoint) -> str:
        """Copies a reported checkpoint into the trial's directory, as Ray does."""
        name = f"checkpoint_{self._checkpoint_index:06d}"
        self._checkpoint_index += 1
        target = Path(self.logdir, name)
        if Path(checkpoint.path).resolve() != target.resolve():
            shutil.copytree(checkpoint.path, target, dirs_exist_ok=True)
        self.checkpoint = Checkpoint(target)
        return name

    def stop(self) -> None:
        self._stopping = True
        self._resume.release()
        self._slots.release()  # a function running ahead waits on a slot, not on _resume
        if self._thread is not None:
            self._thread.join(timeout=5)


def wrap_function(fn: Any) -> type[FunctionTrainable]:
    call_style(fn)  # a function of the wrong shape fails before any trial starts
    return type(
        getattr(fn, "__name__", "func"), (FunctionTrainable,), {"_function": staticmethod(fn)}
    )
