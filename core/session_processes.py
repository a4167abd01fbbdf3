"""This user's Ember processes on this machine: found by their command line, stopped gracefully
then by force, and the shared memory and spill directories of raylets that died without removing
them cleaned up. ``ember stop`` and the autoscaler's local node providers stop nodes with it.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil

import psutil

# Modules whose processes are Ember's. Workers forked by the zygote keep its command line.
_EMBER_MODULES = (
    "ember.gcs.server",
    "ember.raylet.raylet",
    "ember.raylet.zygote",
    "ember.worker_main",
    "ember.agent",
    "ember.dashboard",
)


def _session_of(cmdline: list[str]) -> str | None:
    if "--session-dir" in cmdline:
        i = cmdline.index("--session-dir")
        if i + 1 < len(cmdline):
            return cmdline[i + 1]
    return None


def module_of(cmdline: list[str]) -> str | None:
    if "-m" in cmdline:
        i = cmdline.index("-m")
        if i + 1 < len(cmdline) and cmdline[i + 1].startswith(_EMBER_MODULES):
            return cmdline[i + 1]
    return None


def find_ember_processes(temp_dir: str | None = None) -> list[psutil.Process]:
    """This user's Ember processes (under ``temp_dir`` only, if given), parents first."""
    me = os.getpid()
    uid = os.getuid()
    root = os.path.realpath(temp_dir) + os.sep if temp_dir else None
    found: list[psutil.Process] = []
    for p in psutil.process_iter(["pid", "uids", "cmdline"]):
        try:
            if p.info["pid"] == me or p.info["uids"] is None or p.info["uids"].real != uid:
                continue
            cmd = p.info["cmdline"] or []
            if module_of(cmd) is None:
                continue
            if root is not None:
                session = session_of_process(p)
                if session is None or not (os.path.realpath(session) + os.sep).startswith(root):
                    continue
            found.append(p)
        except psutil.Error:
            continue
    return found


def session_of_process(p: psutil.Process) -> str | None:
    """The session directory a process belongs to: its own ``--session-dir``, or (a zygote
    or forked worker) that of its raylet ancestor."""
    try:
        return _session_of(p.cmdline()) or _ancestor_session(p)
    except psutil.Error:
        return None


def _ancestor_session(p: psutil.Process) -> str | None:
    try:
        for parent in p.parents():
            session = _session_of(parent.cmdline())
            if session is not None:
                return session
    except psutil.Error:
        return None
    return None


def stop_processes(procs: list[psutil.Process], force: bool, grace: float = 10.0) -> int:
    """SIGTERM (SIGKILL with ``force``), wait up to ``grace`` s, then SIGKILL what is left."""
    # GCS and raylets first: a raylet stops its own workers, which is the gentle order.
    order = sorted(procs, key=lambda p: 0 if _is_daemon(p) else 1)
    for p in order:
        try:
            p.kill() if force else p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(order, timeout=0.5 if force else grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5.0)
    return len(procs)


def stop_sessions_under(dirs: list[str], grace: float = 5.0) -> dict[str, int]:
    """Stops the processes of the sessions under each of ``dirs`` (several nodes' temp dirs)
    in one pass: one scan of the machine's processes for all of them, SIGTERM (raylets first,
    which stop their workers), SIGKILL after ``grace``, then their shared memory and spill
    directories. {dir: processes that would not exit} for the dirs with any."""
    roots = {d: os.path.realpath(d) + os.sep for d in dirs}
    if not roots:
        return {}
    parent = os.path.commonpath([os.path.dirname(r.rstrip(os.sep)) for r in roots.values()])

    def under(procs: list[psutil.Process]) -> dict[str, list[psutil.Process]]:
        found: dict[str, list[psutil.Process]] = {}
        for p in procs:
            session = os.path.realpath(session_of_process(p) or "") + os.sep
            for d, root in roots.items():
                if session.startswith(root):
                    found.setdefault(d, []).append(p)
        return found

    chosen = [p for ps in under(find_ember_processes(parent)).values() for p in ps]
    arenas, spill_dirs = arena_paths(chosen), spill_dirs_of(chosen)
    stop_processes(chosen, False, grace)
    left = under(find_ember_processes(parent))
    # A raylet killed after the grace leaves its shared memory: the paths its sessions
    # recorded (node.json) go too, unless one of these sessions' survivors still uses one
    # (no other raylet uses a path these sessions recorded).
    in_use = set(arena_paths([p for ps in left.values() for p in ps]))
    for d in roots:
        arenas += _unused(_arena_candidates(d), in_use)
    remove_leftovers([a for a in dict.fromkeys(arenas) if a not in in_use], spill_dirs)
    return {d: len(ps) for d, ps in left.items()}


def remove_leftovers(arenas: list[str], spill_dirs: list[str]) -> None:
    """What stopped raylets leave when killed: their shared memory and spilled objects."""
    for path in arenas:
        try:
            os.unlink(path)
        except OSError:
            pass
    for path in spill_dirs:
        shutil.rmtree(path, ignore_errors=True)


def _raylet_args(procs: list[psutil.Process], flag: str) -> list[str]:
    """The value of ``flag`` on these raylets' command lines."""
    values = []
    for p in procs:
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if flag in cmd[:-1] and module_of(cmd) == "ember.raylet.raylet":
            values.append(cmd[cmd.index(flag) + 1])
    return values


def arena_paths(procs: list[psutil.Process]) -> list[str]:
    return [p for p in _raylet_args(procs, "--arena-path") if p.startswith("/dev/shm/ember-")]


def _arena_candidates(temp_dir: str | None) -> list[str]:
    """Arena files that may be leftovers: with ``temp_dir``, the ones its sessions recorded
    (``node.json``); without, every one in /dev/shm."""
    if not temp_dir:
        return glob.glob("/dev/shm/ember-*")
    candidates = []
    for info in glob.glob(os.path.join(temp_dir, "session_*", "node.json")):
        try:
            with open(info) as f:
                path = json.load(f).get("arena_path") or ""
        except (OSError, ValueError):
            continue
        if path.startswith("/dev/shm/ember-"):
            candidates.append(path)
    return candidates


def _unused(candidates: list[str], in_use: set[str]) -> list[str]:
    """This user's ``candidates`` that no running raylet uses."""
    uid = os.getuid()
    out = []
    for path in dict.fromkeys(candidates):
        try:
            if os.stat(path).st_uid == uid and path not in in_use:
                out.append(path)
        except OSError:
            continue
    return out


def spill_dirs_of(procs: list[psutil.Process]) -> list[str]:
    """The spill directories of these raylets."""
    return [d for d in _raylet_args(procs, "--spill-dir") if _is_spill_dir(d)]


def _is_spill_dir(path: str) -> bool:
    from ember.object_store.spill import SPILL_DIR_PREFIX

    return os.path.basename(os.path.normpath(path)).startswith(SPILL_DIR_PREFIX)


def _spill_candidates(temp_dir: str | None) -> list[str]:
    """Spill directories of this user's sessions (under ``temp_dir``, else the usual roots)
    that may be leftovers: killed raylets could not remove their spilled objects."""
    from ember.session import temp_roots

    candidates = []
    for root in temp_roots(temp_dir):
        sessions = glob.glob(os.path.join(root, "session_*"))
        for session in sessions:
            candidates.extend(glob.glob(os.path.join(session, "ember-spill-*")))
            try:
                with open(os.path.join(session, "node.json")) as f:
                    recorded = json.load(f).get("spill_dir") or ""
            except (OSError, ValueError):
                continue
            if recorded:
                candidates.append(recorded)
    return [c for c in candidates if _is_spill_dir(c)]


def _sessions(procs: list[psutil.Process], module: str) -> set[str]:
    found = set()
    for p in procs:
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if module_of(cmd) == module and _session_of(cmd):
            found.add(_session_of(cmd))
    return found


_ARENA_NAME = re.compile(r"ember-(\d+)-[0-9a-f]+")


def sweep_orphan_arenas() -> list[str]:
    """Removes this user's arena files in /dev/shm that killed nodes left: the process that
    made one (its pid is in the name) is gone, and no raylet holds it (its lock, which a
    raylet takes when it makes the file and keeps for its life, seen across PID namespaces)
    or names it. A node starting calls this,
    so a driver and raylet killed by force leave their arena until the next start on the
    machine, not for good. Returns the paths it removed."""
    from ember.object_store.arena import remove_if_unheld

    candidates = []
    for path in glob.glob("/dev/shm/ember-*"):
        m = _ARENA_NAME.fullmatch(os.path.basename(path))
        if m and not psutil.pid_exists(int(m.group(1))):
            candidates.append(path)
    if not candidates:  # the usual case: no process listing needed
        return []
    # Also not one a raylet we can see names (one from before raylets held their arena's
    # lock: an Ember upgraded while an older node runs); who runs is read after the listing.
    mapped = set(arena_paths(find_ember_processes(None)))
    removed = []
    for path in _unused(candidates, mapped):
        if remove_if_unheld(path):
            removed.append(path)
    return removed


def clean_leftovers(temp_dir: str | None) -> None:
    """What killed processes leave behind: their arenas in /dev/shm and heads' notes."""
    from ember.session import prune_head_markers

    arenas, spills = _arena_candidates(temp_dir), _spill_candidates(temp_dir)
    # Who runs is read after the files are listed: a raylet's process exists before it makes
    # its files, so a node starting meanwhile (another session's) is seen running, or made
    # its files after the listing. Read before, it was neither, and lost its arena.
    live = find_ember_processes(None)
    for path in _unused(arenas, set(arena_paths(live))):
        try:
            os.unlink(path)
        except OSError:
            pass
    for path in _unused(spills, set(spill_dirs_of(live))):
        shutil.rmtree(path, ignore_errors=True)
    prune_head_markers(_sessions(live, "ember.gcs.server"))
    # Sessions listed as live whose raylet is gone are unlisted on the way.
    from ember.cluster_address import live_local_nodes

    live_local_nodes(temp_dir)


def _is_daemon(p: psutil.Process) -> bool:
    try:
        mod = module_of(p.cmdline()) or ""
    except psutil.Error:
        return False
    return mod in ("ember.gcs.server", "ember.raylet.raylet")
