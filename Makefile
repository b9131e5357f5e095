# Shortcuts; each line is the command it names, so nothing here is needed to use the project.
.PHONY: install lint format test test-middle test-full train-debug

install:        ## the README's install command
	pip install -e ".[dev]"

lint:           ## what CI checks before the tests
	ruff check .
	ruff format --check .

format:         ## fix import order and formatting in place
	ruff check --fix .
	ruff format .

test:           ## fast tier: the tests not marked slow (docs/speed.md: the seconds on 2 cores)
	python -m pytest -m "not slow"

test-middle:    ## middle tier: the fast tier and each feature's end-to-end test once (tests/conftest.py CORE)
	python -m pytest -m "not slow or core"

test-full:      ## everything CI runs, end-to-end CLI runs included
	python -m pytest

train-debug:    ## a whole run on 160 texts (configs/debug/tiny.yaml)
	python scripts/train.py debug=tiny
