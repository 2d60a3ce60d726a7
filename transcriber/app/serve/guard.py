"""What ``transcribe serve`` lets in and out, beside the token (app.py's TokenGate): the rules
that keep a browser on the same machine, or a web page it visits, from using the service.

- ``RequestGuard`` (ASGI middleware, the outermost): every request's ``Host`` is the bound
  address (bound to every address: any IP literal), ``localhost`` or an ``--allowed-host`` (else
  421): a DNS-rebinding page reaches the service under its own name, never under an IP literal; a state-changing request
  (anything but GET/HEAD/OPTIONS) that a browser marks as from another origin (``Origin``,
  ``Sec-Fetch-Site``) is a 403. Every answer carries ``X-Content-Type-Options: nosniff``.
- ``under_roots``: whether a path, its symbolic links and ``..`` resolved, lies in a library;
  ``inside_roots``: the same of a path already resolved (a job's stored path), by its name alone.
- ``media_type``: an audio/video content type from the file's first bytes (an allow-list), or
  None: a file that is not media is never served (an upload named x.html is not a page).
- ``page_policy``: the status page's Content-Security-Policy (its inline script and style by
  hash); ``SANDBOX``: the policy of everything else served, which no document renders under.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import os
import re
from typing import Iterable, Optional
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}
SANDBOX = "default-src 'none'; sandbox"
NOSNIFF = (b"x-content-type-options", b"nosniff")


OPENAI_PREFIX = "/v1/"  # the OpenAI-compatible routes (openai_api.py): errors in OpenAI's shape


def error(status: int, message: str, path: str = "", param: Optional[str] = None,
          code: Optional[str] = None) -> JSONResponse:
    """The one-line JSON error of every route: ``{"error": "..."}``, and on the OpenAI routes
    (``path`` under /v1/) OpenAI's ``{"error": {"message", "type", "param", "code"}}``."""
    message = " ".join(str(message).split()) or "error"
    if not path.startswith(OPENAI_PREFIX):
        return JSONResponse({"error": message}, status_code=status)
    kind = "server_error" if status >= 500 else "invalid_request_error"
    if status == 401:
        code = code or "invalid_api_key"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}},
                        status_code=status)


def host_name(value: str) -> str:
    """A ``Host`` (or an origin's netloc) without its port, lower case, IPv6 without brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def _ip(name: str):
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


class RequestGuard:
    """ASGI middleware: the Host and cross-site rules above; nosniff on every answer."""

    def __init__(self, app, bound: str, allowed_hosts: Iterable[str] = ()):
        self.app = app
        self.names = {host_name(bound), *LOCAL_NAMES, *(host_name(h) for h in allowed_hosts)}
        address = _ip(host_name(bound))
        # bound to every address (0.0.0.0, ::): any of the machine's, so any IP literal; to
        # loopback: any loopback address. (A rebinding page brings a name, never an IP literal.)
        self.any_ip = address is not None and address.is_unspecified
        self.loopback = (address is not None and address.is_loopback) or host_name(bound) == "localhost"

    def host_allowed(self, host: str) -> bool:
        name = host_name(host)
        if not name:
            return False
        address = _ip(name)
        return name in self.names or (address is not None and (self.any_ip or (self.loopback and address.is_loopback)))

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}

        async def sniffless(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), NOSNIFF]}
            await send(message)

        refusal = self._refusal(scope, headers)
        if refusal is not None:
            return await refusal(scope, receive, sniffless)
        return await self.app(scope, receive, sniffless)

    def _refusal(self, scope, headers: dict) -> Optional[JSONResponse]:
        host = headers.get("host", "")
        if not self.host_allowed(host):
            return error(421, f"Host {host!r} is not this service's: use its address or localhost, "
                              "or start it with --allowed-host NAME", scope.get("path", ""))
        if scope.get("method", "GET") in SAFE_METHODS:
            return None
        origin, site = headers.get("origin"), headers.get("sec-fetch-site")
        foreign = site in ("cross-site", "same-site") or (
            origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != host.strip().lower()))
        if foreign:
            return error(403, f"a cross-site request is refused (Origin {origin or site!r}): only this service's "
                              "own page, or a client that is not a browser, may send it", scope.get("path", ""))
        return None


def under_roots(path: str, roots: Iterable[str]) -> Optional[str]:
    """``path`` resolved (symbolic links, ``..``) when it lies in one of ``roots`` (resolved
    folders), else None."""
    real = os.path.realpath(path)
    return real if inside_roots(real, roots) else None


def inside_roots(real: str, roots: Iterable[str]) -> bool:
    """``real`` (a resolved path: a job's stored path is resolved when it is queued) lies in one
    of ``roots``, told from the names alone: no file system is asked (a page polling the job
    list would resolve every job's path on a possibly hung mount)."""
    return any(os.path.commonpath([root, real]) == root for root in roots)


# (offset, magic bytes, content type): the media the service plays back, from the file's own bytes
MAGIC = (
    (0, b"fLaC", "audio/flac"), (0, b"OggS", "audio/ogg"), (0, b"ID3", "audio/mpeg"),
    (0, b"\x1a\x45\xdf\xa3", "video/x-matroska"), (4, b"ftyp", "video/mp4"), (0, b"#!AMR", "audio/amr"),
)
RIFF = {b"WAVE": "audio/wav", b"AVI ": "video/x-msvideo"}


def media_type(path: str) -> Optional[str]:
    """The audio/video content type of the file's first bytes, or None: not media we serve."""
    with open(path, "rb") as f:
        head = f.read(16)
    if head[:4] == b"RIFF":
        return RIFF.get(head[8:12])
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:  # an MPEG audio / ADTS frame
        return "audio/aac" if head[1] & 0x06 == 0 else "audio/mpeg"
    for offset, magic, kind in MAGIC:
        if head[offset:offset + len(magic)] == magic:
            return kind
    return None


def _hashes(html: str, tag: str) -> str:
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.S)
    return " ".join("'sha256-" + base64.b64encode(hashlib.sha256(b.encode()).digest()).decode() + "'" for b in blocks)


def page_policy(html: str) -> str:
    """The page's CSP: its own inline script and style (by hash), fetches and media from this
    origin only, no frames, forms or plugins."""
    return (f"default-src 'none'; script-src {_hashes(html, 'script')}; style-src {_hashes(html, 'style')}; "
            "connect-src 'self'; media-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")
