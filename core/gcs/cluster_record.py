"""The cluster's token, kept with the GCS's durable tables so that a head started again on
the same storage keeps it: the worker nodes, workers and drivers that joined with it then
reconnect to the new head instead of being refused.

The token lives in the storage's ``cluster`` table (``b"token"``), never in the KV, so no KV
request reads it back. Whoever can read the storage can read it; with Redis that is anyone
who can reach the Redis server, who can already read (and rewrite) the cluster's whole
state, actor specs included: guard the Redis server as you guard the cluster token.
"""

from __future__ import annotations

import logging
import os

from ember.cluster_token import write_token
from ember.gcs.storage import Store

logger = logging.getLogger("ember.gcs")

TABLE = "cluster"
TOKEN_KEY = b"token"


async def settle_token(
    store: Store,
    tables: dict[str, dict[bytes, bytes]],
    token: bytes,
    token_file: str,
    keep_stored: bool,
) -> bytes:
    """The token this GCS serves with, stored durably before it answers anyone.

    ``token`` is the one in ``token_file`` (the node made it, or the user gave it).
    ``keep_stored``: the node made it, so a token the storage already holds (a previous
    head's) wins and is written over ``token_file`` for this node's other processes, which
    read the file only after the GCS is ready. A token the user gave wins over the stored
    one (the old nodes must then join again with it), and is stored in its place."""
    stored = tables.get(TABLE, {}).get(TOKEN_KEY)
    if stored and stored != token:
        if keep_stored:
            # The file is always <session_dir>/cluster_token (cluster_token.write_token).
            write_token(os.path.dirname(token_file), stored)
            logger.info(
                "kept the cluster token of the previous head on %s: its nodes and drivers "
                "reconnect with it",
                store.backend.description,
            )
            return stored
        logger.warning(
            "the cluster token given replaces the one stored in %s: nodes and drivers that "
            "joined with the old one are refused until they join again with the new one",
            store.backend.description,
        )
    if stored != token:
        store.put(TABLE, TOKEN_KEY, token)
        await store.durable()
    return token
