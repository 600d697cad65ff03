# tcc — developer entry points.  `make test` and `make demo` are all you need.

PYTHON ?= python3
VENV := .venv

# Lint only the source directories that exist (benchmarks/ and tools/ may not).
LINT_DIRS := $(wildcard tcc tests benchmarks tools)

.PHONY: install lint runtime test demo clean distclean

# Create the virtual environment (if missing) and install tcc editable with its
# test extras.  Reruns whenever pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --upgrade pip
	$(VENV)/bin/python -m pip install -e '.[test]'
	touch $@

install: $(VENV)/.installed

lint: install
	$(VENV)/bin/ruff check $(LINT_DIRS)

# The C runtime (runtime_c/): a C compiler and make are all it needs.
runtime:
	$(MAKE) -C runtime_c

test: lint runtime
	$(VENV)/bin/python -m pytest -n 2

demo: install
	$(VENV)/bin/python tools/demo.py

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache .hypothesis out
	rm -f ./*.tcir ./*.tvmpack
	$(MAKE) -C runtime_c clean
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
