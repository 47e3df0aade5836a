# Thin wrapper over CMake. `make run` and `make test` are the README's quick start.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= criteo_tsv proto trainer_wire config http json json_decode avro pbuser
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build run test test-asan fuzz-build test-fuzz fuzz fault-long bench image clean

all: build

deps:
	@tools/install-deps.sh --check 2>/dev/null || tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The main job on the embedded default configuration.
run: build
	$(BUILD)/piperec demo

# Every test: the normal build, the unit tests again under ASan+UBSan, and a
# few seconds of each libFuzzer target (tests/fuzz/README.md).
test: build test-asan test-fuzz
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPR_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS) -L unit --timeout 900

# libFuzzer targets (tests/fuzz/): clang, only the libraries they need.
fuzz-build: deps
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
		-DPR_FUZZ=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS)

# The short smoke run (ctest label `fuzz`, FUZZ_SMOKE_SECONDS each, default 5).
test-fuzz: fuzz-build
	cd $(FUZZ_BUILD) && ctest --output-on-failure -j $(JOBS) -L fuzz --timeout 300

# Each target for FUZZ_SECONDS on a copy of its corpus; prints executions reached.
fuzz: fuzz-build
	@rc=0; for t in $(FUZZ_TARGETS); do \
		tests/fuzz/run_fuzz.sh $(FUZZ_BUILD)/tests/fuzz/fuzz_$$t tests/fuzz/corpus/$$t \
			$(FUZZ_SECONDS) $(FUZZ_BUILD)/fuzz-work/$$t || rc=1; \
	done; exit $$rc

# The fault suite (tests/fault) at the issue's full durations: broker down
# 30 s, 10x overload for 60 s (`make test` runs 15 s of each). About 7 min.
FAULT_OUTAGE_S ?= 30
FAULT_OVERLOAD_S ?= 60
fault-long: build
	cd $(BUILD) && FAULT_OUTAGE_S=$(FAULT_OUTAGE_S) FAULT_OVERLOAD_S=$(FAULT_OVERLOAD_S) \
		ctest --output-on-failure -L fault -R 'test_fault_(broker|overload)'

bench: build
	bench/run.sh $(BUILD)

# OCI image FROM scratch with buildah (tools/build-image.sh; push: docs/operations.md).
IMAGE ?= localhost/piperec
image: build
	tools/build-image.sh --binary $(BUILD)/piperec --tag $(IMAGE):$$($(BUILD)/piperec version | cut -d' ' -f2) --tag $(IMAGE):latest

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
