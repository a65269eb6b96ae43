# Every target creates/updates the local virtual environment itself.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: demo test test-fast sweep clean-venv

$(STAMP): setup.py pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tvm-serenity demo

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

sweep: $(STAMP)   # the full 10,000-layer RiP sweep (CI runs a smaller one in the tests)
	$(PY) -m tvm_serenity.rip.sweep --layers 10000 --seed 0

clean-venv:
	rm -rf $(VENV)
