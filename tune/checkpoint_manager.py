"""Which of a trial's checkpoints to keep (``CheckpointConfig.num_to_keep``, ranked by
``checkpoint_score_attribute``); decides only, the loop's shell deletes."""

from __future__ import annotations

from ember.tune.config import CheckpointConfig


def register(
    kept: list[list], name: str, result: dict, config: CheckpointConfig
) -> tuple[list[list], list[str]]:
    """Adds (name, score) to the kept list; returns the new list and the names to delete.
    The newest checkpoint is never deleted: a restart resumes from it."""
    attr = config.checkpoint_score_attribute
    score = result.get(attr) if attr else None
    kept = [entry for entry in kept if entry[0] != name] + [[name, score]]
    keep = config.num_to_keep
    if keep is None or len(kept) <= keep:
        return kept, []
    older = kept[:-1]
    if attr is None:
        ranked = older  # oldest first: drop the oldest
    else:
        sign = 1 if config.checkpoint_score_order == "max" else -1

        def worth(entry: list) -> float:
            value = entry[1]
            return sign * value if isinstance(value, int | float) else float("-inf")

        ranked = sorted(older, key=worth)  # worst first
    drop = {entry[0] for entry in ranked[: len(kept) - keep]}
    return [e for e in kept if e[0] not in drop], [e[0] for e in older if e[0] in drop]
