# Attention, step by step: set up, open and test the course.
#   make lab    install if needed, then open JupyterLab on your own working copy (work/)
#   make test   install if needed, then run the whole test suite
#   make test-fast   the suite without the slow, browser and adversarial tests (contributors)
#   make formgrader  open JupyterLab for the instructor, with nbgrader's formgrader
#   make demo   grade a synthetic class of 30 students and write its report (instructors)
#   make collect / grade / refresh / feedback / report   a class's grading (docs/instructors/)
#   make release-lesson / release-feedback LESSON=...   through nbgrader's exchange
#   make watch  grade each submission as it arrives and hand its feedback back
#   make gradescope LESSON=...   a lesson's Gradescope autograder zip
#   make adversarial  grade crafted attacks on the grader and summarise what they got
# Each target installs what it needs and no more: `make lab` the course's runtime alone.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
NOTEBOOKS ?= notebooks
WORK ?= work
PORT ?= 8888

.PHONY: install install-lab install-instructor torch-build colab-env chromium sandbox postgresql \
	test-packages lab working-copy exchange formgrader release collect grade refresh feedback report \
	demo adversarial test test-fast bench lint clean release-lesson release-feedback watch gradescope

# --- Installing -------------------------------------------------------------------------------
# One environment, $(VENV), installed in layers, each only when pyproject.toml or constraints.txt
# changed since (a stamp file per layer):
#   install-lab         make lab: the course's runtime (torch, the course package, JupyterLab,
#                       ipywidgets, matplotlib, tqdm) and nothing else
#   install-instructor  + nbgrader: make formgrader, release, collect, grade, feedback, report, demo
#   install             + pytest, nbval, Playwright, psutil, ruff: make test, lint, bench, adversarial
# Packages are installed by uv (pinned in constraints.txt, put into $(VENV) by pip first): it
# downloads in parallel and installs in seconds what pip takes minutes for. The packages in
# excludes.txt are left out of $(VENV) (it says why).
# Each layer then compiles to bytecode what the course's processes import, by importing it once,
# and the lab layer first all of torch (on every core), any part of which student code may import:
# the grading sandbox reads $(VENV) read-only, and where PYTHONDONTWRITEBYTECODE is set nothing is
# compiled later (torch imports in 2.8 s instead of 1.4; torch._dynamo, which torch.compile
# imports with sympy, in 4.6 s instead of 3.2). About 4,000 files, where compiling every installed
# file (uv's --compile-bytecode) took 20,000 in both environments, about 50 CPU-s. torch's
# testing/_internal, which holds code for newer Pythons and is no part of its API, is left out.
LAB_STAMP := $(VENV)/.installed-lab
INSTRUCTOR_STAMP := $(VENV)/.installed-instructor
DEV_STAMP := $(VENV)/.installed-dev
UV_VERSION := $(shell sed -n 's/^uv==//p' constraints.txt)
UV := $(BIN)/uv
# $(call uv-install,<environment's python>) <what to install>
uv-install = $(UV) pip install --python $(1) $(EXCLUDES)
EXCLUDES := --excludes excludes.txt
# $(call compile-imports,<environment's python>,<modules, comma-separated>)
# (debugpy, which the kernel imports, would warn that frozen modules hide breakpoints)
compile-imports = @echo "$(STEP) importing $(2) once$(COMMA) so that later starts are fast" && \
	PYTHONDONTWRITEBYTECODE= PYDEVD_DISABLE_FILE_VALIDATION=1 $(1) -c 'import $(2)'
# What a long step that prints nothing of its own is doing, one line before it starts.
STEP := ==>
COMMA := ,
LAB_IMPORTS := torch, torch._dynamo, matplotlib.pyplot, IPython, ipykernel.kernelapp, \
	ipywidgets, tqdm.auto, jupyterlab.labapp, attention_course.checks
INSTRUCTOR_IMPORTS := nbgrader.apps, grader.cli
DEV_IMPORTS := pytest, xdist, nbval.plugin, playwright.sync_api, distributed, psutil
COLAB_IMPORTS := torch, matplotlib.pyplot, ipykernel.kernelapp, ipywidgets, tqdm.auto, nbclient, \
	pytest, attention_course.checks

# torch, at the version pinned in constraints.txt, in the build that suits this machine:
#   Linux without an NVIDIA GPU  the CPU build from PyTorch's CPU wheel index (TORCH_INDEX)
#   Linux with an NVIDIA GPU     PyPI's default build, for CUDA (nvidia-smi lists the GPU)
#   macOS, Windows               PyPI's default build
# `make lab TORCH_INDEX=<url>` takes the CPU build from another index; TORCH_INDEX= (empty) takes
# PyPI's default build. `make torch-build` says which one this machine gets.
TORCH_VERSION := $(shell sed -n 's/^torch==//p' constraints.txt)
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
NVIDIA_GPUS = $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU')
TORCH_INDEX ?= $(if $(filter Linux,$(shell uname -s)),$(if $(filter-out 0,$(NVIDIA_GPUS)),,$(TORCH_CPU_INDEX)))
# Downloaded torch wheels are kept here and shared by every environment this Makefile builds.
WHEELS ?= .wheels

# What `make` says, and `make torch-build` prints, before installing torch.
TORCH_BUILD = torch $(TORCH_VERSION): $(if $(TORCH_INDEX),the CPU build from $(TORCH_INDEX),PyPI's \
	default build$(if $(filter-out 0,$(NVIDIA_GPUS)), for CUDA (nvidia-smi lists an NVIDIA GPU)))

torch-build:
	@echo "$(TORCH_BUILD)"

# The CPU build's wheel, from $(TORCH_INDEX) (PyTorch's CPU index when that is empty), downloaded
# into $(WHEELS) once, with a progress bar. A wheel pip has without the network (in $(WHEELS), or
# in a wheel folder of pip's own configuration) is taken first.
TORCH_WHEEL := $(WHEELS)/.torch-$(TORCH_VERSION)

$(TORCH_WHEEL): | $(VENV)/pyvenv.cfg
	$(PIP) download --quiet --no-deps --no-index --find-links $(WHEELS) --dest $(WHEELS) \
		torch==$(TORCH_VERSION) 2>/dev/null || $(PIP) download --progress-bar on --no-deps \
		--dest $(WHEELS) --index-url $(or $(TORCH_INDEX),$(TORCH_CPU_INDEX)) torch==$(TORCH_VERSION)
	touch $@

# $(call install-torch,<environment's python>): the CPU build, from $(WHEELS).
install-torch = $(call uv-install,$(1)) --no-deps --no-index --find-links $(WHEELS) \
	torch==$(TORCH_VERSION)

install-lab: $(LAB_STAMP)
install-instructor: $(INSTRUCTOR_STAMP)
install: $(DEV_STAMP)

$(VENV)/pyvenv.cfg:
	$(PYTHON) -m venv $(VENV)

$(UV): constraints.txt | $(VENV)/pyvenv.cfg
	$(PIP) install --quiet uv==$(UV_VERSION)
	touch $@

$(LAB_STAMP): pyproject.toml constraints.txt excludes.txt | $(UV) $(if $(TORCH_INDEX),$(TORCH_WHEEL))
	@echo "$(TORCH_BUILD)"
	$(if $(TORCH_INDEX),$(call install-torch,$(BIN)/python))
	$(call uv-install,$(BIN)/python) -c constraints.txt -e '.[lab]'
	$(UV) pip uninstall --quiet --python $(BIN)/python -r excludes.txt  # from an older .venv
	@echo "$(STEP) compiling torch's Python files once (the longest silent step: up to a minute on a busy machine)"
	$(BIN)/python -m compileall -q -j 0 -x '/_internal/' $(VENV)/lib/python3*/site-packages/torch
	$(call compile-imports,$(BIN)/python,$(LAB_IMPORTS))
	touch $@

$(INSTRUCTOR_STAMP): $(LAB_STAMP)
	$(call uv-install,$(BIN)/python) -c constraints.txt -e '.[instructor]'
	$(call compile-imports,$(BIN)/python,$(INSTRUCTOR_IMPORTS))
	touch $@

$(DEV_STAMP): $(INSTRUCTOR_STAMP)
	$(call uv-install,$(BIN)/python) -c constraints.txt -e '.[dev]'
	$(call compile-imports,$(BIN)/python,$(DEV_IMPORTS))
	touch $@

# The Colab-pinned test environment: Colab's versions of ipywidgets (7.7.1), numpy, matplotlib,
# tqdm and the IPython kernel (tests/colab/constraints.txt says where they come from, and what
# differs), with the course package; `make test` runs every lesson in it (tests/colab/lessons.py).
# Rebuilt from scratch only when its pins change; its torch is the CPU build, from $(WHEELS).
# Colab's packages as they are, none left out.
COLAB_VENV ?= .venv-colab
COLAB_PINS := tests/colab/constraints.txt
COLAB_STAMP := $(COLAB_VENV)/.installed

colab-env: $(COLAB_STAMP)

$(COLAB_VENV)/pyvenv.cfg: $(COLAB_PINS)
	rm -rf $(COLAB_VENV)
	$(PYTHON) -m venv $(COLAB_VENV)

$(COLAB_STAMP): EXCLUDES :=
$(COLAB_STAMP): $(COLAB_VENV)/pyvenv.cfg pyproject.toml | $(UV) $(TORCH_WHEEL)
	$(call install-torch,$(COLAB_VENV)/bin/python)
	$(call uv-install,$(COLAB_VENV)/bin/python) -c $(COLAB_PINS) -e . ipykernel nbclient pytest
	$(call compile-imports,$(COLAB_VENV)/bin/python,$(COLAB_IMPORTS))
	touch $@

# Debian packages, each installed with apt-get the first time a target needs it (one apt-get
# update for all that target's missing packages); where that is impossible, what needs them says
# why when it runs:
#   chromium     the browser tests (tests/browser) drive Debian's chromium through Playwright,
#                which never downloads a browser of its own
#   bubblewrap   student code is graded inside it (grader/sandbox/bwrap.py); without it grading refuses
#                to run student code
#   postgresql   the PostgreSQL gradebook's tests (tests/pipeline/test_postgres.py) start a throwaway
#                server of it (tests/helpers/postgres.py); a course's own server is its own
CHROMIUM ?= /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
CHROMIUM_PACKAGES = $(if $(wildcard $(CHROMIUM)),,chromium chromium-driver)
SANDBOX_PACKAGES = $(if $(shell command -v bwrap),,bubblewrap)
POSTGRESQL_PACKAGES = $(if $(wildcard /usr/lib/postgresql/*/bin/initdb)$(shell command -v initdb),,\
	postgresql)

# $(call apt-install,<packages, may be none>)
apt-install = $(if $(strip $(1)),@echo "Installing $(strip $(1)) (apt-get)"; { \
	$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(1); \
	} || echo "Could not install $(strip $(1)): what needs them will fail and say why.")

chromium:
	$(call apt-install,$(CHROMIUM_PACKAGES))
sandbox:
	$(call apt-install,$(SANDBOX_PACKAGES))
postgresql:
	$(call apt-install,$(POSTGRESQL_PACKAGES))
test-packages:
	$(call apt-install,$(CHROMIUM_PACKAGES) $(SANDBOX_PACKAGES) $(POSTGRESQL_PACKAGES))

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

# The student's JupyterLab shows no instructor tools. Where nbgrader is installed in the same
# environment too (by make formgrader or make test), its JupyterLab extension (the Nbgrader menu,
# Validate, Create Assignment) and its server extensions are off in this server only: make lab
# puts a configuration directory of its own first on JUPYTER_CONFIG_PATH, make formgrader does not.
STUDENT_CONFIG := $(VENV)/student-jupyter-config
STUDENT_CONFIG_FILES := $(STUDENT_CONFIG)/labconfig/page_config.json \
	$(STUDENT_CONFIG)/jupyter_server_config.json

$(STUDENT_CONFIG)/labconfig/page_config.json: Makefile | $(VENV)/pyvenv.cfg
	@mkdir -p $(@D)
	@echo '{"disabledExtensions": {"@jupyter/nbgrader": true}}' > $@

$(STUDENT_CONFIG)/jupyter_server_config.json: Makefile | $(VENV)/pyvenv.cfg
	@mkdir -p $(@D)
	@printf '%s\n' '{"ServerApp": {"jpserver_extensions": {' \
		'  "nbgrader.server_extensions.formgrader": false,' \
		'  "nbgrader.server_extensions.validate_assignment": false,' \
		'  "nbgrader.server_extensions.assignment_list": false,' \
		'  "nbgrader.server_extensions.course_list": false' \
		'}}}' > $@

# Its Python kernel loads attention_course.restart when it starts, so that the first cell run
# after a restart, a demo cell as much as a check, says what to run when a name is undefined.
STUDENT_DATA := $(VENV)/student-jupyter-data
STUDENT_KERNEL := $(STUDENT_DATA)/kernels/python3/kernel.json

$(STUDENT_KERNEL): Makefile | $(VENV)/pyvenv.cfg
	@mkdir -p $(@D)
	@printf '%s\n' '{"argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}",' \
		'          "--InteractiveShellApp.extensions=attention_course.restart"],' \
		' "display_name": "Python 3 (ipykernel)", "language": "python",' \
		' "metadata": {"debugger": true}}' > $@

lab: install-lab working-copy $(STUDENT_CONFIG_FILES) $(STUDENT_KERNEL)
	@echo "$(STEP) starting JupyterLab on port $(PORT): its address follows"
	JUPYTER_CONFIG_PATH="$(abspath $(STUDENT_CONFIG))$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	JUPYTER_PATH="$(abspath $(STUDENT_DATA))$${JUPYTER_PATH:+:$$JUPYTER_PATH}" \
		$(BIN)/jupyter lab --ServerApp.root_dir=$(WORK) --port=$(PORT) $(ALLOW_ROOT)

# The instructor's JupyterLab: nbgrader reads grader/nbgrader_config.py from the server's working
# directory, and its course root (the repository) must lie inside the server's root directory.
# Its Autograde button grades through the course's sandboxed grader (grader/nbgrader_hooks.py).
COURSE_WORKSPACE ?= $(or $(ATTENTION_COURSE_WORKSPACE),course)
# nbgrader's exchange, where release_assignment, submit, collect, release_feedback and
# fetch_feedback meet: on a JupyterHub, a folder every user of the hub reaches (nbgrader's
# default). Created here, writable by all, when it is missing and can be; EXCHANGE= elsewhere.
EXCHANGE ?= $(or $(ATTENTION_COURSE_EXCHANGE),/srv/nbgrader/exchange)

exchange:
	@[ -d "$(EXCHANGE)" ] || { mkdir -p "$(EXCHANGE)" && chmod ugo+rwx "$(EXCHANGE)"; } 2>/dev/null || \
		echo "No exchange: $(EXCHANGE) cannot be created by $$(id -un). Create it once with" \
			"'sudo mkdir -p $(EXCHANGE) && sudo chmod ugo+rwx $(EXCHANGE)', or pass EXCHANGE=<folder>;" \
			"the formgrader works without one, except releasing and collecting through it."

formgrader: install-instructor exchange
	@mkdir -p $(COURSE_WORKSPACE)
	@echo "The formgrader is under Nbgrader > Formgrader, or at /lab?formgrader=true"
	cd grader && export PATH="$(abspath $(BIN)):$$PATH" \
		ATTENTION_COURSE_WORKSPACE="$(abspath $(COURSE_WORKSPACE))" \
		ATTENTION_COURSE_EXCHANGE="$(abspath $(EXCHANGE))" && \
		jupyter lab --ServerApp.root_dir="$(CURDIR)" --port=$(PORT) $(ALLOW_ROOT)

# nbgrader's commands on the exchange, run from grader/ with the course's configuration:
# release-lesson hands LESSON= (as in notebooks/) out to the students; release-feedback hands
# back LESSON='s feedback pages (make feedback writes them) to each student's submission.
NBGRADER = cd grader && ATTENTION_COURSE_WORKSPACE="$(abspath $(COURSE_WORKSPACE))" \
	ATTENTION_COURSE_EXCHANGE="$(abspath $(EXCHANGE))" "$(abspath $(BIN))/nbgrader"

release-lesson release-feedback: install-instructor exchange
	@[ -n "$(LESSON)" ] || { echo "usage: make $@ LESSON=<lesson> [EXCHANGE=<folder>]"; exit 2; }
	$(NBGRADER) $(if $(filter release-lesson,$@),release_assignment,release_feedback) "$(LESSON)"

# Regenerate the student notebooks (notebooks/) from the solution notebooks with nbgrader.
release: install-instructor
	$(BIN)/python -m grader.release

# Grading (python -m grader --help): the workspace is $(COURSE_WORKSPACE).
GRADER = $(BIN)/python -m grader --workspace "$(COURSE_WORKSPACE)"

# ZIP= an LMS download (or a folder); without it, the exchange's inbound/ folder, where
# `nbgrader submit` puts what students hand in on a JupyterHub.
INBOUND = $(EXCHANGE)/attention-step-by-step/inbound

collect: install-instructor
	@[ -n "$(ZIP)" ] || [ -d "$(INBOUND)" ] || { echo "usage: make collect ZIP=path/to/lms-download.zip" \
		"[LESSON=...] [ROSTER=roster.csv] (without ZIP=: the exchange's $(INBOUND))"; exit 2; }
	$(GRADER) collect "$(or $(ZIP),$(INBOUND))" $(if $(LESSON),--lesson $(LESSON)) \
		$(if $(ROSTER),--roster "$(ROSTER)")

grade: install-instructor sandbox
	$(GRADER) grade $(if $(LESSON),--lesson $(LESSON)) $(if $(WORKERS),--workers $(WORKERS)) \
		$(if $(AGAIN),--again) $(if $(SCHEDULER),--scheduler "$(SCHEDULER)")

# course.toml's due dates and extensions, and the late penalties, into the gradebook (grade does
# it too); feedback and report only read the gradebook.
refresh: install-instructor
	$(GRADER) refresh

feedback: install-instructor
	$(GRADER) feedback

report: install-instructor
	$(GRADER) report

# Grade submissions as they arrive in the exchange and release their feedback, until stopped
# (docs/instructors/watch.md); LMS_FOLDER= also watches a folder an LMS sync fills.
watch: install-instructor sandbox exchange
	$(GRADER) watch --exchange "$(EXCHANGE)" $(if $(WORKERS),--workers $(WORKERS)) \
		$(if $(LMS_FOLDER),--lms-folder "$(LMS_FOLDER)")

# The demo class gets a workspace of its own, rebuilt every time.
DEMO_WORKSPACE ?= demo-course

demo: install-instructor sandbox
	rm -rf "$(DEMO_WORKSPACE)"
	$(BIN)/python -m grader --workspace "$(DEMO_WORKSPACE)" demo

# Crafted submissions (cheating, escaping the sandbox, exhausting the machine) through the real
# pipeline, with the summary an instructor needs; also part of `make test`.
adversarial: install sandbox
	$(BIN)/python tests/adversarial/suite.py

# The whole suite, on every core: pytest-xdist with one worker more than the cores (a worker
# waits on kernels, servers and timeouts part of the time: 2 cores, one full run each way, 384 s
# with 2 workers, 349 s with 3; with ten lessons 487 s with 3, 518 s with 4), each test module
# whole on one worker (what it builds once is built once; a notebook's cells share one kernel),
# modules in collection order (the slow suites first), one torch thread per process, so that
# workers' kernels do not fight over the cores, and bytecode written for every module the first
# time it is imported (the rest of what the installs did not compile). Every lesson also runs
# under Colab's pins (tests/colab/, in $(COLAB_VENV)). The slowest 20 tests are listed at the
# end, to keep an eye on.
# What the suite needs is installed side by side (the Debian packages while uv installs), each
# part's output shown when it is done.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST = OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(TEST_WORKERS) \
	--dist loadscope --no-loadscope-reorder
test:
	@$(MAKE) --no-print-directory -j3 --output-sync=target install colab-env test-packages
	CHROMIUM=$(CHROMIUM) COLAB_PYTHON="$(abspath $(COLAB_VENV))/bin/python" $(PYTEST) --durations=20

# The suite without what takes minutes, for contributors between changes: no test marked slow
# (notebooks executed, models trained, classes graded end to end, servers and clusters, the
# Colab-pinned run), browser or adversarial. CI runs `make test`.
FAST_SKIPS = not slow and not browser and not adversarial
test-fast: install sandbox
	@echo "make test-fast: skipping the tests marked slow, browser and adversarial (make test runs them)"
	$(PYTEST) -m "$(FAST_SKIPS)"

# Every performance figure, measured side by side; QUICK=1 for a small smoke run.
bench: install sandbox
	$(BIN)/python benchmarks/bench.py $(if $(QUICK),--quick --out $(or $(OUT),/tmp/attention-course-bench))

lint: install
	$(BIN)/ruff check src tests grader docs benchmarks

clean:
	rm -rf $(VENV) $(COLAB_VENV) $(WHEELS) build src/*.egg-info .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# A lesson's Gradescope autograder zip (docs/instructors/gradescope.md): make gradescope LESSON=01_embeddings
gradescope: install-instructor
	$(if $(LESSON),,$(error make gradescope needs LESSON=, e.g. LESSON=01_embeddings))
	$(BIN)/python -m grader gradescope build $(LESSON) $(if $(OUT),--out $(OUT))
