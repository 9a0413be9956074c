"""What a listing says about one named experiment: its name, file, title and tags.

A module of its own so the MCP server can publish it (chaos_list_experiments) without importing the engine
that `services.experiments` loads; `services.experiments` builds and re-exports it.
"""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["ExperimentInfo"]


class ExperimentInfo(BaseModel):
    name: str
    path: str
    title: str | None = None
    tags: list[str] = []
