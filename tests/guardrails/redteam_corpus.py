"""The red-team corpora (tests/guardrails/redteam/*.txt) and the places an experiment can hide a target."""

from __future__ import annotations

import codecs
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from guard_helpers import base_experiment

CORPUS = Path(__file__).parent / "redteam"


def lines(name: str) -> list[str]:
    out = []
    for raw in (CORPUS / name).read_text(encoding="utf-8").splitlines():
        if raw.strip() and not raw.startswith("#"):
            out.append(codecs.decode(raw, "unicode_escape") if "\\u" in raw or "\\U" in raw else raw)
    return out


PRODUCTION_NAMES = lines("production_names.txt")
ORDINARY_WORDS = lines("ordinary_words.txt")
FLAG_FORMS = lines("flag_forms.txt")


def _with_method(doc: dict[str, Any], section: str, activity: dict[str, Any]) -> dict[str, Any]:
    if section == "steady-state-hypothesis":
        doc[section]["probes"].append(activity)
    else:
        doc.setdefault(section, []).append(activity)
    return doc


def _process(name: str, *args: str) -> dict[str, Any]:
    return {
        "type": "action",
        "name": "act",
        "provider": {"type": "process", "path": "true", "arguments": list(args)},
    }


# Each placement puts a target name where something will act on it.
PLACEMENTS: dict[str, Callable[[str], dict[str, Any]]] = {
    "target-label": lambda n: base_experiment(
        targets=[{"name": "t", "driver": "process", "labels": {"cluster": n}}]
    ),
    "method-argv": lambda n: _with_method(base_experiment(), "method", _process("x", "--target", n)),
    "rollback-argv": lambda n: _with_method(base_experiment(), "rollbacks", _process("x", n)),
    "steady-state-url": lambda n: _with_method(
        base_experiment(),
        "steady-state-hypothesis",
        {
            "type": "probe",
            "name": "p",
            "provider": {"type": "http", "url": f"http://{n}:8080/h"},
            "tolerance": 200,
        },
    ),
    "control-argument": lambda n: base_experiment(
        controls=[{"name": "c", "provider": {"type": "python", "module": "m", "arguments": {"host": n}}}]
    ),
    "load-url": lambda n: base_experiment(load={"url": f"http://{n}:8080/pay", "rate": 5}),
    "nested-argument": lambda n: _with_method(
        base_experiment(),
        "method",
        {
            "type": "action",
            "name": "toxic",
            "provider": {
                "type": "python",
                "module": "m",
                "func": "f",
                "arguments": {"spec": {"toxics": [{"upstream": f"{n}:5432"}]}},
            },
        },
    ),
    "secret-dsn": lambda n: base_experiment(secrets={"db": {"dsn": f"postgresql://app:pw@{n}:5432/x"}}),
    "secret-keyword-dsn": lambda n: base_experiment(secrets={"db": {"dsn": f"host={n} dbname=payments"}}),
    "configuration": lambda n: base_experiment(
        configuration={"api_url": "http://127.0.0.1:8080", "upstream": n}
    ),
}


def placed(placement: str, name: str) -> dict[str, Any]:
    return copy.deepcopy(PLACEMENTS[placement](name))
