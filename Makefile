# Every target creates/updates what it needs itself: the local virtual environment (.venv),
# rp2040js (node_modules, pinned by package-lock.json) and, when missing, the Arm toolchain and
# QEMU from Debian's packages (needs root or sudo).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp
PYTEST_ARGS ?=

.PHONY: demo test test-fast sweep fuzz system-deps clean-venv

$(STAMP): setup.py pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

system-deps:
	bash scripts/system-deps.sh

$(NODE_STAMP): package.json package-lock.json | system-deps
	npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

demo: $(STAMP) system-deps $(NODE_STAMP)
	$(VENV)/bin/tvm-serenity demo

# two workers (the machine's two cores); tests of one module stay on one worker
XDIST  := -n 2 --dist loadscope

test: $(STAMP) system-deps $(NODE_STAMP)   # the 25 slowest tests are listed at the end
	$(PY) -m pytest -q $(XDIST) --durations=25 $(PYTEST_ARGS)

test-fast: $(STAMP) system-deps $(NODE_STAMP)
	$(PY) -m pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

sweep: $(STAMP)   # the full 10,000-layer RiP sweep (CI runs a smaller one in the tests)
	$(PY) -m tvm_serenity.rip.sweep --layers 10000 --seed 0

fuzz: $(STAMP) system-deps $(NODE_STAMP)   # >= 1,000 .tflite mutants and graph files, damaged builds, hostile paths (~40 min)
	$(PY) -m tests.fuzz --seed 0 --tflite 1000 --graphs 1000 --builds 100 --paths 80

clean-venv:
	rm -rf $(VENV) node_modules
