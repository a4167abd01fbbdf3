"""The raylet-side object table: lifecycle, pins, deletion, eviction and accounting."""

from __future__ import annotations

import random

import pytest
from ember.exceptions import ObjectStoreFullError
from ember.object_store.store import ObjectNotFoundError, ObjectStore

A = 4096


def oid(n: int) -> bytes:
    return n.to_bytes(4, "big") + b"\xee" * 12


def put(store: ObjectStore, n: int, size: int = A, primary: bool = True, creator="w") -> int:
    offset = store.create(oid(n), size, creator, primary=primary)
    store.seal(oid(n))
    return offset


def test_create_seal_get_release_lifecycle() -> None:
    store = ObjectStore(10 * A)
    offset = store.create(oid(1), 100, "writer", owner=b"owner-1")
    assert offset == 0
    assert store.get(oid(1), "reader") is None  # not sealed yet
    assert not store.contains(oid(1))
    assert store.size_of(oid(1)) == 100
    store.seal(oid(1))
    assert store.contains(oid(1))
    assert store.get(oid(1), "reader") == (0, 100)
    assert store.get(oid(1), "reader") == (0, 100)
    assert store.get(oid(1), "other") == (0, 100)
    [row] = store.list_objects()
    assert row["object_id"] == oid(1).hex()
    assert row["readers"] == 3
    assert row["state"] == "SEALED"
    assert row["owner"] == b"owner-1"
    assert row["primary"] is True
    assert row["deleted"] is False
    assert row["size"] == 100
    assert row["last_access"] >= row["created_at"]
    assert store.stats()["num_pinned_by_readers"] == 1
    store.release(oid(1), "reader")
    store.release(oid(1), "reader")
    store.release(oid(1), "other")
    assert store.list_objects()[0]["readers"] == 0
    assert store.stats()["num_pinned_by_readers"] == 0
    with pytest.raises(ValueError, match="no pin"):
        store.release(oid(1), "reader")


def test_stats_track_lifecycle() -> None:
    store = ObjectStore(10 * A)
    assert store.stats() == {
        "capacity_bytes": 10 * A,
        "used_bytes": 0,
        "num_objects": 0,
        "num_sealed": 0,
        "num_primary": 0,
        "num_pinned_by_readers": 0,
        "num_evicted_total": 0,
        "bytes_evicted_total": 0,
        "num_created_total": 0,
        "num_spilled": 0,
        "spilled_bytes": 0,
        "spillable_bytes": 0,
        "num_spilled_total": 0,
        "bytes_spilled_total": 0,
        "num_restored_total": 0,
        "bytes_restored_total": 0,
    }
    store.create(oid(1), A + 1, "w")
    put(store, 2, primary=False)
    stats = store.stats()
    assert stats["used_bytes"] == 3 * A
    assert stats["num_objects"] == 2
    assert stats["num_sealed"] == 1
    assert stats["num_primary"] == 1
    assert stats["num_created_total"] == 2


def test_duplicate_id_is_rejected_until_deleted() -> None:
    store = ObjectStore(10 * A)
    put(store, 1)
    with pytest.raises(ValueError, match=oid(1).hex()):
        store.create(oid(1), 10, "w")
    assert store.delete(oid(1))
    assert store.create(oid(1), 10, "w") == 0


def test_unknown_ids() -> None:
    store = ObjectStore(10 * A)
    assert store.get(oid(9), "r") is None
    assert store.delete(oid(9)) is False
    assert not store.contains(oid(9))
    assert store.size_of(oid(9)) is None
    with pytest.raises(KeyError, match=oid(9).hex()):
        store.seal(oid(9))
    with pytest.raises(ObjectNotFoundError):
        store.abort(oid(9))
    with pytest.raises(ObjectNotFoundError):
        store.set_primary(oid(9), False)
    with pytest.raises(ValueError):
        store.release(oid(9), "r")


def test_seal_twice_and_abort_sealed_are_errors() -> None:
    store = ObjectStore(10 * A)
    put(store, 1)
    with pytest.raises(ValueError, match="already sealed"):
        store.seal(oid(1))
    with pytest.raises(ValueError, match="sealed"):
        store.abort(oid(1))


def test_abort_frees_unsealed_object() -> None:
    store = ObjectStore(10 * A)
    store.create(oid(1), 3 * A, "w")
    assert store.stats()["used_bytes"] == 3 * A
    store.abort(oid(1))
    assert store.stats()["used_bytes"] == 0
    assert store.list_objects() == []
    assert store.create(oid(1), A, "w") == 0  # the id is free again


def test_delete_unpinned_frees_immediately() -> None:
    store = ObjectStore(10 * A)
    put(store, 1, size=2 * A)
    assert store.delete(oid(1)) is True
    assert store.stats()["used_bytes"] == 0
    assert store.delete(oid(1)) is False
    assert not store.contains(oid(1))


def test_delete_while_pinned_frees_at_last_release() -> None:
    store = ObjectStore(10 * A)
    offset = put(store, 1, size=2 * A)
    store.get(oid(1), "r1")
    store.get(oid(1), "r2")
    assert store.delete(oid(1)) is True
    # No new readers, but the memory is still held for the current ones.
    assert store.get(oid(1), "r3") is None
    assert not store.contains(oid(1))
    assert store.stats()["used_bytes"] == 2 * A
    [row] = store.list_objects()
    assert row["deleted"] is True and row["readers"] == 2
    assert store.stats()["num_primary"] == 0
    store.release(oid(1), "r1")
    assert store.stats()["used_bytes"] == 2 * A
    store.release(oid(1), "r2")
    assert store.stats()["used_bytes"] == 0
    assert store.list_objects() == []
    assert store.create(oid(2), 2 * A, "w") == offset


def test_recreating_a_deleted_pinned_id_keeps_both_copies_apart() -> None:
    store = ObjectStore(10 * A)
    old = put(store, 1)
    store.get(oid(1), "r")
    store.delete(oid(1))
    new = put(store, 1)
    assert new != old
    assert store.get(oid(1), "r") == (new, A)
    # The offset says which copy the client is done with.
    store.release(oid(1), "r", offset=old)
    assert [row["offset"] for row in store.list_objects()] == [new]
    store.release(oid(1), "r")
    assert store.stats()["num_pinned_by_readers"] == 0


def test_delete_during_creation_frees_at_seal_or_abort() -> None:
    store = ObjectStore(10 * A)
    store.create(oid(1), A, "w")
    assert store.delete(oid(1)) is True
    # The creator may still be writing, so the memory must not be handed out yet.
    assert store.stats()["used_bytes"] == A
    assert store.create(oid(2), A, "w") == A
    store.seal(oid(1))
    assert store.stats()["used_bytes"] == A
    assert not store.contains(oid(1))

    store.create(oid(3), A, "w")
    store.delete(oid(3))
    store.abort(oid(3))
    assert store.stats()["used_bytes"] == A


def test_lru_eviction_of_secondary_copies_only() -> None:
    store = ObjectStore(4 * A)
    put(store, 1, primary=False)
    put(store, 2, primary=True)
    put(store, 3, primary=False)
    put(store, 4, primary=False)
    # Touch 1 so that 3 becomes the least recently used secondary copy.
    store.get(oid(1), "r")
    store.release(oid(1), "r")
    put(store, 5)
    assert not store.contains(oid(3))
    assert all(store.contains(oid(n)) for n in (1, 2, 4, 5))
    put(store, 6)
    assert not store.contains(oid(4))
    put(store, 7)
    assert not store.contains(oid(1))
    stats = store.stats()
    assert stats["num_evicted_total"] == 3
    assert stats["bytes_evicted_total"] == 3 * A
    # Only primaries are left, and they are never evicted.
    with pytest.raises(ObjectStoreFullError):
        store.create(oid(8), 1, "w")
    assert all(store.contains(oid(n)) for n in (2, 5, 6, 7))


def test_pinned_and_unsealed_secondary_copies_are_not_evicted() -> None:
    store = ObjectStore(3 * A)
    put(store, 1, primary=False)
    store.get(oid(1), "r")
    store.create(oid(2), A, "w", primary=False)  # still being written
    put(store, 3, primary=False)
    put(store, 4)  # evicts 3, the only evictable copy
    assert store.contains(oid(1))
    assert not store.contains(oid(3))
    with pytest.raises(ObjectStoreFullError):
        store.create(oid(5), A, "w")
    store.release(oid(1), "r")
    put(store, 5)
    assert not store.contains(oid(1))


def test_set_primary_controls_evictability() -> None:
    store = ObjectStore(2 * A)
    put(store, 1, primary=False)
    store.set_primary(oid(1), True)
    put(store, 2)
    with pytest.raises(ObjectStoreFullError):
        store.create(oid(3), A, "w")
    assert store.stats()["num_primary"] == 2
    store.set_primary(oid(1), False)
    assert store.stats()["num_primary"] == 1
    put(store, 3)
    assert not store.contains(oid(1))


def test_no_eviction_when_it_cannot_make_enough_room() -> None:
    store = ObjectStore(4 * A)
    put(store, 1, primary=False)
    put(store, 2)
    put(store, 3)
    with pytest.raises(ObjectStoreFullError):
        store.create(oid(4), 3 * A, "w")
    # Evicting 1 could not have helped, so the cached copy survives.
    assert store.contains(oid(1))
    assert store.stats()["num_evicted_total"] == 0


def test_full_error_message_explains_the_situation() -> None:
    store = ObjectStore(4 * A)
    put(store, 1)
    put(store, 2, primary=False)
    store.get(oid(2), "r")
    store.create(oid(3), A, "w")
    with pytest.raises(ObjectStoreFullError) as info:
        store.create(oid(7), 2 * A, "w")
    msg = str(info.value)
    assert oid(7).hex() in msg
    assert str(2 * A) in msg  # requested size
    assert f"capacity is {4 * A} bytes" in msg
    assert f"{3 * A} bytes are in use" in msg
    assert f"{3 * A} bytes of the {3 * A} bytes in use" in msg  # primary + pinned + unsealed
    assert "object_store_memory" in msg
    assert "Release references" in msg


def test_oversized_object_fails_immediately_without_eviction() -> None:
    store = ObjectStore(4 * A)
    put(store, 1, primary=False)
    with pytest.raises(ObjectStoreFullError) as info:
        store.create(oid(2), 4 * A + 1, "w")
    msg = str(info.value)
    assert oid(2).hex() in msg and str(4 * A + 1) in msg
    assert "larger than the store's capacity" in msg
    assert store.contains(oid(1))
    assert store.stats()["num_evicted_total"] == 0


def test_release_client_drops_pins_and_aborts_creations() -> None:
    store = ObjectStore(10 * A)
    put(store, 1)
    put(store, 2)
    store.get(oid(1), "gone")
    store.get(oid(1), "gone")
    store.get(oid(1), "stays")
    store.get(oid(2), "gone")
    store.delete(oid(2))
    store.create(oid(3), A, "gone")
    store.create(oid(4), A, "stays")
    store.release_client("gone")
    rows = {row["object_id"]: row for row in store.list_objects()}
    assert set(rows) == {oid(1).hex(), oid(4).hex()}
    assert rows[oid(1).hex()]["readers"] == 1
    assert store.stats()["used_bytes"] == 2 * A
    assert store.stats()["num_pinned_by_readers"] == 1
    # The client is forgotten entirely: doing it again is harmless.
    store.release_client("gone")
    with pytest.raises(ValueError):
        store.release(oid(1), "gone")
    store.release(oid(1), "stays")


def test_release_client_leaves_sealed_creations() -> None:
    store = ObjectStore(10 * A)
    put(store, 1, creator="gone")
    store.release_client("gone")
    assert store.contains(oid(1))


def test_delete_owned_by_frees_every_live_copy_of_a_dead_owner() -> None:
    store = ObjectStore(16 * A)
    dead = (b"dead-owner", "tcp:127.0.0.1:1", b"node-a")
    alive = (b"live-owner", "tcp:127.0.0.1:2", b"node-a")
    store.create(oid(1), A, "w", owner=dead)  # primary
    store.seal(oid(1))
    store.create(oid(2), A, "w", owner=dead, primary=False)  # a copy pulled from elsewhere
    store.seal(oid(2))
    store.create(oid(3), A, "w", owner=dead)  # still being written
    store.create(oid(4), A, "w", owner=alive)
    store.seal(oid(4))
    assert store.get(oid(1), "reader") is not None  # a reader still maps it
    assert sorted(store.delete_owned_by([b"dead-owner"])) == [oid(1), oid(2), oid(3)]
    assert not store.contains(oid(1)) and not store.contains(oid(2))
    assert store.contains(oid(4))
    # The pinned copy and the unsealed one hold memory until their reader and writer are done.
    assert store.stats()["num_objects"] == 3
    store.release(oid(1), "reader")
    store.seal(oid(3))
    assert store.stats()["num_objects"] == 1
    assert store.delete_owned_by([b"dead-owner"]) == []
    # A new object of the same id under a live owner is not the dead owner's.
    store.create(oid(1), A, "w", owner=alive)
    assert store.delete_owned_by([b"dead-owner"]) == []
    assert store.size_of(oid(1)) == A


def test_owners_on_node_names_owners_by_their_node() -> None:
    store = ObjectStore(16 * A)
    store.create(oid(1), A, "w", owner=(b"o1", "a", b"node-a"))
    store.create(oid(2), A, "w", owner=[b"o2", "b", b"node-b"])  # as a list off the wire
    store.create(oid(3), A, "w", owner=b"plain")
    assert store.owners_on_node(b"node-a") == [b"o1"]
    assert store.owners_on_node(b"node-b") == [b"o2"]
    store.abort(oid(1))
    assert store.owners_on_node(b"node-a") == []


def test_zero_size_objects() -> None:
    store = ObjectStore(2 * A)
    assert store.create(oid(1), 0, "w") == 0
    store.seal(oid(1))
    assert store.get(oid(1), "r") == (0, 0)
    assert store.stats()["used_bytes"] == A


def test_randomized_operations_keep_accounting_consistent() -> None:
    rng = random.Random(7)
    store = ObjectStore(64 * A)
    clients = ["a", "b", "c"]
    owners = [b"o1", b"o2", None]
    pins: dict[tuple[bytes, str], int] = {}
    for step in range(5000):
        n = rng.randrange(40)
        op = rng.random()
        client = rng.choice(clients)
        if op < 0.3:
            try:
                store.create(
                    oid(n),
                    rng.randrange(0, 6 * A),
                    client,
                    owner=rng.choice(owners),
                    primary=rng.random() < 0.5,
                )
            except (ValueError, ObjectStoreFullError):
                pass
        elif op < 0.45:
            try:
                store.seal(oid(n))
            except (ValueError, KeyError):
                pass
        elif op < 0.6:
            if store.get(oid(n), client) is not None:
                pins[(oid(n), client)] = pins.get((oid(n), client), 0) + 1
        elif op < 0.75:
            if pins.get((oid(n), client)):
                store.release(oid(n), client)
                pins[(oid(n), client)] -= 1
        elif op < 0.85:
            store.delete(oid(n))
        elif op < 0.9:
            try:
                store.set_primary(oid(n), rng.random() < 0.5)
            except KeyError:
                pass
        elif op < 0.91:
            store.delete_owned_by([rng.choice(owners)])
        elif op < 0.93:
            store.release_client(client)
            pins = {k: v for k, v in pins.items() if k[1] != client}
        else:
            try:
                store.abort(oid(n))
            except (ValueError, KeyError):
                pass
        rows = store.list_objects()
        stats = store.stats()
        assert stats["num_objects"] == len(rows), step
        assert stats["num_sealed"] == sum(r["state"] == "SEALED" for r in rows)
        assert stats["num_primary"] == sum(r["primary"] and not r["deleted"] for r in rows)
        assert stats["num_pinned_by_readers"] == sum(r["readers"] > 0 for r in rows)
        assert sum(r["readers"] for r in rows) == sum(pins.values())
        assert stats["used_bytes"] == sum(max(A, -(-r["size"] // A) * A) for r in rows)
        live_owned = sum(1 for r in rows if not r["deleted"] and r["owner"] is not None)
        assert sum(map(len, store._owned.values())) == live_owned
        # No two objects overlap.
        spans = sorted((r["offset"], r["offset"] + max(A, r["size"])) for r in rows)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    for client in clients:
        store.release_client(client)
    for row in store.list_objects():
        store.delete(bytes.fromhex(row["object_id"]))
    assert store.stats()["used_bytes"] == 0
    assert store.list_objects() == []
