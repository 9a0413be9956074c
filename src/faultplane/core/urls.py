"""Whether a URL is one an HTTP client can send to: checked where the URL is written (an experiment's load or
http provider, a design request), not where a worker first tries to split it mid-run."""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["http_url_problem"]


def http_url_problem(url: str) -> str | None:
    """What is wrong with `url` as an http(s) URL, as a phrase to follow it (`url 'x' <problem>`), or None."""
    if not url.lower().startswith(("http://", "https://")):
        return "must start with http:// or https://"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (reading it checks it: a port outside 0-65535 or not a number raises)
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if not parts.hostname:
        return "names no host"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "holds spaces or control characters; percent-encode them (%20)"
    return None
