# The two commands: `make run` and `make test`. Both install what is missing first.
MODEL ?= models/tiny-qwen3-moe
JOBS ?= $(shell nproc)

.PHONY: run test deps build build-asan test-release test-asan bench format clean

run: deps build
	./build/mxserve run -m $(MODEL) -p "It is a truth universally acknowledged, that" --seed 0 -n 64

test: deps build build-asan
	ctest --preset release
	ctest --preset asan

deps:
	@bash scripts/install-deps.sh

build:
	@test -f build/build.ninja || cmake --preset release
	cmake --build build -j $(JOBS)

build-asan:
	@test -f build-asan/build.ninja || cmake --preset asan
	cmake --build build-asan -j $(JOBS)

test-release: deps build
	ctest --preset release

test-asan: deps build-asan
	ctest --preset asan

bench: deps build
	./build/bench/mx_bench

format:
	git ls-files '*.cpp' '*.h' | xargs clang-format -i

clean:
	rm -rf build build-asan
