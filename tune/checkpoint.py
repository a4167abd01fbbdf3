"""``Checkpoint``: a directory of a trial's state, as Ray's (local filesystem only)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


class Checkpoint:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(Path(path).expanduser().resolve())

    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> Checkpoint:
        if not Path(path).is_dir():
            raise ValueError(f"Checkpoint.from_directory: {path} is not a directory")
        return cls(path)

    def to_directory(self, path: str | os.PathLike | None = None) -> str:
        """Copies the checkpoint's files into ``path`` (a new temporary directory if None)."""
        self._check()
        target = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="checkpoint_"))
        target.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.path, target, dirs_exist_ok=True)
        return str(target)

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """The checkpoint's directory itself (local: no copy). Read it; do not change it."""
        self._check()
        yield self.path

    def _check(self) -> None:
        if not Path(self.path).is_dir():
            raise FileNotFoundError(
                f"the checkpoint directory {self.path} is gone (deleted after it was reported?)"
            )

    def __repr__(self) -> str:
        return f"Checkpoint(filesystem=local, path={self.path})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)
