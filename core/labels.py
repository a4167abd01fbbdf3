"""Node labels and label selectors, as Ray has them: a node carries ``{key: value}`` labels
(``ember start --labels``) plus ``ray.io/node-id``, which the runtime sets; a selector
``{key: condition}`` matches a node when every condition holds, a condition being ``value``,
``!value``, ``in(a,b,...)`` or ``!in(a,b,...)``.

Keys are a name of up to 63 characters (letters, digits, ``-``, ``_``, ``.``, starting and
ending with a letter or digit), optionally after a DNS-style prefix and ``/``; values are
empty or a name of the same form. The ``ray.io/`` prefix is the runtime's own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

NODE_ID_LABEL = "ray.io/node-id"
RESERVED_PREFIX = "ray.io/"
_NAME = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
_PREFIX = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
_IN = re.compile(r"^(!?)in\((.*)\)$")


def _key_error(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if not name or not _NAME.match(name):
        return (
            f"label key {key!r}: its name must be 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        return f"label key {key!r}: its prefix must be a DNS subdomain (e.g. example.com)"
    return None


def _value_error(key: str, value: str) -> str | None:
    if not isinstance(value, str) or not _NAME.match(value):
        return (
            f"label {key!r}: value {value!r} must be up to 63 letters, digits, '-', '_' or "
            "'.', starting and ending with a letter or digit"
        )
    return None


def check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` if valid for a node; ValueError naming the first bad one and why."""
    for key, value in labels.items():
        problem = _key_error(key) or _value_error(key, value)
        if key.startswith(RESERVED_PREFIX):
            problem = f"label key {key!r}: the {RESERVED_PREFIX} prefix is the runtime's own"
        if problem:
            raise ValueError(problem)
    return dict(labels)


def parse_labels(text: str) -> dict[str, str]:
    """``ember start --labels``: ``k1=v1,k2=v2`` or a JSON object."""
    text = text.strip()
    if text.startswith("{"):
        try:
            labels = json.loads(text)
        except ValueError as e:
            raise ValueError(f'--labels is not JSON ({e}); e.g. \'{{"zone": "a"}}\'') from None
        if not isinstance(labels, dict):
            raise ValueError("--labels JSON must be an object of strings")
        return check_labels({str(k): v for k, v in labels.items()})
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"--labels item {part!r} is not KEY=VALUE (e.g. zone=a,disk=ssd)")
        out[key.strip()] = value.strip()
    return check_labels(out)


def _condition(key: str, condition: str) -> tuple[bool, frozenset[str]]:
    """``(negated, values)`` of a selector's condition; ValueError when malformed."""
    if not isinstance(condition, str):
        raise ValueError(f"label selector {key!r}: condition {condition!r} is not a string")
    m = _IN.match(condition.strip())
    if m:
        values = [v.strip() for v in m.group(2).split(",")]
        if not all(values):
            raise ValueError(f"label selector {key!r}: {condition!r} lists an empty value")
        negated = bool(m.group(1))
    else:
        negated = condition.startswith("!")
        values = [condition[1:] if negated else condition]
    for v in values:
        problem = _value_error(key, v)
        if problem:
            raise ValueError(f"label selector {problem}")
    return negated, frozenset(values)


def check_selector(selector: Mapping[str, str]) -> dict[str, str]:
    """``selector`` if every key and condition is well formed; ValueError naming the first
    that is not."""
    for key, condition in selector.items():
        problem = _key_error(key)
        if problem:
            raise ValueError(f"label selector {problem.removeprefix('label ')}")
        _condition(key, condition)
    return dict(selector)


def matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` satisfies every condition of ``selector``. A node
    without the key fails ``value`` and ``in(...)`` and passes ``!value`` and ``!in(...)``."""
    for key, condition in selector.items():
        negated, values = _condition(key, condition)
        present = labels.get(key) in values
        if present == negated:
            return False
    return True


def node_labels(node_id_hex: str, labels: Mapping[str, str] | None) -> dict[str, str]:
    """A node's labels with the ones the runtime sets."""
    return {**(labels or {}), NODE_ID_LABEL: node_id_hex}
