# Thin front door over CMake. `make demo` runs the main job; `make test` runs the suite.
JOBS ?= $(shell nproc)
# ctest's slots: a computing test holds 2 (a core), a waiting one 1 (tests/CMakeLists.txt)
TEST_JOBS ?= $(shell echo $$((2 * $(JOBS) + 1)))
BUILD ?= build
CMAKE_FLAGS ?=
# Ninja where it is installed (scripts/deps.sh installs it): a fresh build took 64 s of wall on 2
# cores against make's 106 (make's recursion leaves a core idle). A build folder keeps the generator
# it was configured with, so -G is given only to a new one.
GENERATOR ?= $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
# CMake's makefiles run make inside make: without this each of them prints its directory.
MAKEFLAGS += --no-print-directory

.PHONY: all build configure deps bench-deps demo test asan fuzz clean

all: build

deps:
	@scripts/deps.sh

# What the benchmarks need beyond the build's packages: PyTorch for the peers (bench/README.md).
bench-deps:
	@scripts/deps.sh --bench

CONFIGURE = cmake -S . -B $(BUILD) $(if $(wildcard $(BUILD)/CMakeCache.txt),,-G "$(GENERATOR)") -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

configure: deps
	@$(CONFIGURE)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The demo needs the trident binary only, not the test programs.
demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target trident
	@scripts/demo.sh $(BUILD)

# The npm references install (network, and a few seconds of CPU) while CMake configures (one core)
# and the build compiles.
test: deps
	@mkdir -p $(BUILD); scripts/test-deps.sh $(BUILD) & deps=$$!; $(CONFIGURE) && cmake --build $(BUILD) -j $(JOBS); rc=$$?; \
	  wait $$deps || exit 1; exit $$rc
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS)

asan: deps
	@cmake -S . -B build-asan $(if $(wildcard build-asan/CMakeCache.txt),,-G "$(GENERATOR)") -DCMAKE_BUILD_TYPE=Debug -DTRIDENT_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@scripts/test-deps.sh build-asan
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(TEST_JOBS)

fuzz:
	@scripts/deps.sh --fuzz
	@scripts/fuzz.sh $(BUILD)-fuzz

clean:
	rm -rf build build-asan build-fuzz
