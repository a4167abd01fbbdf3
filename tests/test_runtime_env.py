"""``runtime_env`` as Ray has it (issue 17): ``env_vars`` at ``init()``, task and actor level,
merged child over parent; ``working_dir`` and ``py_modules`` from local directories at both
levels (packed, put on the head, unpacked where the task runs: its import path and, for
``working_dir``, its current directory), undone after a task on a reused worker; Ray's other
plugins and unknown fields refused by name."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import ember
import pytest

pytestmark = pytest.mark.timeout(120)


@ember.remote
def _read_env() -> dict:
    return {k: os.environ.get(k) for k in ("RT_JOB", "RT_TASK", "RT_BOTH", "RT_ACTOR")}


@ember.remote
class _EnvActor:
    def read(self) -> dict:
        return {k: os.environ.get(k) for k in ("RT_JOB", "RT_TASK", "RT_BOTH", "RT_ACTOR")}

    def spawn(self) -> dict:
        return ember.get(_read_env.remote())  # a task it submits inherits the actor's


def test_env_vars_at_every_level_merge_and_do_not_leak(shared_node):
    plain = ember.get(_read_env.remote())
    assert plain == dict.fromkeys(plain)  # nothing set
    own = ember.get(
        _read_env.options(runtime_env={"env_vars": {"RT_TASK": "t", "RT_BOTH": "task"}}).remote()
    )
    assert own["RT_TASK"] == "t" and own["RT_BOTH"] == "task"
    # The next task on the same (reused) worker does not see them.
    assert [ember.get(_read_env.remote()) for _ in range(4)] == [plain] * 4
    actor = _EnvActor.options(num_cpus=0, runtime_env={"env_vars": {"RT_ACTOR": "a"}}).remote()
    assert ember.get(actor.read.remote())["RT_ACTOR"] == "a"
    assert ember.get(actor.spawn.remote())["RT_ACTOR"] == "a"  # inherited by its tasks


def test_unknown_fields_and_missing_plugins_are_refused():
    with pytest.raises(ValueError, match="'pip' .* is not supported by Ember"):
        _read_env.options(runtime_env={"pip": ["requests"]})
    with pytest.raises(ValueError, match="unknown runtime_env field 'colour'"):
        _read_env.options(runtime_env={"colour": "blue"})
    with pytest.raises(TypeError, match="env_vars .* dict of str to str"):
        _read_env.options(runtime_env={"env_vars": {"A": 1}})


def test_init_runtime_env_reaches_every_task_and_actor(tmp_path):
    """A driver of its own: ``init(runtime_env=...)`` with env_vars, a local working_dir
    and a local py_modules directory; a task's own env_vars merge over the job's."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "wd_helper.py").write_text("MARK = 'from-the-working-dir'\n")
    (work / "data.txt").write_text("read relative to the working dir\n")
    (work / "skip.bin").write_bytes(b"\0" * 1000)
    lib = tmp_path / "rt_lib"
    lib.mkdir()
    (lib / "__init__.py").write_text("def hello():\n    return 'hello from py_modules'\n")
    program = tmp_path / "prog.py"
    program.write_text(
        textwrap.dedent(
            f"""
            import os
            import ember

            ember.init(
                num_cpus=1,
                include_dashboard=False,
                runtime_env={{
                    "env_vars": {{"RT_JOB": "job", "RT_BOTH": "job"}},
                    "working_dir": {str(work)!r},
                    "py_modules": [{str(lib)!r}],
                    "excludes": ["*.bin"],
                }},
            )

            @ember.remote
            def task():
                import rt_lib, wd_helper
                return (
                    os.environ.get("RT_JOB"),
                    os.environ.get("RT_BOTH"),
                    wd_helper.MARK,
                    rt_lib.hello(),
                    open("data.txt").read().strip(),
                    os.path.exists("skip.bin"),
                )

            @ember.remote
            class Actor:
                def read(self):
                    import wd_helper
                    return os.environ.get("RT_JOB"), wd_helper.MARK

            print("task", ember.get(task.remote()))
            both = task.options(runtime_env={{"env_vars": {{"RT_BOTH": "task"}}}}).remote()
            print("merged", ember.get(both)[:2])
            print("actor", ember.get(Actor.remote().read.remote()))
            print("driver-cwd", os.getcwd())
            ember.shutdown()
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=90, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["task"] == repr(
        (
            "job",
            "job",
            "from-the-working-dir",
            "hello from py_modules",
            "read relative to the working dir",
            False,  # excluded from the package
        )
    ), out.stdout
    assert lines["merged"] == repr(("job", "task"))
    assert lines["actor"] == repr(("job", "from-the-working-dir"))
    assert lines["driver-cwd"] == str(tmp_path)  # the driver itself stays where it was
