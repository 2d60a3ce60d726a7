# The two commands of the README:
#   make demo   install, then transcribe examples/ with the default model (tiny.en)
#   make test   install with the test extras, then run the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: demo test install install-test

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# The native CPU kernels (transcriber/native) are built by the package's own build (setup.py)
# with the machine's C++ compiler; that never fails the install (without a compiler: MLX's own
# ops, and `transcribe doctor` says why).
install: $(PY)
	$(PIP) install -q -e .

install-test: $(PY)
	$(PIP) install -q -e '.[test]'

demo: install
	$(VENV)/bin/transcribe examples/ --format srt,vtt,json,txt --output-dir examples/out
	$(PY) examples/api_example.py

test: install-test
	$(PY) -m pytest -q
