.PHONY: setup test lint demo bench deepstream-check

setup:
	./setup

# The README's test command: the static checks (lint), then the whole suite. make test activates .venv itself.
test: lint
	. .venv/bin/activate && rm -f "$$GST_REGISTRY" && python -m pytest -q -p no:cacheprovider tests

# ruff on the Python trees, mypy (strict, configured in pyproject.toml) on src/inferstream: seconds with the cache
lint:
	. .venv/bin/activate && ruff check src tests bench tools && mypy

demo:
	. .venv/bin/activate && inferstream demo

bench:
	. .venv/bin/activate && inferstream bench

# Inside a DeepStream 9 container (see README "DeepStream"): pyinfer on NVMM batches against the CPU path.
deepstream-check:
	$(if $(wildcard .venv/bin/activate),. .venv/bin/activate && ,)python tools/deepstream_check.py
