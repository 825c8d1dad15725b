# Attention, step by step: set up, open and test the course.
#   make lab    install if needed, then open JupyterLab on your own working copy (work/)
#   make test   install if needed, then run the whole test suite
#   make formgrader  open JupyterLab for the instructor, with nbgrader's formgrader
#   make demo   grade a synthetic class of 30 students and write its report (instructors)
#   make adversarial  grade 47 crafted attacks on the grader and summarise what they got

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
NOTEBOOKS ?= notebooks
WORK ?= work
PORT ?= 8888

.PHONY: install chromium sandbox lab working-copy formgrader release collect grade feedback report demo \
	adversarial test bench lint clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

# The browser tests (tests/browser) drive Debian's chromium through Playwright, which never
# downloads a browser of its own. Installed once with apt-get; when that is impossible the
# browser tests fail and say why.
CHROMIUM ?= /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

chromium:
	@[ -x $(CHROMIUM) ] || { echo "Installing chromium for the browser tests (apt-get)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver; } || \
		echo "Could not install chromium: the browser tests will fail and say why."

# Student code is graded inside bubblewrap (grader/sandbox.py). Installed once with apt-get;
# when that is impossible, grading refuses to run student code and says why.
sandbox:
	@command -v bwrap >/dev/null || { echo "Installing bubblewrap, the grading sandbox (apt-get)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq bubblewrap; } || \
		echo "Could not install bubblewrap: grading will refuse to run student code."

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

# The instructor's JupyterLab: nbgrader reads grader/nbgrader_config.py from the server's working
# directory, and its course root (the repository) must lie inside the server's root directory.
COURSE_WORKSPACE ?= $(or $(ATTENTION_COURSE_WORKSPACE),course)

formgrader: install
	@mkdir -p $(COURSE_WORKSPACE)
	@echo "The formgrader is under Nbgrader > Formgrader, or at /lab?formgrader=true"
	cd grader && export PATH="$(abspath $(BIN)):$$PATH" \
		ATTENTION_COURSE_WORKSPACE="$(abspath $(COURSE_WORKSPACE))" && \
		jupyter lab --ServerApp.root_dir="$(CURDIR)" --port=$(PORT) $(ALLOW_ROOT)

# Regenerate the student notebooks (notebooks/) from the solution notebooks with nbgrader.
release: install
	$(BIN)/python grader/release.py

# Grading (python -m grader --help): the workspace is $(COURSE_WORKSPACE).
GRADER = $(BIN)/python -m grader --workspace "$(COURSE_WORKSPACE)"

collect: install
	@[ -n "$(ZIP)" ] || { echo "usage: make collect ZIP=path/to/lms-download.zip [LESSON=...]"; exit 2; }
	$(GRADER) collect "$(ZIP)" $(if $(LESSON),--lesson $(LESSON))

grade: install sandbox
	$(GRADER) grade $(if $(LESSON),--lesson $(LESSON)) $(if $(WORKERS),--workers $(WORKERS))

feedback: install
	$(GRADER) feedback

report: install
	$(GRADER) report

# The demo class gets a workspace of its own, rebuilt every time.
DEMO_WORKSPACE ?= demo-course

demo: install sandbox
	rm -rf "$(DEMO_WORKSPACE)"
	$(BIN)/python -m grader --workspace "$(DEMO_WORKSPACE)" demo

# Crafted submissions (cheating, escaping the sandbox, exhausting the machine) through the real
# pipeline, with the summary an instructor needs; also part of `make test`.
adversarial: install sandbox
	$(BIN)/python tests/adversarial/suite.py

test: install chromium sandbox
	CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest

# Every performance figure, measured side by side; QUICK=1 for a small smoke run.
bench: install sandbox
	$(BIN)/python benchmarks/bench.py $(if $(QUICK),--quick --out $(or $(OUT),/tmp/attention-course-bench))

lint: install
	$(BIN)/ruff check src tests grader docs benchmarks

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
