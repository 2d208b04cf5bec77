.PHONY: setup test demo bench deepstream-check

setup:
	./setup

# The README's test command. Needs the environment from `. .venv/bin/activate` (make test activates it itself).
test:
	. .venv/bin/activate && rm -f "$$GST_REGISTRY" && python -m pytest -q -p no:cacheprovider tests

demo:
	. .venv/bin/activate && inferstream demo

bench:
	. .venv/bin/activate && inferstream bench

# Inside a DeepStream 9 container (see README "DeepStream"): pyinfer on NVMM batches against the CPU path.
deepstream-check:
	$(if $(wildcard .venv/bin/activate),. .venv/bin/activate && ,)python tools/deepstream_check.py
