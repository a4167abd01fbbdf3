"""Every listener's bind and token rule (``ember.listen_rules``): the empty host and the
wildcards are reachable, so they need the token; only loopback goes without, and only for
the dashboard's HTTP port."""

from __future__ import annotations

import pytest
from ember.listen_rules import is_local_only, loopback_twin, rule_for, shown_host


@pytest.mark.parametrize("host", ["", "0.0.0.0", "::", "[::]", "10.0.0.5", "head.example"])
def test_wildcards_names_and_node_ips_are_reachable_and_need_the_token(host):
    assert not is_local_only(host)
    for cluster in (False, True):
        rule = rule_for(host, cluster=cluster)
        assert rule.reachable and rule.token_required


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "::1", "[::1]", "localhost"])
def test_loopback_needs_the_token_only_on_the_clusters_own_wire(host):
    assert is_local_only(host)
    assert not rule_for(host, cluster=False).token_required
    assert rule_for(host, cluster=True).token_required


def test_a_node_ip_listens_on_loopback_too_and_a_wildcard_is_shown_as_loopback():
    assert loopback_twin("10.0.0.5") == "127.0.0.1"
    assert loopback_twin("fd00::5") == "::1"
    assert loopback_twin("") is None and loopback_twin("0.0.0.0") is None
    assert loopback_twin("127.0.0.1") is None
    assert shown_host("") == shown_host("::") == "127.0.0.1"
    assert shown_host("10.0.0.5") == "10.0.0.5"
