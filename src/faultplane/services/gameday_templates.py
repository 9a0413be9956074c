"""GameDay templates shipped with Faultplane: a folder each (a GameDay file and its experiments) for a
regulated industry's typical exercise, each mapped to the compliance requirements it evidences and runnable
against the bundled demo services. `faultplane gameday new --template NAME` copies one into a project."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["TEMPLATES_DIR", "TemplateInfo", "list_templates", "new_from_template"]

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "data" / "gameday-templates"
GAMEDAY_FILE = "gameday.yaml"


@dataclass(frozen=True)
class TemplateInfo:
    name: str
    title: str
    description: str
    requirements: list[str]
    path: Path


def list_templates() -> list[TemplateInfo]:
    out = []
    for folder in sorted(p for p in TEMPLATES_DIR.iterdir() if (p / GAMEDAY_FILE).is_file()):
        doc = yaml.safe_load((folder / GAMEDAY_FILE).read_text(encoding="utf-8")) or {}
        compliance = doc.get("compliance") or {}
        lanes = doc.get("lanes") or []
        requirements = [
            *compliance.get("requirements", []),
            *(r for lane in lanes for r in lane.get("compliance", [])),
        ]
        out.append(
            TemplateInfo(
                name=folder.name,
                title=str(doc.get("name", folder.name)),
                description=" ".join(str(doc.get("description", "")).split()),
                requirements=sorted(set(requirements)),
                path=folder,
            )
        )
    return out


def new_from_template(name: str, directory: str | Path | None = None, *, force: bool = False) -> list[Path]:
    """Copy template `name` into `directory` (default ./gameday-NAME); returns the files written. Refuses to
    overwrite a file unless `force`: LookupError names the known templates, FileExistsError the file."""
    known = {t.name: t for t in list_templates()}
    if name not in known:
        raise LookupError(f"--template: no template {name!r}; fix: use one of {', '.join(known)}")
    source = known[name].path
    target = Path(directory) if directory is not None else Path(f"gameday-{name}")
    files = sorted(p for p in source.iterdir() if p.is_file())
    clashes = [target / p.name for p in files if (target / p.name).exists()]
    if clashes and not force:
        raise FileExistsError(f"{clashes[0]} exists; fix: choose another directory or pass --force")
    target.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(p, target / p.name)) for p in files]
