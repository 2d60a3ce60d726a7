"""``transcribe serve``: the command line of the HTTP service (the ``serve`` extra)."""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import Optional

import click

from transcriber import DEFAULT_MODE, DEFAULT_MODEL, MODES

from transcriber.app.cli.flags import db_option

EXAMPLES = """
\b
Examples:
  transcribe serve                                  # http://127.0.0.1:9000 (docs at /docs)
  transcribe serve --host 0.0.0.0 --token s3cret --allowed-host nas.lan   # Bazarr's endpoint:
                                                    #   http://nas.lan:9000/t/s3cret
  transcribe serve -m base --path-map /data/media=/mnt/media   # Jellyfin sees /data/media
  transcribe serve --library /srv/films             # webhooks may queue files under /srv/films
  OpenAI clients: base_url http://127.0.0.1:9000/v1, model whisper-1 (or an installed model's name)
"""


def _path_map(ctx, param, values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for value in values:
        server, sep, local = value.partition("=")
        if not sep or not server.startswith("/") or not local:
            raise click.BadParameter(f"{value!r} is not SERVER_PATH=LOCAL_PATH (e.g. /data/media=/mnt/media)")
        pairs.append((server, local))
    return tuple(pairs)


def _token(ctx, param, value: Optional[str]) -> Optional[str]:
    if value is not None and not value.strip():
        raise click.BadParameter("an empty token would let anyone in: give a secret, or leave --token out")
    return value


def _libraries(libraries, path_map) -> tuple[str, ...]:
    """The library folders, resolved: --library's and --path-map's targets."""
    return tuple(dict.fromkeys(os.path.realpath(p) for p in (*libraries, *(local for _, local in path_map))))


def _server(uvicorn, config, service):
    """uvicorn's server, told of a SIGTERM/SIGINT at once: the service stops taking work and the
    job in hand checkpoints while uvicorn closes its connections."""
    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            service.stopping(sig)
            super().handle_exit(sig, frame)
            # uvicorn raises the signal again once it has served (its default action: death),
            # which would skip the decode thread's checkpoint: the stop is ours to finish
            getattr(self, "_captured_signals", []).clear()

    return Server(config)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@click.command(help="Serve whisper-asr-webservice's API (for Bazarr), OpenAI's audio API (/v1/audio/...), "
                    "a live status page and media-server webhooks over HTTP. Each request is a job in the job "
                    "database (POST /asr?async=true: answered at once, polled at /jobs/ID).\n" + EXAMPLES)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback should have a --token.")
@click.option("--port", type=click.IntRange(1, 65535), default=9000, show_default=True)
@click.option("--token", envvar="TRANSCRIBER_SERVE_TOKEN", show_envvar=True, callback=_token,
              help="Secret every request must carry (Authorization: Bearer, ?token= or the /t/TOKEN/ path prefix).")
@click.option("-m", "--model", default=DEFAULT_MODEL, show_default=True, help="The model, loaded once.")
@click.option("--mode", type=click.Choice(list(MODES)), default=DEFAULT_MODE, show_default=True)
@click.option("--spool", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for uploads and their subtitles (default: serve/ beside the job database).")
@click.option("--max-upload-mb", type=click.IntRange(1, 4000), default=2048, show_default=True,
              help="Largest upload accepted (a 2 h film is ~230 MB of 16 kHz PCM; a WAV holds at most 4 GB).")
@click.option("--path-map", "path_map", multiple=True, callback=_path_map, metavar="SERVER=LOCAL",
              help="Map a media server's library path to this machine's (repeatable); LOCAL is a library.")
@click.option("--library", "libraries", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Webhooks: a folder whose files they may queue (repeatable); nothing outside one is read.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A host name clients reach the service by, beside its address and localhost (repeatable).")
@click.option("--language", "languages", multiple=True, metavar="LANG",
              help="Webhooks: the subtitle language wanted (a file with it already is left alone; default en).")
@click.option("--server-url", metavar="URL", help="Webhooks: the Jellyfin or Plex server to look an item's file up "
                                                  "on (e.g. http://127.0.0.1:8096).")
@click.option("--server-token", metavar="KEY", envvar="TRANSCRIBER_SERVER_TOKEN", show_envvar=True,
              help="Webhooks: the server's API key (Jellyfin) or X-Plex-Token (Plex).")
@db_option
def serve(host: str, port: int, token: Optional[str], model: str, mode: str, spool: Optional[Path],
          max_upload_mb: int, path_map, libraries, allowed_hosts, languages, server_url: Optional[str],
          server_token: Optional[str], db: Optional[Path], db_timeout: float) -> None:
    try:
        import uvicorn

        from transcriber.app.serve.app import create_app
        from transcriber.app.serve.service import Service, ServeSettings
    except ImportError as e:
        click.echo(f"error: transcribe serve needs the serve extra ({e.name} is missing): "
                   "pip install 'transcriber[serve]'", err=True)
        sys.exit(1)
    from transcriber.app.store.domain import StoreError
    from transcriber.app.store.jobstore import connect, default_path

    db = db or default_path()
    try:  # a database that cannot be opened is one line now, not an error on every request
        connect(db, db_timeout).close()
    except StoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    if not _loopback(host) and not token:
        click.echo(f"warning: serving on {host} without --token: anyone who reaches port {port} can use the "
                   "service, see every job's file name and play its media", err=True)
    roots = _libraries(libraries, path_map)
    if not roots:
        click.echo("note: no --library or --path-map: the webhooks refuse every file (only uploads are served)",
                   err=True)
    settings = ServeSettings(db=db, spool=spool or db.parent / "serve", model=model, mode=mode,
                             max_upload_bytes=max_upload_mb << 20, token=token, path_map=path_map,
                             languages=tuple(languages), server_url=server_url, server_token=server_token,
                             host=host, allowed_hosts=tuple(allowed_hosts), libraries=roots)
    try:
        service = Service(settings)
    except OSError as e:
        click.echo(f"error: cannot use the spool folder {settings.spool}: {e.strerror or e}", err=True)
        sys.exit(1)
    click.echo(f"serving on http://{host}:{port}/ (API docs at /docs), jobs in {db}", err=True)
    # after a stop, connections still open (an upload still arriving) get 2 s, then are cut; the
    # decode thread has STOP_SECONDS from the signal (Service.close): a stop takes at most ~9 s
    config = uvicorn.Config(create_app(service), host=host, port=port, log_level="warning",
                            timeout_graceful_shutdown=2)
    try:
        _server(uvicorn, config, service).run()
    finally:
        if not service.close():  # the decode thread is still in a step: its job resumes at the next start
            click.echo("stopped: the job in hand resumes from its last checkpoint at the next start", err=True)
            sys.stderr.flush()
            os._exit(0)  # noqa: SLF001 - a thread inside MLX is not waited for; SQLite's journal keeps the store whole
