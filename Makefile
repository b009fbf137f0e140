PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test fast lint typecheck pytest docs system bench clean

# The venv's own pip installs uv, and uv installs the package with every extra: it fetches
# and unpacks in parallel (about 17 s here against pip's 65 s, bytecode compiled as pip does).
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m examples.demo
	@echo
	@echo "truss-files is installed in $(VENV). Put it on your PATH in this shell with:"
	@echo "    . $(VENV)/bin/activate"

lint: $(STAMP)
	$(BIN)/ruff check truss_files tests benchmarks examples docs/gen.py
	$(BIN)/ruff format --check truss_files tests benchmarks examples docs/gen.py

typecheck: $(STAMP)
	$(BIN)/mypy

# What some tests start besides Python: the system's Chromium (the review page's tests,
# tests/review/test_review_page.py and tests/adversarial/test_review_page_attacks.py), curl
# (the HTTP page's walk-through) and GNU time (a child's peak memory, tests/store/test_import.py).
# CI runs as root on a fresh machine, so there they are installed, saying so first; elsewhere
# this says how, and those tests skip with the same loud reason.
SYSTEM_NEEDS := /usr/bin/chromium:chromium /usr/bin/curl:curl /usr/bin/time:time
APT := DEBIAN_FRONTEND=noninteractive apt-get -y -q

system:
	@missing=""; for need in $(SYSTEM_NEEDS); do \
		[ -x "$${need%%:*}" ] || missing="$$missing $${need#*:}"; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing what the tests start:$$missing (apt-get)"; \
		$(APT) install $$missing >/dev/null || \
		{ $(APT) update >/dev/null && $(APT) install $$missing >/dev/null; } || \
		echo "WARNING: could not install$$missing: the tests that need them will be SKIPPED"; \
	else \
		echo "WARNING: missing$$missing and this is not root: the tests that need them will" \
			"be SKIPPED; install with: sudo apt-get install -y$$missing"; \
	fi

# One worker per core: the tests share nothing but the machine, so the suite's wall time
# halves on two cores. `make pytest PYTEST_WORKERS=0` runs it in one process.
PYTEST_WORKERS ?= auto

# The tests' scratch repositories live in memory where the machine has a roomy tmpfs (4 GB
# free at /dev/shm): every commit of a search index waits for fsync on a disk, which made the
# index tests 1.6x slower in wall time, and no test checks what survives a power cut. An
# explicit TMPDIR wins.
SCRATCH := $(shell d=/dev/shm; [ -d $$d ] && [ -w $$d ] && \
	[ "$$(df -Pk $$d | awk 'NR==2 {print $$4}')" -gt 4000000 ] 2>/dev/null && echo $$d)

pytest: $(STAMP) system
	TMPDIR="$${TMPDIR:-$(SCRATCH)}" $(BIN)/pytest -q -n $(PYTEST_WORKERS)

# The docs site, strictly: a broken link, a page left out of the nav or a missing page fails.
# (Whether the generated reference pages are current is a test in tests/test_docs.py.)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir build/site

test: lint typecheck docs pytest

# The one-minute loop: the tests that start no process but git (docs/testing.md).
fast: $(STAMP)
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) -m fast

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
