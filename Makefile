# Attention, step by step: set up, open and test the course.
#   make lab    install if needed, then open JupyterLab on your own working copy (work/)
#   make test   install if needed, then run the whole test suite

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
NOTEBOOKS ?= notebooks
WORK ?= work
PORT ?= 8888

.PHONY: install lab working-copy release test lint clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

# Copy lessons that are not in the working copy yet; never overwrite the student's edits.
working-copy:
	@mkdir -p $(WORK)
	@if [ -d $(NOTEBOOKS) ]; then cd $(NOTEBOOKS) && find . -type f ! -path '*/.ipynb_checkpoints/*' | \
	while read -r file; do \
		target="$(abspath $(WORK))/$$file"; \
		if [ ! -e "$$target" ]; then mkdir -p "$$(dirname "$$target")"; cp "$$file" "$$target"; \
			echo "new in $(WORK)/: $${file#./}"; fi; \
	done; fi

# Jupyter refuses to run as root unless told; containers and cloud machines often are root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: install working-copy
	$(BIN)/jupyter lab --ServerApp.root_dir=$(WORK) --port=$(PORT) $(ALLOW_ROOT)

# Regenerate the student notebooks (notebooks/) from the solution notebooks with nbgrader.
release: install
	$(BIN)/python grader/release.py

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check src tests grader docs benchmarks

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
