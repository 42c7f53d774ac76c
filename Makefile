# retryscope — the two commands: `make demo` and `make test`. Both work on a fresh machine
# with only Python >= 3.11 and make: they create .venv and install the project (editable).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ARGS   ?=

.PHONY: demo test lint typecheck package-tree unit unit-public-sdk bench browser-deps prometheus-deps java clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/retryscope demo --out retryscope-data $(ARGS)

# mypy and import-linter cannot follow setuptools' package-dir mapping, so they read a tree
# of symlinks laid out as the installed package (retryscope/{instrumentation,control,
# analytics,dashboards}).
PACKAGE_TREE := build/typecheck
package-tree:
	rm -rf $(PACKAGE_TREE) && mkdir -p $(PACKAGE_TREE)/retryscope
	for f in retryscope/*; do ln -s $(CURDIR)/$$f $(PACKAGE_TREE)/retryscope/; done
	for d in instrumentation control analytics dashboards; do ln -s $(CURDIR)/$$d $(PACKAGE_TREE)/retryscope/$$d; done

# The layers (pyproject.toml [tool.importlinter]; docs/guides/architecture.md) are checked
# with the style.
lint: $(STAMP) package-tree
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	cd $(PACKAGE_TREE) && PYTHONPATH=. $(CURDIR)/$(BIN)/lint-imports --no-cache --no-logo \
	  $(CURDIR)/pyproject.toml

typecheck: $(STAMP) package-tree
	cd $(PACKAGE_TREE) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml -p retryscope

# The suite runs in TEST_WORKERS processes (pytest-xdist), each test file on one worker so
# that module fixtures are built once; TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
unit: $(STAMP) browser-deps prometheus-deps java
	$(BIN)/python -m pytest $(XDIST) $(ARGS)

# The pipeline tests (stamping processor, batch processor, exporter, Parquet, report) again
# on the public OpenTelemetry API only: RETRYSCOPE_SDK_PUBLIC_ONLY=1 turns off every SDK
# shortcut in instrumentation/_sdk.py, as an SDK with other internals would.
PUBLIC_SDK_TESTS := tests/instrumentation tests/test_context_and_processor.py \
	tests/test_pipeline_end_to_end.py tests/test_sdk_paths.py tests/test_zero_code.py \
	tests/test_columns_routing.py tests/test_export_*.py tests/reliability/test_load.py \
	tests/reliability/test_kill_pipeline.py tests/reliability/test_bad_attributes.py \
	tests/reliability/test_disk_faults.py tests/metrics/test_metrics_agree.py
unit-public-sdk: $(STAMP)
	RETRYSCOPE_SDK_PUBLIC_ONLY=1 $(BIN)/python -m pytest -q $(XDIST) $(PUBLIC_SDK_TESTS)

test: lint typecheck unit unit-public-sdk

# Headless Chromium for the UI's browser test: Debian's package, never a browser download.
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "chromium could not be installed: browser tests will be skipped"; \
	  else echo "chromium not found and cannot install it: browser tests will be skipped"; fi; }

# promtool for the alert rules' checks (tests/metrics/test_dashboards.py): Debian's prometheus
# package ships it (where an init system starts services, the package's server starts too).
prometheus-deps:
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends prometheus >/dev/null) \
	      || echo "prometheus could not be installed: the promtool rule checks will be skipped"; \
	  else echo "promtool not found and cannot install it: the promtool rule checks will be skipped"; fi; }

# A Java 17+ runtime for the Spark model build (pyspark comes with the spark extra):
# Debian's package when none is on PATH and we may install, never a JDK download; an
# existing Java is left as it is (installing the package would upgrade it).
java:
	@command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends openjdk-17-jre-headless >/dev/null) \
	      || echo "Java could not be installed: the Spark tests will be skipped"; \
	  else echo "Java not found and cannot install it: the Spark tests will be skipped"; fi; }

bench: $(STAMP) java
	$(BIN)/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) retryscope-data .pytest_cache .mypy_cache .ruff_cache build *.egg-info
	find instrumentation control analytics dashboards retryscope -name "*.so" -delete
