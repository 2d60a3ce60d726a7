"""The application around the library: the ``transcribe`` command (cli/), the job store (store/),
the runners (run/) and the HTTP service (serve/). It uses the library only through
``transcriber.__all__`` (tests/test_layering.py); the library never imports it."""
