# Thin wrapper around CMake. Every target installs missing Debian packages
# first (scripts/install-deps.sh), so a fresh Debian 12 machine needs nothing
# but this repository.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps deps-dev build demo check install asan tsan fuzz fuzz-smoke bench clean format format-check \
	python python-install python-bench

all: build

deps:
	@./scripts/install-deps.sh

deps-dev:
	@./scripts/install-deps.sh --dev

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Quiet apart from the demo: dependencies and build go to a log, shown
# only when they fail.
demo:
	@mkdir -p $(BUILD)
	@echo "building (log: $(BUILD)/demo-build.log) ..."
	@if ! { ./scripts/install-deps.sh && cmake -S . -B $(BUILD) $(CMAKE_FLAGS) && \
		cmake --build $(BUILD) -j $(JOBS); } >$(BUILD)/demo-build.log 2>&1; then \
		cat $(BUILD)/demo-build.log; \
		echo "make demo: the build failed (log above, kept in $(BUILD)/demo-build.log)" >&2; \
		exit 1; \
	fi
	@./scripts/demo.sh $(BUILD)

check: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# Installs the library, headers, tensorwired, the CLI, tensorwire.pc and the
# CMake package config under $(PREFIX) (below $(DESTDIR) when set), e.g.
#   make install PREFIX=/usr DESTDIR=/tmp/stage
# `make check` verifies an installed copy (test_install, scripts/check-install.sh).
PREFIX ?= /usr/local
install: build
	@DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps-dev
	@cmake -S . -B build-asan -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DTW_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# Threaded code under ThreadSanitizer (tests labelled "tsan").
tsan: deps-dev
	@cmake -S . -B build-tsan -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DTW_TSAN=ON >/dev/null
	@cmake --build build-tsan -j $(JOBS)
	@cd build-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" \
		ctest --output-on-failure -L tsan $(CTEST_ARGS)

FUZZ_SECONDS ?= 600
fuzz: deps-dev
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DTW_FUZZ=ON -DTW_SANITIZE=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS)
	@./scripts/run-fuzz.sh build-fuzz $(FUZZ_SECONDS)

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=20

bench: build
	@./scripts/bench.sh $(BUILD)

# The Python package (python/, docs/python.md). "python" builds it into
# $(BUILD)/python (also part of "build"; use it with PYTHONPATH=$(BUILD)/python).
# "python-install" installs it into PYTHON's site-packages with pip, linked
# (rpath) to $(BUILD)'s libtensorwire.so. Debian marks its own interpreter
# externally managed: use a venv (PYTHON=venv/bin/python), or accept
# PIP_FLAGS=--break-system-packages on a throwaway machine such as CI.
PYTHON ?= /usr/bin/python3
PIP_FLAGS ?=
python: build
	@cmake --build $(BUILD) --target python

python-install: build
	@TW_LIB_DIR=$(abspath $(BUILD)) $(PYTHON) -m pip install --no-build-isolation --no-index $(PIP_FLAGS) ./python

# Python binding vs the C library in the same run (docs/performance.md).
python-bench: build
	@PYTHONPATH=$(abspath $(BUILD))/python $(PYTHON) bench/bench_python.py --build $(BUILD)

FORMAT_DIRS = src include tools tests bench fuzz python
format:
	@clang-format -i $$(git ls-files $(addsuffix /*.c,$(FORMAT_DIRS)) $(addsuffix /*.h,$(FORMAT_DIRS)))

# CI: every C file must already be what .clang-format makes of it.
format-check: deps-dev
	@clang-format --dry-run -Werror $$(git ls-files $(addsuffix /*.c,$(FORMAT_DIRS)) $(addsuffix /*.h,$(FORMAT_DIRS)))
	@echo "format-check: clean"

clean:
	rm -rf build build-asan build-tsan build-fuzz
