# Two commands for a new user: `make demo` (install + the main job) and `make test` (install + tests).
# torch is installed first, pinned to the CPU wheel, so that nothing pulls a multi-GB CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0

.PHONY: install demo test lint bench
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,bench]"
	touch $@

demo: install
	$(VENV)/bin/coral demo

test: install
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check coral tests bench
