# Two entry points (see README): `make demo` runs the main job locally, `make test` runs the suite.
# Each installs what it needs: the virtualenv in .venv/ and the pinned CDK CLI in node_modules/.
PYTHON ?= python3

# --no-compile: Python compiles each module the first time it is imported; compiling every installed one up front
# costs over a minute of CPU (measured in tests/test_install.py's fresh virtualenv: 101 s of CPU with, 41 s without).
.venv/.installed: pyproject.toml
	$(PYTHON) -m venv .venv
	.venv/bin/pip install --quiet --upgrade pip
	.venv/bin/pip install --quiet --no-compile -e '.[dev,ray]'  # ray: so the Ray worker test runs
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

setup: .venv/.installed node_modules/.installed

# The adaptive sweep measures the predicted knee and max; the listed levels around them draw the curve (below the
# knee, and past it where the queue builds), so the plot compares a curve with the prediction, not one point.
demo: setup
	.venv/bin/sagellm bench --profile max-throughput --model meta-llama/Llama-2-7b-hf \
		--instance ml.g5.2xlarge --time-scale 0.1 --sweep adaptive --concurrency 1,4,16,64 \
		--out sagellm-results/demo

# The static checks both test targets start with: lint, types, and the import contracts (pyproject.toml).
lint: setup
	.venv/bin/ruff check src tests app.py benchmarks docs scripts
	.venv/bin/mypy src
	.venv/bin/lint-imports

# Four pytest workers on two cores: most of the slow tests wait (on the CDK CLI, the moto server, an emulator at a
# time scale, subprocess CLIs), so four keep both cores busy. loadfile: a module's tests run in one worker, so a
# module-scoped fixture (a pip install, a server) is built once; in collection order, which tests/conftest.py
# starts with the slow modules. (loadgroup's xdist_group marks are lost on pytest 9.2's node ids.)
# `make test PYTEST_WORKERS=` runs in one process.
PYTEST_WORKERS ?= -n 4 --dist loadfile --no-loadscope-reorder

test: lint
	# The docs site, strict: a broken link or anchor, or a page left out of the nav, fails the build. The CLI
	# reference and the results schema are rendered from the code here, so they cannot go stale. (Not
	# --quiet: it silences the warnings that --strict counts, and the build then passes.)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true .venv/bin/mkdocs build --strict --site-dir build/site
	.venv/bin/python -m pytest $(PYTEST_WORKERS)

# Day-to-day work, in under two minutes: the static checks and every test marked neither integration (those
# deploy through the real CDK CLI, run the moto server or a real load) nor slow (over about a second each:
# worker processes, the CLI as a subprocess, synth). CI runs `make test`, which runs them all.
# Two workers here: these tests are CPU-bound, and each worker collects the suite again (about 17 s of CPU).
test-fast: lint
	.venv/bin/python -m pytest -q -m "not integration and not slow" -n 2 --dist loadfile --no-loadscope-reorder

.PHONY: setup demo lint test test-fast
