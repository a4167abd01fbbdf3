"""Hosts you can SSH to, on this machine: network namespaces on one bridge (10.X.Y.0/24; this
machine is .1), each running a real OpenSSH ``sshd`` on its own address that takes only the
key the fixture generates (no passwords, no PAM). For the ``local`` node provider's tests.

``SSHHosts.stop_sshd(ip)`` / ``start_sshd(ip)`` take a host down and bring it back."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

SSHD = "/usr/sbin/sshd"  # sshd refuses to run by a relative path


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _keygen(path: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path], check=True, timeout=30
    )


class SSHHosts:
    def __init__(self, count: int) -> None:
        self.root = tempfile.mkdtemp(prefix="es", dir="/tmp")  # short: Unix socket paths
        self.tag = f"{os.getpid() % 10000}{random.randrange(100, 999)}"
        self.subnet = f"10.{random.randrange(1, 250)}.{random.randrange(1, 250)}"
        self.bridge = f"eb{self.tag}"
        self.head_ip = f"{self.subnet}.1"
        self.hosts = {f"{self.subnet}.{i + 2}": f"es{self.tag}{i}" for i in range(count)}
        self.key = os.path.join(self.root, "id_ed25519")
        self._sshd: dict[str, subprocess.Popen] = {}
        self._made_links = False

    def setup(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made_links = True
        _ip("addr", "add", f"{self.head_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        _keygen(self.key)
        shutil.copy(self.key + ".pub", os.path.join(self.root, "authorized_keys"))
        # sshd's privilege separation directory (the Debian package's service makes it).
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        for n, (ip, ns) in enumerate(self.hosts.items()):
            outer, inner = f"e{self.tag}{n}h", f"e{self.tag}{n}n"
            _ip("netns", "add", ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", outer, "master", self.bridge)
            _ip("link", "set", outer, "up")
            _ip("link", "set", inner, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            home = os.path.join(self.root, f"h{n}")
            os.makedirs(home)
            _keygen(os.path.join(home, "host_key"))
            with open(os.path.join(home, "sshd_config"), "w") as f:
                f.write(
                    f"ListenAddress {ip}\nPort 22\nHostKey {home}/host_key\n"
                    f"AuthorizedKeysFile {self.root}/authorized_keys\n"
                    "PubkeyAuthentication yes\nPasswordAuthentication no\n"
                    "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
                    # Test-only: the key file sits in a temp dir, not a home directory.
                    "UsePAM no\nStrictModes no\n"
                    f"PidFile {home}/sshd.pid\n"
                )
            self.start_sshd(ip)

    def _home(self, ip: str) -> str:
        return os.path.join(self.root, f"h{list(self.hosts).index(ip)}")

    def start_sshd(self, ip: str) -> None:
        home = self._home(ip)
        log = open(os.path.join(home, "sshd.log"), "ab")
        self._sshd[ip] = subprocess.Popen(
            ["ip", "netns", "exec", self.hosts[ip], SSHD, "-D", "-e", "-f", f"{home}/sshd_config"],
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((ip, 22), timeout=1).close()
                return
            except OSError:
                if self._sshd[ip].poll() is not None or time.monotonic() > deadline:
                    with open(os.path.join(home, "sshd.log")) as f:
                        raise RuntimeError(
                            f"sshd on {ip} did not start: {f.read()[-2000:]}"
                        ) from None
                time.sleep(0.1)

    def stop_sshd(self, ip: str) -> None:
        proc = self._sshd.pop(ip, None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)

    def teardown(self) -> None:
        for ip in list(self._sshd):
            self.stop_sshd(ip)
        for ns in self.hosts.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        if self._made_links:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)


def ssh_hosts(count: int = 2):
    """A generator for a fixture: ``SSHHosts`` set up, torn down after (skips where the
    machine has no sshd or forbids namespaces)."""
    for tool in (SSHD, shutil.which("ssh"), shutil.which("ip")):
        if tool is None or not os.path.exists(tool):
            pytest.skip("needs openssh-server, openssh-client and iproute2 (scripts/dev.sh)")
    hosts = SSHHosts(count)
    try:
        try:
            hosts.setup()
        except RuntimeError as e:
            if "Operation not permitted" in str(e):
                pytest.skip(f"this machine forbids network namespaces or bridges: {e}")
            raise
        yield hosts
    finally:
        hosts.teardown()
