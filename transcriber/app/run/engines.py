"""Engines by job spec, built on first use and kept for the process.

What an engine is (``steps(path, state) -> Step``...) is the library's business
(``transcriber.engines.engine``); this cache only makes sure a model is loaded once, and only when a
job really needs decoding (a rerun that only skips or rewrites outputs never loads it).
"""

from __future__ import annotations

from typing import Callable

import transcriber

from transcriber.app.store.spec import JobSpec


def build(spec: JobSpec) -> transcriber.Engine:
    """The engine a spec asks for (ValueError/TranscriberError when it cannot be built)."""
    options = spec.engine_options()
    return transcriber.make_engine(spec.mode, transcriber.load_model(spec.model), options)


class EngineCache:
    def __init__(self, factory: Callable[[JobSpec], transcriber.Engine] = build):
        self.factory = factory
        self._built: dict[str, transcriber.Engine | Exception] = {}

    def get(self, spec: JobSpec) -> transcriber.Engine:
        key = spec.fingerprint()
        if key not in self._built:
            try:
                self._built[key] = self.factory(spec)
            except Exception as e:  # a model that cannot load fails every job: try it once
                self._built[key] = e
        built = self._built[key]
        if isinstance(built, Exception):
            raise built
        return built
