"""Media servers' webhooks: a file added to (or played from) a Jellyfin, Emby or Plex library is
queued when it has no subtitles in the wanted language, its SRT written beside it as
``NAME.LANG.srt`` (the name media servers read a sidecar's language from).

- ``POST /webhook/jellyfin``: the Jellyfin webhook plugin's JSON (``NotificationType``
  ``ItemAdded`` or ``PlaybackStart``, ``ItemId``). The plugin has no variable for the file's path,
  so the item is looked up on the server (``--server-url``, ``--server-token``: an API key),
  as subgen does; a template that adds the path (``Path`` or subgen's ``file``) needs no lookup.
- ``POST /webhook/emby``: Emby's JSON (``Event`` ``library.new`` or ``playback.start``; the item's
  ``Path`` is in the payload), sent as JSON or as the multipart form field ``data``.
- ``POST /webhook/plex``: Plex's multipart form with its JSON in ``payload`` (``event``
  ``library.new`` or ``media.play``); the file is looked up by ``Metadata.ratingKey`` on the
  server (``--server-url``, ``--server-token``: an X-Plex-Token) unless the payload has it.

The server's path is mapped to this machine's with ``--path-map SERVER=LOCAL`` (the longest
prefix wins), then resolved (symbolic links, ``..``): it must lie in a library (``--library``
or a ``--path-map`` target), else 403 and nothing is queued. Any other body than those shapes
(text/plain, a urlencoded form) is a 415. The job is in the store before the 202. Answers: 202 ``{"queued": path}``, 200 ``{"ignored": why}`` (another event, subtitles
already there), 4xx ``{"error": why}`` (a payload without a file, a file not found here, 403 a
file outside the libraries, 415 a body of another shape).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from transcriber import embed

from transcriber.app.serve.guard import under_roots
from transcriber.app.serve.service import RequestError, Service

ADDED_OR_PLAYED = {"jellyfin": ("ItemAdded", "PlaybackStart"), "emby": ("library.new", "playback.start"),
                   "plex": ("library.new", "media.play")}
SIDECAR_EXTENSIONS = (".srt", ".vtt", ".ass", ".ssa", ".sub")
LOOKUP_TIMEOUT_S = 10.0
FORM_FIELD = {"plex": "payload", "emby": "data"}  # the multipart field each server puts its JSON in
SHAPES = {"jellyfin": "application/json", "emby": "application/json or multipart/form-data (data)",
          "plex": "multipart/form-data (payload)"}


def map_path(path: str, path_map: tuple[tuple[str, str], ...]) -> str:
    """The server's path as this machine sees it (the longest matching prefix of ``path_map``)."""
    for server, local in sorted(path_map, key=lambda pair: len(pair[0]), reverse=True):
        server = server.rstrip("/")
        if path == server or path.startswith(server + "/"):
            return local.rstrip("/") + path[len(server):]
    return path


def has_subtitles(video: Path, language: str) -> bool:
    """A sidecar ``NAME.LANG.ext`` (or ``NAME.ISO639-2.ext``) or a subtitle stream tagged with the
    language in the file itself."""
    tags = {language, embed.language_tag(language)}
    for name in os.listdir(video.parent):
        stem, ext = os.path.splitext(name)
        if ext.lower() in SIDECAR_EXTENSIONS and stem.startswith(video.stem + "."):
            if stem[len(video.stem) + 1:].split(".")[0].lower() in tags:
                return True
    try:
        return embed.has_track(video, language)
    except embed.EmbedError:
        return False


def _plex_file(metadata: dict) -> Optional[str]:
    media = metadata.get("Media") or [{}]
    return (media[0].get("Part") or [{}])[0].get("file")


def event_path(kind: str, payload: dict) -> tuple[Optional[str], Optional[str]]:
    """(the event's name, the file's path on the server, when the payload holds it)."""
    if kind == "jellyfin":
        return payload.get("NotificationType"), payload.get("Path") or payload.get("file")
    if kind == "emby":
        return payload.get("Event"), (payload.get("Item") or {}).get("Path")
    return payload.get("event"), _plex_file(payload.get("Metadata") or {})


def _get_json(url: str, headers: dict) -> dict:
    request = urllib.request.Request(url, headers={"Accept": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=LOOKUP_TIMEOUT_S) as answer:
            return json.loads(answer.read().decode("utf-8"))
    except (OSError, ValueError) as e:  # URLError, HTTPError, timeouts, a body that is not JSON
        raise RequestError(502, f"cannot look the item up on the media server: {e}") from e


def look_up(kind: str, payload: dict, server: Optional[str], token: Optional[str]) -> Optional[str]:
    """The file of the payload's item, asked of the media server (Jellyfin's ``/Items``, Plex's
    ``/library/metadata``); None without a server to ask."""
    if not server or not token:
        return None
    server = server.rstrip("/")
    if kind == "jellyfin" and payload.get("ItemId"):
        query = urllib.parse.urlencode({"ids": payload["ItemId"], "fields": "Path"})
        items = _get_json(f"{server}/Items?{query}", {"Authorization": f'MediaBrowser Token="{token}"'}).get("Items")
        return (items or [{}])[0].get("Path")
    key = (payload.get("Metadata") or {}).get("ratingKey")
    if kind == "plex" and key:
        found = _get_json(f"{server}/library/metadata/{urllib.parse.quote(str(key))}", {"X-Plex-Token": token})
        return _plex_file(((found.get("MediaContainer") or {}).get("Metadata") or [{}])[0])
    return None


async def _payload(kind: str, request: Request) -> dict:
    """The JSON of a webhook, from the body or the multipart field its server puts it in; 415
    for any other shape (a text/plain or form post is what a web page can send cross-site)."""
    kind_of_body = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind_of_body == "multipart/form-data" and kind in FORM_FIELD:
        form = await request.form()
        text = form.get(FORM_FIELD[kind])
    elif kind_of_body == "application/json" and kind != "plex":
        text = (await request.body()).decode("utf-8", errors="replace")
    else:
        raise RequestError(415, f"the {kind} webhook takes {SHAPES[kind]}, not {kind_of_body or 'a body of no type'}")
    try:
        payload = json.loads(text) if isinstance(text, str) and text.strip() else None
    except json.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        raise RequestError(400, f"not a {kind} webhook: the body holds no JSON object")
    return payload


def hook_routes(app: FastAPI, service: Service) -> None:
    settings = service.settings

    async def receive(kind: str, request: Request):
        payload = await _payload(kind, request)
        event, server_path = event_path(kind, payload)
        if event not in ADDED_OR_PLAYED[kind]:
            return JSONResponse({"ignored": f"event {event!r}: only {' and '.join(ADDED_OR_PLAYED[kind])} queue"})
        if not server_path:
            server_path = await asyncio.to_thread(look_up, kind, payload, settings.server_url, settings.server_token)
        if not server_path:
            asked = settings.server_url and settings.server_token
            raise RequestError(400, f"the {kind} payload names no file" + (
                f", and {settings.server_url} has no file for its item" if asked else
                ", and there is no --server-url/--server-token to look its item up"))
        local = map_path(str(server_path), settings.path_map)
        # the library's files are looked at off the event loop: a slow mount holds this request only
        real = await asyncio.to_thread(under_roots, local, settings.libraries)
        if real is None:  # checked first: whether a file outside exists is not told either
            raise RequestError(403, f"{local} is outside every library (--library, --path-map): not queued")
        path = Path(real)
        if not await asyncio.to_thread(path.is_file):
            raise RequestError(404, f"{path} is not a file here (from {server_path}; see --path-map)")
        wanted = settings.languages[0] if settings.languages else "en"
        if await asyncio.to_thread(has_subtitles, path, wanted):
            return JSONResponse({"ignored": f"{path} has {wanted} subtitles already"})
        # in the store before the 202: a stop or a crash now loses nothing (the next start runs it)
        await asyncio.to_thread(service.accept, path, service.spec(output="srt", tag_language=True), None)
        return JSONResponse({"queued": str(path)}, status_code=202)

    for kind in ADDED_OR_PLAYED:
        app.add_api_route(f"/webhook/{kind}", _bound(receive, kind), methods=["POST"], tags=["Webhooks"],
                          name=f"webhook_{kind}")


def _bound(receive, kind: str):
    async def route(request: Request):
        return await receive(kind, request)

    route.__doc__ = f"A {kind} library event: queue the file when it has no subtitles in the wanted language."
    return route
