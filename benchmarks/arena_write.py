"""Throughput of putting one 800 MiB numpy array into the shared-memory arena, repeatedly.

Each put does what a driver's ``put`` will: pickle protocol 5 with the array's buffer out of
band, ask the object table for space, copy header and buffer into the arena (64-byte aligned),
seal; then the owner deletes the object so the next put is placed in reused, resident memory.
Ray's figure for this workload is about 7.5 GB/s.

``--pad-to`` sets the alignment of each chunk. With 64 the array's bytes land a little past
the source's page offset, the case in which large copies fall back to blocked ordinary stores
(see ``arena._copy``); with 4096 they land page aligned and glibc's non-temporal copy runs.

Run: .venv/bin/python benchmarks/arena_write.py [--puts 10] [--mib 800] [--pad-to 64]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import time
import uuid

import numpy as np
from ember.object_store.arena import Arena, create_arena_file, layout, remove_arena_file
from ember.object_store.store import ObjectStore


def put(store: ObjectStore, arena: Arena, object_id: bytes, value: object, pad_to: int) -> int:
    """Serialises ``value`` into the arena; returns the bytes occupied."""
    buffers: list[pickle.PickleBuffer] = []
    header = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    chunks = [header, *buffers]
    _, span = layout([len(header), *(b.raw().nbytes for b in buffers)], pad_to=pad_to)
    offset = store.create(object_id, span, "bench")
    arena.write(offset, chunks, pad_to=pad_to, limit=span)
    store.seal(object_id)
    return span


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=10)
    parser.add_argument("--mib", type=int, default=800)
    parser.add_argument("--pad-to", type=int, default=64)
    args = parser.parse_args()

    array = np.random.default_rng(0).integers(0, 255, args.mib * 1024 * 1024, dtype=np.uint8)
    capacity = 2 * array.nbytes + (64 << 20)
    path = f"/dev/shm/ember-bench-arena-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    create_arena_file(path, capacity)
    arena = Arena(path, capacity)
    store = ObjectStore(capacity)
    try:
        # The first put faults the pages in; after that the freed space is reused warm.
        start = time.perf_counter()
        size = put(store, arena, b"warmup", array, args.pad_to)
        cold = time.perf_counter() - start
        store.delete(b"warmup")
        print(f"cold first put (page faults): {size / cold / 1e9:6.2f} GB/s")
        print(
            f"source page offset {array.ctypes.data % 4096}, array bytes at object offset "
            f"{size - array.nbytes} (pad_to={args.pad_to})"
        )

        rates = []
        for i in range(args.puts):
            object_id = f"obj-{i}".encode()
            start = time.perf_counter()
            size = put(store, arena, object_id, array, args.pad_to)
            elapsed = time.perf_counter() - start
            store.delete(object_id)
            rates.append(size / elapsed / 1e9)
            print(
                f"put {i + 1:2d}: {size / 1e6:8.1f} MB in {elapsed * 1e3:7.1f} ms "
                f"= {rates[-1]:6.2f} GB/s"
            )
        total = args.puts * size
        print(
            f"{args.puts} puts of {size / 1e6:.1f} MB: mean {statistics.mean(rates):.2f} GB/s, "
            f"median {statistics.median(rates):.2f} GB/s, min {min(rates):.2f}, "
            f"max {max(rates):.2f} (total {total / 1e9:.1f} GB)"
        )
    finally:
        arena.close()
        remove_arena_file(path)


if __name__ == "__main__":
    main()
