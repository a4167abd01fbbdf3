"""``tune.Trainable``: the class form of a trainable (setup / step / save_checkpoint /
load_checkpoint / reset_config / cleanup), and the bookkeeping every result gets."""

from __future__ import annotations

import datetime
import os
import pickle
import shutil
import socket
import tempfile
import time
from pathlib import Path

from ember.tune.trainable.session import TrialContext

# Where a save_checkpoint that returns a dict keeps it inside the checkpoint directory.
DICT_CHECKPOINT_FILE = "_dict_checkpoint.pkl"
# Where a save_checkpoint (or 0.8's _save) that returns a path inside the directory says which.
PATH_CHECKPOINT_FILE = ".tune_checkpoint_path"


def node_ip() -> str:
    """The address of the node this trial runs on, as the cluster lists it."""
    try:
        import ember

        node_id = ember.get_runtime_context().get_node_id()
        for node in ember.nodes():
            if node.get("NodeID") == node_id:
                return node["NodeManagerAddress"]
    except Exception:  # noqa: BLE001 - outside a cluster (a unit test): fall through
        pass
    return "127.0.0.1"


class Trainable:
    """Subclass and define ``setup(config)``, ``step() -> dict`` and, to checkpoint,
    ``save_checkpoint(dir) -> dict | None`` and ``load_checkpoint(dict_or_dir)``."""

    def __init__(self, config: dict | None = None, context: TrialContext | None = None) -> None:
        self.config = config or {}
        self._context = context
        self._iteration = 0
        self._time_total = 0.0
        self._iterations_since_restore = 0
        self._time_since_restore = 0.0
        self._pid = os.getpid()
        self._host = socket.gethostname()
        self._ip = node_ip()
        self._checkpoint_index = 0
        self.setup(dict(self.config))

    # --- for subclasses -------------------------------------------------------------------
    # Each also runs Ray 0.8's name for it when a subclass defines that instead (the seed's
    # programs do): _setup, _train, _save, _restore, _stop.
    def setup(self, config: dict) -> None:
        legacy = getattr(self, "_setup", None)
        if legacy is not None:
            legacy(config)

    def step(self) -> dict:
        legacy = getattr(self, "_train", None)
        if legacy is not None:
            return legacy()
        raise NotImplementedError(f"{type(self).__name__} must define step()")

    def save_checkpoint(self, checkpoint_dir: str) -> dict | None:
        legacy = getattr(self, "_save", None)
        if legacy is not None:
            return legacy(checkpoint_dir)
        raise NotImplementedError(
            f"{type(self).__name__} has no save_checkpoint(); define it to checkpoint"
        )

    def load_checkpoint(self, checkpoint: dict | str) -> None:
        legacy = getattr(self, "_restore", None)
        if legacy is not None:
            legacy(checkpoint)
            return
        raise NotImplementedError(f"{type(self).__name__} has no load_checkpoint()")

    def reset_config(self, new_config: dict) -> bool:
        return False

    def cleanup(self) -> None:
        legacy = getattr(self, "_stop", None)
        if legacy is not None:
            legacy()

    # --- read by subclasses ---------------------------------------------------------------
    @property
    def iteration(self) -> int:
        return self._iteration

    @property
    def training_iteration(self) -> int:
        return self._iteration

    @property
    def trial_id(self) -> str:
        return self._context.trial_id if self._context else "default"

    @property
    def trial_name(self) -> str:
        return self._context.trial_name if self._context else "default"

    @property
    def logdir(self) -> str:
        if self._context:
            return self._context.trial_dir
        # Made outside Tune (``Example()``, as the seed's doctests do): a directory of its own,
        # never the caller's working directory.
        if getattr(self, "_own_logdir", None) is None:
            self._own_logdir = tempfile.mkdtemp(prefix=f"{type(self).__name__}_")
        return self._own_logdir

    # --- driven by the trial's actor ------------------------------------------------------
    def train(self) -> dict:
        start = time.time()
        result = self.step()
        if not isinstance(result, dict):
            raise TypeError(f"step() must return a dict of metrics, got {type(result).__name__}")
        return self._fill(dict(result), time.time() - start, leading=("done",))

    def _fill(self, result: dict, took: float, leading: tuple = ()) -> dict:
        """Adds the fields Tune writes on every result, in Ray 2.60's order for the kind."""
        self._iteration += 1
        self._iterations_since_restore += 1
        self._time_total += took
        self._time_since_restore += took
        now = datetime.datetime.now()
        for key in leading:
            result.setdefault(key, False)
        result.setdefault("done", False)
        result["training_iteration"] = self._iteration
        result["trial_id"] = self.trial_id
        result["date"] = now.strftime("%Y-%m-%d_%H-%M-%S")
        result.setdefault("timestamp", int(time.time()))
        result["time_this_iter_s"] = took
        result["time_total_s"] = self._time_total
        result["pid"] = self._pid
        result["hostname"] = self._host
        result["node_ip"] = self._ip
        result["config"] = self.config
        result["time_since_restore"] = self._time_since_restore
        result["iterations_since_restore"] = self._iterations_since_restore
        return result

    def reset(self, new_config: dict, context: TrialContext | None) -> bool:
        """This instance serves another trial (``reuse_actors``): its counters start over
        and ``reset_config`` takes the new config (False: it cannot, and is not reused)."""
        if not self.reset_config(dict(new_config)):
            return False
        self.config = new_config
        self._context = context
        self._iteration = self._iterations_since_restore = 0
        self._time_total = self._time_since_restore = 0.0
        self._checkpoint_index = 0
        return True

    def save(self) -> str:
        """Saves into the trial's next ``checkpoint_NNNNNN`` directory; returns its name."""
        name = f"checkpoint_{self._checkpoint_index:06d}"
        self._checkpoint_index += 1
        checkpoint_dir = Path(self.logdir, name)
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        state = self.save_checkpoint(str(checkpoint_dir))
        if isinstance(state, dict):
            Path(checkpoint_dir, DICT_CHECKPOINT_FILE).write_bytes(pickle.dumps(state))
        elif isinstance(state, str) and state:
            # Ray 0.8's _save returns the file it wrote, and _restore is given that path.
            inside = os.path.relpath(state, checkpoint_dir)
            if not inside.startswith(".."):
                Path(checkpoint_dir, PATH_CHECKPOINT_FILE).write_text(inside)
        return name

    def restore(self, checkpoint_dir: str, iteration: int = 0, time_total: float = 0.0) -> None:
        """Loads a checkpoint; the loop passes the iteration and time it was taken at (kept
        in the experiment's state, so nothing of Tune's is written into the user's files)."""
        self._iteration, self._time_total = iteration, time_total
        name = Path(checkpoint_dir).name
        if name.startswith("checkpoint_") and name[11:].isdigit():
            self._checkpoint_index = int(name[11:]) + 1
        dict_file = Path(checkpoint_dir, DICT_CHECKPOINT_FILE)
        path_file = Path(checkpoint_dir, PATH_CHECKPOINT_FILE)
        if dict_file.exists():
            self.load_checkpoint(pickle.loads(dict_file.read_bytes()))
        elif path_file.exists():
            self.load_checkpoint(str(Path(checkpoint_dir, path_file.read_text())))
        else:
            self.load_checkpoint(checkpoint_dir)
        self._iterations_since_restore = 0
        self._time_since_restore = 0.0

    def stop(self) -> None:
        self.cleanup()

    # --- Ray 0.8's other public methods ---------------------------------------------------
    def get_config(self) -> dict:
        return self.config

    def save_to_object(self) -> bytes:
        """The checkpoint as one object (every file of its directory, and the progress)."""
        name = self.save()
        root = Path(self.logdir, name)
        files = {
            str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
        }
        shutil.rmtree(root, ignore_errors=True)
        self._checkpoint_index -= 1
        return pickle.dumps(
            {"name": name, "files": files, "iteration": self._iteration, "time": self._time_total}
        )

    def restore_from_object(self, obj: bytes) -> None:
        data = pickle.loads(obj)
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp, data["name"])
            for rel, blob in data["files"].items():
                Path(root, rel).parent.mkdir(parents=True, exist_ok=True)
                Path(root, rel).write_bytes(blob)
            root.mkdir(parents=True, exist_ok=True)
            self.restore(str(root), data["iteration"], data["time"])

    def delete_checkpoint(self, checkpoint_path: str) -> None:
        """Deletes a checkpoint directory of this trainable (never one outside its logdir)."""
        path = Path(checkpoint_path).resolve()
        if Path(self.logdir).resolve() in path.parents:
            shutil.rmtree(path, ignore_errors=True)

    def export_model(self, export_formats: list[str] | str, export_dir: str | None = None) -> dict:
        formats = [export_formats] if isinstance(export_formats, str) else list(export_formats)
        return self._export_model(formats, export_dir or self.logdir)

    def _export_model(self, export_formats: list[str], export_dir: str) -> dict:
        return {}
