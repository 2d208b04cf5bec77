.PHONY: setup test demo bench

setup:
	./setup

# The README's test command. Needs the environment from `. .venv/bin/activate` (make test activates it itself).
test:
	. .venv/bin/activate && rm -f "$$GST_REGISTRY" && python -m pytest -q -p no:cacheprovider tests

demo:
	. .venv/bin/activate && inferstream demo

bench:
	. .venv/bin/activate && inferstream bench
