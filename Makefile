# The two commands: `make run` and `make test`. Both install what is missing first.
MODEL ?= models/tiny-qwen3-moe
JOBS ?= $(shell nproc)

FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= safetensors model_config quant_description tokenizer chat_template openai_request gguf

.PHONY: run test deps build build-asan build-fuzz test-release test-asan test-fuzz fuzz bench format clean

# Builds only the binary it runs; `make test` builds the rest.
run: deps
	@test -f build/build.ninja || cmake --preset release
	cmake --build build -j $(JOBS) --target mxserve
	./build/mxserve run -m $(MODEL) -p "It is a truth universally acknowledged, that" --seed 0 -n 64

test: deps build build-asan build-fuzz
	ctest --preset release
	ctest --preset asan
	ctest --preset fuzz

deps:
	@bash scripts/install-deps.sh

build:
	@test -f build/build.ninja || cmake --preset release
	cmake --build build -j $(JOBS)

build-asan:
	@test -f build-asan/build.ninja || cmake --preset asan
	cmake --build build-asan -j $(JOBS)

# libFuzzer targets (clang, ASan + UBSan): only the parsers' libraries and fuzz/.
build-fuzz:
	@test -f build-fuzz/build.ninja || cmake --preset fuzz
	cmake --build build-fuzz -j $(JOBS)

test-release: deps build
	ctest --preset release

test-asan: deps build-asan
	ctest --preset asan

# Replays each corpus and fuzzes briefly (what `make test` runs).
test-fuzz: deps build-fuzz
	ctest --preset fuzz

# Fuzzes each target for FUZZ_SECONDS from a scratch copy of its corpus (build-fuzz/fuzz/fuzz-out/);
# all targets run, then the failed ones are named.
fuzz: deps build-fuzz
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  bash fuzz/run.sh build-fuzz/fuzz/$${t}_fuzz $$t fuzz $(FUZZ_SECONDS) || failed="$$failed $$t"; \
	done; if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

bench: deps build
	./build/bench/mx_bench

format:
	git ls-files '*.cpp' '*.h' | xargs clang-format -i

clean:
	rm -rf build build-asan build-fuzz
