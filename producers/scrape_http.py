"""One HTTP GET of a Prometheus ``/metrics`` page, its failures sorted into metric reasons."""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.request

__all__ = ["ScrapeError", "fetch_text"]


class ScrapeError(Exception):
    """A scrape that gave no usable body; ``reason`` is the metrics label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def fetch_text(url: str, timeout_s: float, what: str) -> str:
    """GET ``url`` and return the body as text. Raises ScrapeError (reason: ``http_status``,
    ``timeout``, ``unreachable`` or ``unparseable``) with a message naming the URL and what to check."""
    request = urllib.request.Request(url, headers={"Accept": "text/plain"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise ScrapeError("http_status", f"{url} answered HTTP {exc.code} {exc.reason}: "
                                         f"check that it is {what}") from exc
    except (TimeoutError, socket.timeout) as exc:
        raise ScrapeError("timeout", f"{url} did not answer within {timeout_s:g} s: check that {what} "
                                     "is up and not overloaded") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (TimeoutError, socket.timeout)):
            raise ScrapeError("timeout", f"{url} did not answer within {timeout_s:g} s: check that {what} "
                                         "is up and not overloaded") from exc
        raise ScrapeError("unreachable", f"cannot reach {url} ({exc.reason}): check that {what} "
                                         "is running and the address is right") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise ScrapeError("unreachable", f"lost the connection to {url} ({type(exc).__name__}: {exc}): "
                                         f"check that {what} is running") from exc
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError("unparseable", f"{url} answered a body that is not UTF-8 text ({exc}): "
                                         f"check that the URL is {what}") from exc
