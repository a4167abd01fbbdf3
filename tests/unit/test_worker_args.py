"""The worker's command line (``ember.worker_main.parse_args``): the raylet's ``--name value``
pairs, with errors that name what is wrong."""

from __future__ import annotations

import pytest
from ember.worker_main import parse_args

REQUIRED = [
    "--worker-id", "ab", "--node-id", "cd", "--session-dir", "/s", "--raylet-address", "unix:/r",
    "--gcs-address", "unix:/g", "--arena-path", "/a", "--arena-capacity", "1024",
]  # fmt: skip


def test_pairs_become_options() -> None:
    opts = parse_args([*REQUIRED, "--raylet-pid", "42"])
    assert opts["worker-id"] == "ab" and opts["arena-capacity"] == "1024"
    assert opts["raylet-pid"] == "42" and "token-file" not in opts


def test_a_missing_option_is_named() -> None:
    with pytest.raises(SystemExit, match="missing --arena-path, --arena-capacity"):
        parse_args(REQUIRED[:-4])


def test_an_unknown_option_is_named() -> None:
    with pytest.raises(SystemExit, match=r"unknown option '--colour'"):
        parse_args([*REQUIRED, "--colour", "red"])


def test_a_flag_without_a_value_is_refused() -> None:
    with pytest.raises(SystemExit, match="expected --name value pairs"):
        parse_args([*REQUIRED, "--token-file"])
