"""The fault registry: named, typed faults shared by every process on the machine through one JSON file.

A fault is registered here by a controller (the MCP server, the CLI, an experiment's `faults.register` action,
the network proxy) and takes effect wherever a fault point of the same name looks (in-process fault points in
Python services, proxy routes). The file is the rendezvous: writers take an exclusive `flock` on a sidecar
lock file and replace the JSON atomically, so readers never see a half-written file and need no lock at all.

This module is imported by every service that contains a fault point, so it uses the standard library only.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import unicodedata
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from faultplane.core.paths import file_from_env

__all__ = [
    "DEFAULT_DURATION_S",
    "FAULT_TYPES",
    "FaultRegistry",
    "FaultSpec",
    "FaultSpecError",
    "RegistryState",
    "UnknownFaultError",
    "default_registry_path",
]

FAULT_TYPES = ("latency", "error", "timeout", "resource_exhaustion", "network_partition")

# A latency or timeout fault registered without a duration still has to last some time to be a fault at all.
DEFAULT_DURATION_S = 1.0
# A fault point that sleeps for hours is a hung test, not an experiment.
MAX_DURATION_S = 3600.0
MAX_NAME_CHARS = 200

_FORMAT_VERSION = 1


class FaultSpecError(ValueError):
    """A fault description is invalid. The message names the field and the fix."""

    def __init__(self, field_name: str, problem: str, fix: str) -> None:
        self.field = field_name
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field_name}: {problem}; fix: {fix}")


class UnknownFaultError(LookupError):
    """An operation named a fault that is not registered."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        listed = ", ".join(known) if known else "none"
        super().__init__(
            f"fault_name: no fault named {name!r} is registered (registered: {listed}); "
            f"fix: register it first (action=register with a fault_type) or use one of the registered names"
        )

    def __str__(self) -> str:  # LookupError would repr() the message
        return str(self.args[0])


@dataclass(frozen=True)
class FaultSpec:
    """One named fault. `probability` is the chance that a call through a matching fault point triggers it."""

    name: str
    fault_type: str
    probability: float = 0.1
    duration_seconds: float | None = None
    error_message: str | None = None
    target: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise FaultSpecError("fault_name", "must be a non-empty string", "give the fault a name")
        # a name is what code passes to fault_point(): one line of visible text (the registry file, status
        # tables and audit lines show it), not a control character nor a right-to-left override
        if len(self.name) > MAX_NAME_CHARS or any(unicodedata.category(c) in ("Cc", "Cf") for c in self.name):
            raise FaultSpecError(
                "fault_name",
                f"must be at most {MAX_NAME_CHARS} visible characters, without control or format characters",
                "name the fault as your code's fault_point() does, e.g. db.query",
            )
        for what, value, limit in (
            ("target", self.target, 500),
            ("error_message", self.error_message, 4096),
        ):
            if isinstance(value, str) and len(value) > limit:
                raise FaultSpecError(what, f"is {len(value):,} characters, more than {limit:,}", "shorten it")
        if self.fault_type not in FAULT_TYPES:
            raise FaultSpecError(
                "fault_type",
                f"{self.fault_type!r} is not a fault type",
                f"use one of {', '.join(FAULT_TYPES)}",
            )
        p = self.probability
        if isinstance(p, bool) or not isinstance(p, int | float) or not (0.0 <= float(p) <= 1.0):
            raise FaultSpecError(
                "probability", f"{p!r} is outside 0.0-1.0", "pass a number between 0.0 and 1.0"
            )
        object.__setattr__(self, "probability", float(p))
        d = self.duration_seconds
        if d is not None:
            if (
                isinstance(d, bool)
                or not isinstance(d, int | float)
                or not math.isfinite(d)
                or not (0.0 <= d <= MAX_DURATION_S)
            ):
                raise FaultSpecError(
                    "duration_seconds",
                    f"{d!r} is not a duration between 0 and {MAX_DURATION_S:g} seconds",
                    "pass a non-negative number of seconds, e.g. 0.5",
                )
            object.__setattr__(self, "duration_seconds", float(d))
        if self.error_message is not None and not isinstance(self.error_message, str):
            raise FaultSpecError("error_message", "must be a string", "pass the text the fault should raise")
        if self.target is not None and not isinstance(self.target, str):
            raise FaultSpecError("target", "must be a string", 'pass e.g. "netproxy:<route>" or omit it')

    @property
    def effective_duration(self) -> float:
        """How long a latency or timeout fault lasts (`duration_seconds`, else DEFAULT_DURATION_S)."""
        return DEFAULT_DURATION_S if self.duration_seconds is None else self.duration_seconds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FaultSpec:
        return cls(
            name=data["name"],
            fault_type=data["fault_type"],
            probability=data.get("probability", 0.1),
            duration_seconds=data.get("duration_seconds"),
            error_message=data.get("error_message"),
            target=data.get("target"),
        )


@dataclass
class RegistryState:
    """The file's content: the faults and, per fault, how many injected occurrences wait to be applied."""

    faults: dict[str, FaultSpec] = field(default_factory=dict)
    armed: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        body = {
            "version": _FORMAT_VERSION,
            "faults": {
                name: {**spec.to_dict(), "armed": self.armed.get(name, 0)}
                for name, spec in sorted(self.faults.items())
            },
        }
        return json.dumps(body, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RegistryState:
        state = cls()
        if not text.strip():
            return state
        data = json.loads(text)
        faults = data.get("faults") if isinstance(data, dict) else None
        for name, entry in (faults if isinstance(faults, dict) else {}).items():
            try:
                spec = FaultSpec.from_dict({**entry, "name": name})
            except (FaultSpecError, KeyError, TypeError):
                continue  # a hand-edited bad entry must not disable every other fault
            state.faults[name] = spec
            armed = entry.get("armed", 0)
            if isinstance(armed, int) and armed > 0:
                state.armed[name] = armed
        return state


def default_registry_path() -> Path:
    """$FAULTPLANE_FAULTS, else $XDG_STATE_HOME/faultplane/faults.json (~/.local/state when unset)."""
    return file_from_env("FAULTPLANE_FAULTS", "state", "faults.json")


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            import fcntl
        except ImportError:  # Windows: writers race, but os.replace still keeps readers consistent
            yield
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


_MAX_REGISTRY_CHARS = 8 * 1024 * 1024  # core.hostile's document limit; a real registry is a few KB


class FaultRegistry:
    """The faults registered on this machine, in a JSON file several processes share."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path).expanduser() if path else default_registry_path()
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    def __repr__(self) -> str:
        return f"FaultRegistry({str(self.path)!r})"

    # -- reading (no lock: the file is only ever replaced whole) -------------------------------------------
    def load(self) -> RegistryState:
        try:
            text = self.path.read_text(encoding="utf-8")
        except (FileNotFoundError, UnicodeDecodeError):
            return RegistryState()
        if len(text) > _MAX_REGISTRY_CHARS:
            return RegistryState()
        try:
            # a registry file that is not one Faultplane wrote (too deep, not a mapping) holds no faults
            return RegistryState.from_json(text)
        except (json.JSONDecodeError, AttributeError, RecursionError, TypeError):
            return RegistryState()

    def get(self, name: str) -> FaultSpec | None:
        return self.load().faults.get(name)

    def active(self) -> list[FaultSpec]:
        return sorted(self.load().faults.values(), key=lambda s: s.name)

    def armed(self, name: str) -> int:
        """How many injected occurrences of `name` wait for the next calls through its fault point."""
        return self.load().armed.get(name, 0)

    # -- writing --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _update(self) -> Iterator[RegistryState]:
        with _exclusive(self.lock_path):
            state = self.load()
            before = state.to_json()
            yield state
            # Fault points reload on every change of the file's identity, so skip writes that change nothing.
            if state.to_json() != before:
                self._write(state)

    def _write(self, state: RegistryState) -> None:
        import tempfile  # only writers pay for it; fault points only read

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".faults-", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(state.to_json())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def register(self, spec: FaultSpec) -> FaultSpec:
        """Add or replace the fault named `spec.name` (idempotent). Pending injected occurrences are kept."""
        if not isinstance(spec, FaultSpec):
            raise TypeError(f"register() takes a FaultSpec, not {type(spec).__name__}")
        with self._update() as state:
            state.faults[spec.name] = spec
        return spec

    def remove(self, name: str) -> bool:
        """Remove a fault and its pending occurrences. Returns whether it was registered (idempotent)."""
        with self._update() as state:
            existed = state.faults.pop(name, None) is not None
            state.armed.pop(name, None)
        return existed

    def clear(self) -> list[str]:
        """Remove every fault; returns the names removed."""
        with self._update() as state:
            names = sorted(state.faults)
            state.faults.clear()
            state.armed.clear()
        return names

    def inject(self, name: str, rng: random.Random | None = None) -> bool:
        """Roll the fault's probability once with `rng`; when it triggers, arm one occurrence for the next
        call through the fault point. Raises UnknownFaultError when `name` is not registered."""
        rng = rng if rng is not None else random.Random()
        with self._update() as state:
            spec = state.faults.get(name)
            if spec is None:
                raise UnknownFaultError(name, sorted(state.faults))
            triggered = rng.random() < spec.probability
            if triggered:
                state.armed[name] = state.armed.get(name, 0) + 1
        return triggered

    def disarm(self, name: str) -> int:
        """Drop the pending injected occurrences of `name`; returns how many there were."""
        with self._update() as state:
            return state.armed.pop(name, 0)

    def consume(self, name: str) -> FaultSpec | None:
        """Take one armed occurrence of `name`, if any is left; returns the spec to apply, else None.

        Several processes may race for the same occurrence; the lock makes exactly one of them win.
        """
        with self._update() as state:
            left = state.armed.get(name, 0)
            spec = state.faults.get(name)
            if left <= 0 or spec is None:
                return None
            if left == 1:
                del state.armed[name]
            else:
                state.armed[name] = left - 1
            return spec
