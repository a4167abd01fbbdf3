"""Drivers that end while holding large objects on both nodes: a normal exit, ``shutdown()``,
an uncaught exception, SIGKILL. The leak they must not leave is measured by the caller
(``Harness.settle``); here, each driver must hold what it says and end as told."""

from __future__ import annotations

import signal

from ember.tools.chaos.driver import HELD_SIZE
from ember.tools.chaos.harness import FaultError, Harness, Injected

TIMEOUT = 120.0
EXIT_CODES = {"exit": 0, "raise": 1, "sigkill": -signal.SIGKILL, "shutdown": 0}


def driver_ends(h: Harness, mode: str) -> Injected:
    d = h.driver(mode)
    try:
        d.expect("READY", TIMEOUT)
        # Two objects on each node at least (puts and a fetched result here, a pulled put
        # and a result left there): else the leak measure would prove nothing.
        use = h.store_use()
        thin = {n.hex()[:8]: b for n, b in use.items() if b < 2 * HELD_SIZE}
        if thin:
            raise FaultError(f"the driver's objects are not on every node: {thin}")
        if mode == "sigkill":
            d.proc.send_signal(signal.SIGKILL)
        else:
            d.tell("end now")
        left = 0
        if mode == "shutdown":
            d.expect("SHUT_DOWN", TIMEOUT)
            # Its process lives on without a core worker: the stores must empty already.
            left = h.settle()
            d.close_stdin()
        code = d.wait(TIMEOUT)
        if code != EXIT_CODES[mode]:
            raise FaultError(f"the driver exited with {code}, not {EXIT_CODES[mode]}")
        return Injected(f"driver {mode}", leaked=left)
    finally:
        d.kill()


DRIVER_ENDS = [
    ("driver exits holding objects", "exit"),
    ("driver calls shutdown()", "shutdown"),
    ("driver raises", "raise"),
    ("driver SIGKILLed", "sigkill"),
]
