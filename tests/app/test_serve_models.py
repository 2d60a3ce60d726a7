"""What a service keeps in memory: its own model, and of the others a request may name only the
last one; the engines of a few specs, not one per prompt ever sent.

The real tiny.en model, loaded from two folder names (links to its converted cache folder): two
models for the service, as two installed names would be.
"""

from __future__ import annotations

import gc
import weakref

import pytest

import transcriber
from transcriber.app.run.engines import EngineCache
from transcriber.app.serve.service import ServeSettings, Service
from transcriber.app.store.spec import JobSpec


@pytest.fixture
def two_models(tmp_path) -> tuple[str, str]:
    """Two names of tiny.en's converted folder (``--model`` takes a folder)."""
    transcriber.load_model("tiny.en")  # (converted on a first load)
    folder = next(m.cache for m in transcriber.list_models().models if m.name == "tiny.en" and m.cache)
    names = []
    for name in ("first", "second"):
        (tmp_path / name).symlink_to(folder, target_is_directory=True)
        names.append(str(tmp_path / name))
    return names[0], names[1]


@pytest.fixture
def service(tmp_path):
    running = Service(ServeSettings(db=tmp_path / "jobs.db", spool=tmp_path / "serve", model="tiny.en",
                                    mode="oneshot"))
    yield running
    assert running.close()


def on_decode_thread(service: Service, fn):
    """``fn()`` run where the service runs models: its decode thread."""
    return service._call(lambda store, runner: fn()).result(timeout=120)


def test_a_model_a_request_named_is_let_go_when_another_is_named(service, two_models):
    first, second = two_models
    own = on_decode_thread(service, service.model)

    def load_and_build(name):
        model = service.model(name)
        engine = service.engines.get(service.spec(model=name))  # as a job of that model would
        assert engine.model_name == model.name
        return weakref.ref(model)

    first_ref = on_decode_thread(service, lambda: load_and_build(first))
    assert first_ref() is not None
    second_ref = on_decode_thread(service, lambda: load_and_build(second))
    gc.collect()
    assert first_ref() is None, "the first model named is still in memory"
    assert second_ref() is not None
    assert on_decode_thread(service, service.model) is own  # the service's own model is kept
    assert first not in transcriber._models and second not in transcriber._models  # nor cached elsewhere


def test_the_engines_kept_are_the_last_specs_used():
    built = []

    def factory(spec):
        built.append(spec.options)
        return object()

    cache = EngineCache(factory, limit=2)
    specs = [JobSpec(options={"initial_prompt": f"prompt {i}"}) for i in range(3)]
    engines = [cache.get(s) for s in specs[:2]]
    assert cache.get(specs[0]) is engines[0]  # kept, and now the latest used
    cache.get(specs[2])  # one too many: the least recently used (the second) goes
    assert cache.get(specs[0]) is engines[0]
    assert cache.get(specs[1]) is not engines[1] and len(built) == 4
