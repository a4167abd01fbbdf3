"""Ctrl-C in a driver's tight loop of sync actor calls loses no call: the main thread reads
and settles its replies itself (own_replies.py, reply_channel.py), so a KeyboardInterrupt
can land anywhere in that path. Each interrupted call's value must still be there for a
second ``get`` (before, about 1 interrupt in 200 lost its call for good: its reply's bytes
taken off the socket or its frame dropped by the decoder, never handed on)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
from ember_test_utils import process_gone, wait_until

DRIVER = r"""
import signal, sys, time, ember
ember.init(include_dashboard=False)

@ember.remote
class Counter:
    def echo(self, i):
        return i

c = Counter.remote()
ember.get(c.echo.remote(0))
ignore, interrupt = signal.SIG_IGN, signal.default_int_handler
signal.signal(signal.SIGINT, ignore)
print("ready", flush=True)
interrupts = lost = 0
i = 0
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    try:
        while time.monotonic() < deadline:
            i += 1
            ref = c.echo.remote(i)  # sent with Ctrl-C ignored: the reading path is the one tried
            signal.signal(signal.SIGINT, interrupt)
            value = ember.get(ref)
            signal.signal(signal.SIGINT, ignore)
            assert value == i, (value, i)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, ignore)
        interrupts += 1
        try:
            assert ember.get(ref, timeout=5) == i
        except ember.exceptions.GetTimeoutError:
            lost += 1
print("interrupts", interrupts, "lost", lost, flush=True)
ember.shutdown()
"""


def test_ctrl_c_in_a_sync_call_loop_loses_no_call(tmp_path):
    program = tmp_path / "driver.py"
    program.write_text(DRIVER)
    driver = subprocess.Popen(
        [sys.executable, str(program), "10"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert driver.stdout.readline().strip() == "ready"
        # The driver's own node (GCS, raylet, workers): gone with it, whatever the interrupts.
        node = [p.pid for p in psutil.Process(driver.pid).children(recursive=True)]
        assert node, "the driver started its node"
        until = time.monotonic() + 9
        while time.monotonic() < until and driver.poll() is None:
            driver.send_signal(signal.SIGINT)
            time.sleep(0.05)
        out, _ = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(10)
    assert driver.returncode == 0, out
    words = out.split()
    interrupts, lost = int(words[words.index("interrupts") + 1]), int(words[-1])
    assert interrupts >= 50, out  # the loop was interrupted often
    assert lost == 0, out
    wait_until(
        lambda: all(process_gone(pid) for pid in node), 30, message="the driver's node to end"
    )
