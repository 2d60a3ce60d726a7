"""Engines by job spec, built on first use and kept (the last ``LIMIT`` specs' engines).

What an engine is (``steps(path, state) -> Step``...) is the library's business
(``transcriber.engines.engine``); this cache only makes sure a model is loaded once, and only when a
job really needs decoding (a rerun that only skips or rewrites outputs never loads it).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import transcriber

from transcriber.app.store.spec import JobSpec


def build(spec: JobSpec) -> transcriber.Engine:
    """The engine a spec asks for (ValueError/TranscriberError when it cannot be built)."""
    options = spec.engine_options()
    return transcriber.make_engine(spec.mode, transcriber.load_model(spec.model), options)


# Specs whose engines are kept. An engine is light beside its model (which the engines of one
# model share), but a service's requests make a spec each of their options (a prompt, a
# language): kept without a bound, they grew with every new prompt.
LIMIT = 16


class EngineCache:
    def __init__(self, factory: Callable[[JobSpec], transcriber.Engine] = build, limit: int = LIMIT):
        self.factory, self.limit = factory, limit
        self._built: OrderedDict[str, transcriber.Engine | Exception] = OrderedDict()

    def get(self, spec: JobSpec) -> transcriber.Engine:
        key = spec.fingerprint()
        if key not in self._built:
            try:
                built = self.factory(spec)
            except Exception as e:  # a model that cannot load fails every job: try it once
                built = e
            self._built[key] = built
            while len(self._built) > self.limit:
                self._built.popitem(last=False)
        self._built.move_to_end(key)
        built = self._built[key]
        if isinstance(built, Exception):
            raise built
        return built

    def forget(self, model) -> None:
        """Drop the engines that run ``model`` (a model let go: they would keep it in memory)."""
        for key, built in list(self._built.items()):
            if getattr(built, "model", None) is model:
                del self._built[key]
