# Two commands for a new user: `make demo` (install + the main job) and `make test` (install + tests).
# torch is installed first, pinned to the CPU wheel, so that nothing pulls a multi-GB CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0

.PHONY: install demo test lint browser
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,bench]"
	touch $@

demo: install
	$(VENV)/bin/coral demo

test: install browser
	$(PY) -m pytest -q

# The tree viewer is checked in headless Chromium; install it with apt when we can (root), else its test skips.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium is not installed: the tree viewer's browser test will be skipped"

lint: install
	$(VENV)/bin/ruff check coral tests bench
