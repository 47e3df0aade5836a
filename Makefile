# Thin wrapper over CMake. `make run` and `make test` are the README's quick start.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build run test test-asan bench image clean

all: build

deps:
	@tools/install-deps.sh --check 2>/dev/null || tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The main job on the embedded default configuration.
run: build
	$(BUILD)/piperec demo

# Every test: the normal build, then the unit tests again under ASan+UBSan.
test: build test-asan
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPR_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS) -L unit --timeout 900

bench: build
	bench/run.sh $(BUILD)

# OCI image FROM scratch with buildah (tools/build-image.sh; push: docs/operations.md).
IMAGE ?= localhost/piperec
image: build
	tools/build-image.sh --binary $(BUILD)/piperec --tag $(IMAGE):$$($(BUILD)/piperec version | cut -d' ' -f2) --tag $(IMAGE):latest

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
