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
    "request_cb_batched": 0,
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
    "core/agent/agent.py": "agent",
}


def _sources():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).parts
            if "node_modules" in rel or any(part.startswith(".") for part in rel):
                continue  # virtual environments (the tests' Ray, a venv), tools' packages
            if path.name == "test_wire.py":
                continue  # the transport's own tests, with made-up ops
            yield path, ast.parse(path.read_text(), str(path))


def _sends():
    """(file:line, callee name, op, the call's arguments after the op) for every call that
    sends a literal op."""
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
                yield where, name, arg.value, node.args[pos + 1 :]


def _op_uses():
    """(file:line, callee name, op) for every call that sends a literal op."""
    for where, name, op, _ in _sends():
        yield where, name, op


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


def _built_tables(tree: ast.AST, service: str) -> dict[str, str]:
    """{op: handler name} of tables a file builds with ``handlers_from``: the methods named
    ``h_<op>`` / ``_h_<op>`` in the service's handler files and the keys of the ``extra=``
    literal."""
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "handlers_from"
    ]
    if not calls:
        return {}
    out = {}
    parts = [ast.parse((ROOT / f).read_text()) for f in HANDLER_FILES[service]]
    for node in (n for part in parts for n in ast.walk(part)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for prefix in ("h_", "_h_"):
                if node.name.startswith(prefix):
                    out.setdefault(node.name[len(prefix) :], node.name)
    for call in calls:
        for kw in call.keywords:
            if kw.arg == "extra" and isinstance(kw.value, ast.Dict):
                for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                    if isinstance(k, ast.Constant):
                        out[k.value] = getattr(v, "attr", "")
    return out


def _handler_keys(path: pathlib.Path, service: str) -> set[str]:
    """The ops of the tables a file builds: from dict literals (``self.handlers = {...}`` and
    the table passed to ``serve``) or with ``handlers_from``."""
    tree = ast.parse(path.read_text())
    keys: set[str] = set(_built_tables(tree, service))
    for node in ast.walk(tree):
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
    keys = _handler_keys(ROOT / path, service)
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


# -- fields: what senders put in a body and handlers read from it --------------------------
def _dict_keys(node: ast.AST) -> set[str] | None:
    if not isinstance(node, ast.Dict) or any(k is None for k in node.keys):
        return None  # not a literal, or built with ** (checked where it is built)
    return {k.value for k in node.keys if isinstance(k, ast.Constant)}


def test_bodies_sent_carry_only_catalogued_fields():
    ops_by_service = [(name, cat) for name, cat in CATALOGUES.items()]
    wrong = []
    checked = 0
    for where, _, op, rest in _sends():
        keys = _dict_keys(rest[0]) if rest else None
        if keys is None:
            continue
        checked += 1
        # The op's message in some catalogue must declare every key (an op name used by
        # two receivers is fine with either's fields; a whole-body message is open).
        fits = [
            cat
            for _, cat in ops_by_service
            if op in cat and (cat[op].body_is or keys <= set(cat[op]._fields))
        ]
        if not fits:
            wrong.append(f"{where}: {op} {keys}")
    assert checked > 40  # the scan found the literal bodies
    assert not wrong, "bodies with fields the catalogue does not declare:\n" + "\n".join(wrong)


def _handler_methods(path: pathlib.Path, service: str) -> dict[str, str]:
    """{op: handler method name} from a file's handler table (literal or built)."""
    tree = ast.parse(path.read_text())
    out = {op: name for op, name in _built_tables(tree, service).items() if name}
    for node in ast.walk(tree):
        table = None
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            if getattr(node.targets[0], "attr", "") == "handlers":
                table = node.value
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "serve":
            table = next((a for a in node.args if isinstance(a, ast.Dict)), None)
        for k, v in zip(table.keys, table.values, strict=True) if table else ():
            if isinstance(k, ast.Constant) and isinstance(v, ast.Attribute):
                out[k.value] = v.attr
    return out


def _fields_read(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Keys a handler reads from its body argument: ``body["k"]`` and ``body.get("k")``."""
    params = [a.arg for a in fn.args.args]
    if len(params) < 3:
        return set()
    body = params[2]
    keys = set()
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.Subscript)
            and getattr(n.value, "id", None) == body
            and isinstance(n.slice, ast.Constant)
        ):
            keys.add(n.slice.value)
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and getattr(n.func.value, "id", None) == body
            and n.func.attr == "get"
            and n.args
            and isinstance(n.args[0], ast.Constant)
        ):
            keys.add(n.args[0].value)
    return keys


HANDLER_FILES = {
    "gcs": tuple(
        f"core/gcs/{m}.py"
        for m in ("server", "nodes", "jobs", "actors", "kv", "placement_groups", "events")
    ),
    "raylet": tuple(
        f"core/raylet/{m}.py" for m in ("raylet", "lease_manager", "object_service", "membership")
    ),
    "worker": tuple(
        f"core/core_worker/{m}.py"
        for m in (
            "core_worker",
            "peers",
            "object_access",
            "ownership",
            "task_manager",
            "created_actors",
            "cluster_links",
            "generator_streams",
        )
    ),
    "agent": ("core/agent/agent.py",),
}


@pytest.mark.parametrize("service", sorted(HANDLER_FILES))
def test_handlers_read_only_catalogued_fields(service):
    files = [ROOT / f for f in HANDLER_FILES[service]]
    methods = _handler_methods(files[0], service)
    assert len(methods) >= len(CATALOGUES[service]) - 2  # a few are lambdas
    defs = {}
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                defs.setdefault(node.name, node)
    cat = CATALOGUES[service]
    wrong = []
    for op, method in methods.items():
        msg = cat[op]
        if msg.body_is is not None or method not in defs:
            continue
        extra = _fields_read(defs[method]) - set(msg._fields)
        if extra:
            wrong.append(f"{service}.{op} ({method}) reads {sorted(extra)}")
    assert not wrong, "handlers read fields the catalogue does not declare:\n" + "\n".join(wrong)
