"""``transcribe serve``: the HTTP service (the ``serve`` extra: FastAPI on uvicorn).

command.py (the CLI) -> app.py (routes: whisper-asr-webservice's API, errors, the token gate)
-> service.py (requests become jobs in the job store; one decode thread, the model loaded once),
with page.py (the status page) and hooks.py (Jellyfin, Emby and Plex webhooks) beside app.py,
and guard.py (what may come in and go out: Host, cross-site requests, library roots, media types).
"""
