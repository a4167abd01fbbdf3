"""The catalogue is the whole wire: every op the code base sends or handles is declared, every
handler table matches its catalogue, and message objects travel as today's op and body."""

from __future__ import annotations

import ast
import pathlib

import pytest
from ember.protocol.handler_table import HandlerTableError, check_handlers, handlers_from
from ember.protocol.messages import CATALOGUES, OMIT, all_ops, gcs, raylet, worker
from ember.protocol.messages.base import Catalogue, Message

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCANNED = ("core", "cli", "dashboard", "tests", "benchmarks", "scripts")
# Calls that take an op (and the position of the op among their arguments), and the
# catalogue the op must be in when the callee is known from the call's name.
SENDERS = {
    "call": 0,
    "request": 0,
    "request_cb": 0,
    "request_cb_direct": 0,
    "send": 0,
    "send_threadsafe": 0,
    "call_gcs_sync": 0,
    "gcs_call": 0,
    "gcs_send_threadsafe": 0,
    "call_raylet_sync": 0,
    "_send_threadsafe": 1,
    "_raylet_call": 1,
    "_call": 2,
}
KNOWN_RECEIVER = {
    "call_gcs_sync": "gcs",
    "gcs_call": "gcs",
    "gcs_send_threadsafe": "gcs",
    "call_raylet_sync": "raylet",
}
# Where each process builds its handler table: file, and the catalogue it must match.
TABLES = {
    "core/gcs/server.py": "gcs",
    "core/raylet/raylet.py": "raylet",
    "core/core_worker/core_worker.py": "worker",
    "dashboard/agent.py": "agent",
}


def _sources():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if ".venv" in path.parts or "node_modules" in path.parts:
                continue
            if path.name == "test_wire.py":
                continue  # the transport's own tests, with made-up ops
            yield path, ast.parse(path.read_text(), str(path))


def _op_uses():
    """(file:line, callee name, op) for every call that sends a literal op."""
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            pos = SENDERS.get(name)
            if pos is None or len(node.args) <= pos:
                continue
            arg = node.args[pos]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                yield where, name, arg.value


def _is_op(s: str) -> bool:
    return s.replace("_", "").isalpha() and s.islower()


def test_every_op_sent_in_the_code_base_is_catalogued():
    ops = all_ops()
    unknown, misrouted = [], []
    uses = [u for u in _op_uses() if _is_op(u[2])]
    assert len(uses) > 60  # the scan found the call sites
    for where, name, op in uses:
        if name in ("send", "call") and where.startswith(("dashboard/routes", "frontend")):
            continue  # websocket and HTTP helpers, not the wire
        if op not in ops:
            unknown.append(f"{where}: {name}({op!r})")
        elif name in KNOWN_RECEIVER and op not in CATALOGUES[KNOWN_RECEIVER[name]]:
            misrouted.append(f"{where}: {name}({op!r})")
    assert not unknown, "ops sent but not in ember.protocol.messages:\n" + "\n".join(unknown)
    assert not misrouted, "ops sent to a process that does not handle them:\n" + "\n".join(
        misrouted
    )


def _handler_keys(path: pathlib.Path) -> set[str]:
    """The keys of the dict literals a file builds handler tables from: ``self.handlers =
    {...}`` and the table passed to ``serve``."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        table = None
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            target = node.targets[0]
            if isinstance(target, ast.Attribute) and target.attr == "handlers":
                table = node.value
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "serve":
            table = next((a for a in node.args if isinstance(a, ast.Dict)), None)
        if table is not None:
            keys |= {k.value for k in table.keys if isinstance(k, ast.Constant)}
    return keys


@pytest.mark.parametrize("path,service", sorted(TABLES.items()))
def test_each_handler_table_matches_its_catalogue(path, service):
    keys = _handler_keys(ROOT / path)
    assert keys, f"no handler table found in {path}"
    assert keys == CATALOGUES[service].ops(), (
        f"{path}: missing from the catalogue {sorted(keys - CATALOGUES[service].ops())}, "
        f"catalogued but not handled {sorted(CATALOGUES[service].ops() - keys)}"
    )


def test_every_message_documents_itself():
    for cat in CATALOGUES.values():
        for cls in cat:
            assert cls.sent_by, f"{cat.service}.{cls.op}: say who sends it"
            assert cls.oneway or cls.reply != "None", (
                f"{cat.service}.{cls.op}: say what it answers, or mark it oneway"
            )
            assert cls.__doc__ is None or cls.__doc__.strip()


# -- messages on the wire ------------------------------------------------------------------
def test_messages_encode_as_todays_bodies():
    assert gcs.KvGet(key=b"k").to_body() == {"key": b"k"}
    assert gcs.KvGet(key=b"k", namespace="dashboard").to_body() == {
        "key": b"k",
        "namespace": "dashboard",
    }
    assert gcs.ListNodes().to_body() is None
    spec = object()
    assert worker.PushTask(spec).to_body() is spec
    assert raylet.PlasmaDelete(object_ids=[b"a"]).to_body() == {"object_ids": [b"a"]}
    msg = gcs.KillActor(actor_id=b"a", no_restart=True)
    assert gcs.KillActor.from_body(msg.to_body()) == msg
    assert repr(msg) == "KillActor(actor_id=b'a', no_restart=True)"
    assert worker.PushTask.from_body(spec).spec is spec
    assert not hasattr(msg, "__dict__")  # slots: no per-message dict
    with pytest.raises(TypeError):
        gcs.KvGet()  # a required field


def test_handler_tables_are_checked_at_start_up():
    cat = Catalogue("demo", "a test")

    class Demo(Message):
        catalogue = cat

    class A(Demo):
        op = "a"
        sent_by = "test"
        oneway = True
        x: int
        y: str = OMIT

    class B(Demo):
        op = "b"
        sent_by = "test"
        reply = "int"

    class Owner:
        def h_a(self, conn, body):
            return None

    owner = Owner()
    table = handlers_from(cat, owner, extra={"b": lambda c, b: 1})
    assert set(table) == {"a", "b"}
    with pytest.raises(HandlerTableError, match=r"no handler for \['b'\]"):
        handlers_from(cat, owner)
    with pytest.raises(HandlerTableError, match=r"not in the catalogue: \['c'\]"):
        check_handlers(cat, {"a": print, "b": print, "c": print})

    class Stray(Owner):
        def h_typo(self, conn, body):
            return None

    with pytest.raises(HandlerTableError, match="Stray.h_typo"):
        handlers_from(cat, Stray(), extra={"b": print})
    with pytest.raises(TypeError, match="two messages"):

        class Again(Demo):
            op = "a"
