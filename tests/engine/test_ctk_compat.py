"""Chaos Toolkit compatibility: every experiment of the corpus run by the real `chaos run` and by Faultplane.

Faultplane with `ctk_compat` must give exactly Chaos Toolkit's outcome (status, deviation, the method's
activities with their statuses, the rollbacks run, the control hooks called). Faultplane's default may differ
only where the corpus names a difference documented in docs/chaostoolkit.md. The table in that page is
generated from these outcomes (`FAULTPLANE_WRITE_DOCS=1` rewrites it; otherwise it must be up to date)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultplane.core.config import Variables
from faultplane.core.formats import ExperimentError, load_document
from faultplane.core.store import Store
from faultplane.engine.controls import GlobalControls, load_global_controls
from faultplane.services.ctk import DIFFERENCES, cli_overrides
from faultplane.services.experiments import run_experiment, validate_experiment
from faultplane.services.runs import load_journal
from servers import StatusPages, http_server, send_json

COMPAT = Path(__file__).parent / "ctk" / "compat"
META: dict[str, dict[str, Any]] = yaml.safe_load((COMPAT / "compat.yaml").read_text())
DOC = Path(__file__).resolve().parents[2] / "docs" / "chaostoolkit.md"
CHAOS = shutil.which("chaos", path=str(Path(sys.executable).parent)) or shutil.which("chaos")
ENV = {"FP_CTK_COMPAT_SET": "from-env", "FP_CTK_COMPAT_PORT": "8080", "FP_CTK_COMPAT_FLAG": "on"}

pytestmark = [
    pytest.mark.skipif(CHAOS is None, reason="chaostoolkit is not installed (the `test` extra installs it)"),
    pytest.mark.usefixtures("lab_policy"),
]
if str(COMPAT) not in sys.path:
    sys.path.insert(0, str(COMPAT))


@dataclass(frozen=True)
class Outcome:
    status: str  # completed | deviated | failed | aborted | interrupted | invalid
    method: tuple[str, ...] = ()
    rollbacks: tuple[str, ...] = ()
    controls: tuple[str, ...] = ()

    def cell(self) -> str:
        if self.status == "invalid":
            return "invalid"
        return f"{self.status}; method {len(self.method)}; rollbacks {len(self.rollbacks)}"


def _status(status: str | None, deviated: bool) -> str:
    # Chaos Toolkit keeps `completed` and a `deviated` flag; Faultplane names the outcome `deviated`
    return "deviated" if deviated and status == "completed" else str(status)


def _outcome(name: str, journal: dict[str, Any], workdir: Path) -> Outcome:
    def names(runs: list[dict[str, Any]], with_status: bool) -> tuple[str, ...]:
        # Faultplane names a timed-out activity `timeout`; Chaos Toolkit `failed`
        status = {"timeout": "failed"}
        out = [
            f"{r['activity']['name']}:{status.get(r.get('status'), r.get('status'))}"
            if with_status
            else r["activity"]["name"]
            for r in runs
        ]
        background = any(r["activity"].get("background") for r in runs)
        return tuple(sorted(out) if background else out)

    controls = workdir / "controls"
    return Outcome(
        _status(journal["status"], bool(journal.get("deviated"))),
        names(journal.get("run") or [], True),
        names(journal.get("rollbacks") or [], False),
        tuple(controls.read_text().splitlines()) if controls.exists() else (),
    )


def _declared(name: str) -> set[str]:
    return set(load_document(COMPAT / name).get("configuration") or {})


def _vars(name: str, workdir: Path, base_url: str) -> dict[str, str]:
    given = {"workdir": str(workdir), "base_url": base_url}
    return {k: v for k, v in given.items() if k in _declared(name)}


def _args(name: str) -> list[str]:
    return [a.replace("{here}", str(COMPAT)) for a in META[name].get("args", [])]


def _variables(name: str, workdir: Path, base_url: str) -> Variables:
    """The test's own values, then the corpus entry's flags over them (their var files' secrets kept)."""
    given, _ = cli_overrides(_args(name))
    merged = Variables(_vars(name, workdir, base_url), secrets=given.secrets)
    merged.update(given)
    return merged


def _global_controls(name: str) -> GlobalControls:
    """The corpus entry's `--control-file` flags and `settings` file, loaded as `chaos run` loads them."""
    args = _args(name)
    files = [Path(args[i + 1]) for i, a in enumerate(args) if a == "--control-file"]
    settings = META[name].get("settings")
    return load_global_controls(Path(settings.replace("{here}", str(COMPAT))) if settings else None, files)


def _order(name: str) -> int:
    return int(name.split("-", 1)[0])


class _Handler(StatusPages):
    """The status pages, and POST /echo, which answers what it received (as JSON, as a form or neither)."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
        try:
            as_json = json.loads(body)
        except ValueError:
            as_json = None
        form = {k: v[0] for k, v in urllib.parse.parse_qs(body).items()} if as_json is None else None
        reply = {"received": len(body), "json": as_json, "form": form}
        send_json(self, 200 if self.path == "/echo" else 404, reply)


@pytest.fixture(scope="module")
def compat_http() -> Iterator[str]:
    with http_server(_Handler) as url:
        yield url


def _chaos_run(name: str, base_url: str, root: Path) -> Outcome:
    workdir = root / name / "ctk"
    workdir.mkdir(parents=True)
    journal = workdir.parent / "ctk-journal.json"
    # `chaos --settings` defaults to ~/.chaostoolkit/settings.yaml: point it at the corpus entry's, or at none
    settings = str(META[name].get("settings", str(root / "no-settings.yaml"))).replace("{here}", str(COMPAT))
    cmd = [str(CHAOS), "--no-version-check", "--no-log-file", "--settings", settings, "run"]
    cmd += ["--journal-path", str(journal)]
    for k, v in _vars(name, workdir, base_url).items():
        cmd += ["--var", f"{k}={v}"]
    cmd += [*_args(name), str(COMPAT / name)]
    env = {
        **os.environ,
        **ENV,
        "PYTHONPATH": os.pathsep.join([str(COMPAT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd=workdir.parent)
    if not journal.exists():  # chaos refused the experiment before running it (validation)
        assert done.returncode != 0, done.stderr
        return Outcome("invalid")
    return _outcome(name, json.loads(journal.read_text()), workdir)


@pytest.fixture(scope="module")
def ctk_outcomes(compat_http: str, request: pytest.FixtureRequest) -> Iterator[dict[str, Outcome]]:
    """The `chaos run` of each experiment this session runs (all, or those `-k` selects), four at a time:
    each is a ~0.3 s process of its own."""
    selected = {
        item.callspec.params["name"]
        for item in request.session.items
        if item.module is request.module and "name" in getattr(getattr(item, "callspec", None), "params", {})
    }
    root = Path(tempfile.mkdtemp(prefix="ctk-compat-"))
    try:
        with ThreadPoolExecutor(4) as pool:
            futures = {n: pool.submit(_chaos_run, n, compat_http, root) for n in sorted(selected)}
            yield {n: f.result() for n, f in futures.items()}
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _faultplane_run(
    name: str, base_url: str, root: Path, store: Store, *, ctk_compat: bool
) -> tuple[Outcome, dict[str, Any] | None]:
    workdir = root / ("compat" if ctk_compat else "default")
    workdir.mkdir(parents=True)
    _, runtime = cli_overrides(_args(name))
    variables = _variables(name, workdir, base_url)
    try:
        result = await run_experiment(
            COMPAT / name,
            variables=variables,
            store=store,
            runtime=runtime,
            ctk_compat=ctk_compat,
            global_controls=_global_controls(name),
        )
    except ExperimentError:
        return Outcome("invalid"), None
    journal = load_journal(result.run_id, store)
    return _outcome(name, journal, workdir), journal


_RESULTS: dict[str, tuple[Outcome, Outcome, Outcome]] = {}


def test_corpus_is_large_enough() -> None:
    experiments = {
        p.name for p in COMPAT.iterdir() if p.suffix in (".json", ".yaml") and p.name[:2].isdigit()
    }
    experiments -= {"58-vars.json"}
    assert len(META) >= 60
    assert experiments == set(META)
    for name, meta in META.items():
        for diff in meta.get("differences", []):
            assert diff in DIFFERENCES, f"{name}: difference {diff!r} is not documented"


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(META))
async def test_same_outcome_as_chaos_run(
    name: str,
    ctk_outcomes: dict[str, Outcome],
    compat_http: str,
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    ctk = ctk_outcomes[name]
    compat, _ = await _faultplane_run(name, compat_http, tmp_path, store, ctk_compat=True)
    assert compat == ctk, f"--ctk-compat differs from chaos run on {name}: {compat} != {ctk}"
    default, _ = await _faultplane_run(name, compat_http, tmp_path, store, ctk_compat=False)
    declared = META[name].get("differences", [])
    if declared:
        assert default != ctk, f"{name} declares {declared} but Faultplane's default matches chaos run: {ctk}"
    else:
        assert default == ctk, (
            f"{name}: Faultplane {default} != chaos run {ctk}, and no difference is declared"
        )
    # validate predicts the run: it passes exactly what then runs, in either mode
    report = validate_experiment(
        COMPAT / name,
        variables=_variables(name, tmp_path, compat_http),
        global_controls=_global_controls(name),
    )
    assert report.valid == (default.status != "invalid"), report.errors
    _RESULTS[name] = (ctk, default, compat)


def test_docs_table_is_current() -> None:
    """The table in docs/chaostoolkit.md is generated from this suite's outcomes."""
    if len(_RESULTS) < len(META):
        pytest.skip("needs the whole corpus run in this session")
    from faultplane.services.ctk import render_differences, render_table

    rows = [
        (name, META[name]["source"], *(o.cell() for o in _RESULTS[name]), META[name].get("differences", []))
        for name in sorted(META, key=_order)
    ]
    text = DOC.read_text(encoding="utf-8")
    fresh = _section(text, "differences", render_differences())
    fresh = _section(fresh, "compat-table", render_table(rows))
    if os.environ.get("FAULTPLANE_WRITE_DOCS"):
        DOC.write_text(fresh, encoding="utf-8")
    assert text == fresh, "docs/chaostoolkit.md is stale: rerun with FAULTPLANE_WRITE_DOCS=1"


def _section(text: str, name: str, body: str) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    before, found, rest = text.partition(start)
    assert found, f"docs/chaostoolkit.md lacks the {start} marker"
    _, _, after = rest.partition(end)
    return f"{before}{start}\n{body}\n{end}{after}"
