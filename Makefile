# hark — GNU Make build. `make` builds build/hark, build/libhark.a, build/libhark.so and the C
# examples; `make install [PREFIX=/usr/local] [DESTDIR=]` installs them with hark.h and hark.pc;
# `make test` runs the CPU suite; `make test-gpu` the GPU suite; `make SAN=address|undefined` builds with a sanitizer.
# CUDA sources are built when nvcc is found (on PATH or under /usr/local/cuda), skipped otherwise.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2
SAN      ?=
CFLAGS   ?=
CFLAGS   += -std=c11 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
            -fPIC -Iinclude -Isrc -I$(BUILD)/gen -MMD -MP -pthread $(shell pkg-config --cflags cairo 2>/dev/null)
LDLIBS   := -lsndfile -lsoxr -lfftw3f -lsleef -lopenblas -lcjson -luv -lhttp_parser -lnghttp2 -lwslay -lprotobuf-c -lz -lcairo -lm -lpthread
LDFLAGS  ?=
PREFIX   ?= /usr/local
DESTDIR  ?=

SAN_LDFLAGS :=
comma := ,
ifneq ($(SAN),)
  # build-address-undefined for SAN=address,undefined: a comma in the folder would split the
  # linker's -Wl,-rpath,DIR
  BUILD   := build-$(subst $(comma),-,$(SAN))
  CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
  LDFLAGS += -fsanitize=$(SAN)
  SAN_LDFLAGS := -fsanitize=$(SAN) # programs linking a sanitized libhark need the runtime too
endif

# ---- CUDA detection -------------------------------------------------------------------------
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
ifeq ($(NO_CUDA),1)
  NVCC :=
endif

SRCS      := $(shell find src -name '*.c' ! -path 'src/cli/*' | sort)
CLI_SRCS  := $(shell find src/cli -name '*.c' | sort)
CU_SRCS   := $(shell find src -name '*.cu' | sort)
TEST_SRCS := $(shell find tests -name '*.c' ! -path 'tests/fuzz/*' | sort)
BENCH_SRCS:= $(shell find bench -name '*.c' | sort)

# protobuf-c code generated at build time from proto/*.proto (never committed)
PROTOS    := $(sort $(wildcard proto/*.proto))
GEN_SRCS  := $(PROTOS:proto/%.proto=$(BUILD)/gen/%.pb-c.c)
GEN_HDRS  := $(GEN_SRCS:.c=.h)
GEN_OBJS  := $(GEN_SRCS:.c=.o)

OBJS      := $(SRCS:%.c=$(BUILD)/%.o) $(GEN_OBJS)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/%.o)
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o)

# ---- CUDA architectures (issue 24) -----------------------------------------------------------
# CUDA_ARCHS: the GPUs the objects carry machine code for, default every data-centre part since
# Ampere: 80 (A100, A30), 86 (A10, A10G, A40, RTX 30xx), 89 (L4, L40S, RTX 40xx), 90a (H100,
# H200: the only one with the Hopper kernels, wgmma). `make CUDA_ARCHS=90a` builds for one chip
# (about a quarter of the time). CUDA_PTX: virtual architectures embedded as PTX, which the
# driver compiles for chips newer than every cubin (Blackwell and on, which take the Ampere
# path). compute_90, not compute_90a: PTX of an arch-specific target runs only on that exact chip
# and never JITs forward; compute_90 is the newest target every kernel compiles for (the Hopper
# kernels become traps there, never launched off the Hopper path). A narrowed CUDA_ARCHS embeds
# no PTX unless CUDA_PTX is given too. The list reaches the code as HARK_CUDA_ARCH_LIST
# (`hark --version`, and the path policy of src/gpu/gpu_arch.c); `make check-archs` lists what the
# objects hold (cuobjdump).
ifeq ($(origin CUDA_ARCHS),undefined)
  CUDA_ARCHS := 80 86 89 90a
  CUDA_PTX   ?= 90
endif
CUDA_PTX      ?=
CUDA_GENCODE  := $(foreach a,$(CUDA_ARCHS),-gencode=arch=compute_$(a),code=sm_$(a)) \
                 $(foreach a,$(CUDA_PTX),-gencode=arch=compute_$(a),code=compute_$(a))
# "sm_80+sm_86+...+compute_90" (no spaces or commas: nvcc splits -D values at commas)
CUDA_ARCH_LIST := $(subst $(eval) ,+,$(strip $(CUDA_ARCHS:%=sm_%) $(CUDA_PTX:%=compute_%)))

ifneq ($(NVCC),)
  CU_OBJS   := $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
  CFLAGS    += -DHARK_CUDA=1 -I$(CUDA_HOME)/include
  # -compress-mode=size (nvcc 12.8 on; left out where nvcc lacks it): the fatbins of four cubins
  # and a PTX take less room than the one sm_90a cubin did uncompressed (rows_f16.cu: 1.6 MB,
  # against 17.9 MB with the default mode); the driver unpacks a module once, when it loads
  NV_COMPRESS := $(shell $(NVCC) --help 2>/dev/null | grep -q -- '--compress-mode' && echo -compress-mode=size)
  NVFLAGS   ?= -O3 -std=c++17 -lineinfo $(CUDA_GENCODE) $(NV_COMPRESS) \
               -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter -Iinclude -Isrc
  NVFLAGS   += -Xcompiler -fPIC   # objects of libhark.so too
  LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcufft -lcublasLt -lcublas -lcudart -lstdc++
else
  CU_OBJS   :=
endif

LIB := $(BUILD)/libhark.a
SOLIB := $(BUILD)/libhark.so
BIN := $(BUILD)/hark
TESTBIN := $(BUILD)/hark_tests
EXAMPLES := $(BUILD)/examples/c/transcribe

.PHONY: all test test-gpu bench fuzz fuzz-http clean format format-check lint check-cuda check-archs install examples
all: check-cuda $(BIN) $(SOLIB) $(EXAMPLES)

check-cuda:
ifeq ($(NVCC),)
	@echo "note: nvcc not found; building without CUDA (GPU paths disabled)"
endif

$(BUILD)/tests/%.o: CFLAGS += -Itests
# torch-identical windows need SLEEF's AVX2 routines; entered only when the CPU has AVX2+FMA
$(BUILD)/src/dsp/window_torch.o: CFLAGS += -mavx2 -mfma
# hot DSP loops: -O3 vectorises across independent butterflies (no reassociation: same results)
$(BUILD)/src/dsp/%.o: OPT = -O3
# objects rebuild when the flags change (e.g. -fPIC came in for libhark.so). The text is taken
# here, once (:=): target-specific additions (-Itests, OPT=-O3) must not make it flip-flop. C and
# CUDA objects have a stamp each: a new CUDA_ARCHS rebuilds the .cu objects only.
FLAGS_STAMP := $(BUILD)/.flags
FLAGS_TEXT := $(CC) $(CFLAGS)
NV_STAMP := $(BUILD)/.nvflags
NV_TEXT := $(NVCC) $(NVFLAGS) | $(CUDA_ARCH_LIST)
$(FLAGS_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(FLAGS_TEXT)' | cmp -s - $@ || echo '$(FLAGS_TEXT)' > $@
$(NV_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(NV_TEXT)' | cmp -s - $@ || echo '$(NV_TEXT)' > $@
.PHONY: FORCE
FORCE:

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(dir $@)
	protoc-c --c_out=$(BUILD)/gen -Iproto $<
# generated code (protoc-c 1.4 output compiles clean with our warnings; relax them here if a
# newer protoc-c does not)
$(BUILD)/gen/%.pb-c.o: $(BUILD)/gen/%.pb-c.c $(FLAGS_STAMP)
	$(CC) $(CFLAGS) -c $< -o $@
# everything may include the generated headers: generate them first
$(filter-out $(GEN_OBJS),$(OBJS)) $(CLI_OBJS) $(TEST_OBJS): | $(GEN_HDRS)

$(BUILD)/%.cu.o: %.cu $(NV_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(NVFLAGS_$(notdir $<)) -MMD -MP -c $< -o $@

# the feature kernels reproduce the CPU's float32 operation order: no fused multiply-add
NVFLAGS_features.cu := -fmad=false
# the list the objects were compiled for, as `hark --version` and the path policy read it (keep it
# in step with NVFLAGS: set CUDA_ARCHS / CUDA_PTX rather than -gencode flags)
NVFLAGS_gpu_archs.cu := -DHARK_CUDA_ARCH_LIST=$(CUDA_ARCH_LIST)

$(LIB): $(OBJS) $(CU_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# the shared library: every object (all built -fPIC), its dependencies linked in as NEEDED
$(SOLIB): $(OBJS) $(CU_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libhark.so -o $@ $^ $(LDLIBS)

# examples link the shared library, as an embedding program would
examples: $(EXAMPLES)
$(BUILD)/examples/c/%: examples/c/%.c $(SOLIB) include/hark.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Wall -Wextra -Werror -O2 -Iinclude -o $@ $< -L$(BUILD) -lhark \
	  -Wl,-rpath,$(abspath $(BUILD)) $(SAN_LDFLAGS)

# pkg-config file: Libs for the shared library; Libs.private for a static link (--static)
.PHONY: $(BUILD)/hark.pc  # PREFIX is baked in: written afresh for each install
$(BUILD)/hark.pc:
	@mkdir -p $(dir $@)
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: hark' 'Description: hark speech inference engine (C API)' \
	  "Version: $$(sed -n 's/^#define HARK_VERSION \"\(.*\)\"/\1/p' include/hark.h)" \
	  'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lhark $(SAN_LDFLAGS)' \
	  'Libs.private: $(LDLIBS) -pthread' > $@

install: $(BIN) $(LIB) $(SOLIB) $(BUILD)/hark.pc
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/hark
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/libhark.a
	install -m 755 $(SOLIB) $(DESTDIR)$(PREFIX)/lib/libhark.so
	install -m 644 include/hark.h $(DESTDIR)$(PREFIX)/include/hark.h
	install -m 644 $(BUILD)/hark.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/hark.pc
	install -d $(DESTDIR)$(PREFIX)/share/hark
	rm -rf $(DESTDIR)$(PREFIX)/share/hark/models && cp -a models $(DESTDIR)$(PREFIX)/share/hark/models

$(BIN): $(CLI_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJS) $(LIB) $(LDLIBS)

$(TESTBIN): $(TEST_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $(TEST_OBJS) $(LIB) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

bench: $(BENCH_SRCS:%.c=$(BUILD)/%)

# The CPU suite; tests that need a GPU or ../shared skip with a reason when it is absent.
test: $(TESTBIN) $(BIN) $(SOLIB) $(EXAMPLES)
	HARK_BIN=$(abspath $(BIN)) HARK_BUILD=$(abspath $(BUILD)) CUDA_HOME=$(CUDA_HOME) ./$(TESTBIN)

# Only the GPU tests (run on the device machine).
test-gpu: $(TESTBIN) $(BIN) $(SOLIB) $(EXAMPLES)
	HARK_BIN=$(abspath $(BIN)) HARK_BUILD=$(abspath $(BUILD)) ./$(TESTBIN) --gpu

# The cubins and PTX build/hark holds, against CUDA_ARCHS / CUDA_PTX (issue 24; cuobjdump from
# CUDA_HOME/bin or PATH, the check skipped without it). `make test` runs the same check.
check-archs: $(TESTBIN) $(BIN)
	HARK_BIN=$(abspath $(BIN)) CUDA_HOME=$(CUDA_HOME) ./$(TESTBIN) cuda_objects_hold_every_arch

# libFuzzer target for the audio decoder (needs clang); corpus in tests/fuzz/corpus/
# (tests/fuzz/make_corpus.sh). Run: ./$(BUILD)/fuzz_audio_decode -max_total_time=120 CORPUS_COPY
FUZZ_SRCS  := tests/fuzz/fuzz_audio_decode.c $(sort $(wildcard src/core/*.c src/audio/*.c))
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -Wno-unused-parameter \
              -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Iinclude -Isrc -pthread
fuzz: $(BUILD)/fuzz_audio_decode $(BUILD)/fuzz_grpc
$(BUILD)/fuzz_audio_decode: $(FUZZ_SRCS) $(wildcard include/*.h src/core/*.h src/audio/*.h)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $(FUZZ_SRCS) -lsndfile -lsoxr -lm -lpthread

fuzz-multipart: $(BUILD)/fuzz_multipart
$(BUILD)/fuzz_multipart: tests/fuzz/fuzz_multipart.c src/net/multipart.c src/core/error.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $^

# libFuzzer target for the HTTP request parser (socket-free; needs clang); seeds in
# tests/fuzz/corpus_http/. Run: ./$(BUILD)/fuzz_http_request -max_total_time=60 CORPUS_COPY
FUZZ_HTTP_SRCS := tests/fuzz/fuzz_http_request.c src/net/http_server_parse.c $(sort $(wildcard src/core/*.c))
fuzz-http: $(BUILD)/fuzz_http_request
$(BUILD)/fuzz_http_request: $(FUZZ_HTTP_SRCS) $(wildcard include/*.h src/core/*.h src/net/http_server.h)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $(FUZZ_HTTP_SRCS) -lhttp_parser -lz -lm -lpthread

# libFuzzer targets for the KServe infer-request codec and config.pbtxt (clang); seeds in
# tests/fuzz/corpus_kserve/ (2-byte LE header length, 0xffff = none, then the body) and
# tests/fuzz/corpus_model_config/. Run: ./$(BUILD)/fuzz_kserve_request -max_total_time=60 CORPUS_COPY
FUZZ_KSERVE_SRCS := tests/fuzz/fuzz_kserve_request.c src/api/kserve.c $(sort $(wildcard src/core/*.c))
FUZZ_MC_SRCS     := tests/fuzz/fuzz_model_config.c src/server/model_config.c $(sort $(wildcard src/core/*.c))
.PHONY: fuzz-kserve
fuzz-kserve: $(BUILD)/fuzz_kserve_request $(BUILD)/fuzz_model_config
$(BUILD)/fuzz_kserve_request: $(FUZZ_KSERVE_SRCS) $(wildcard include/*.h src/core/*.h src/api/kserve.h)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $(FUZZ_KSERVE_SRCS) -lcjson -lm -lpthread
$(BUILD)/fuzz_model_config: $(FUZZ_MC_SRCS) $(wildcard include/*.h src/core/*.h src/server/model_config.h)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $(FUZZ_MC_SRCS) -lcjson -lm -lpthread

# libFuzzer target for the gRPC stack (HTTP/2 frames → nghttp2 → gRPC framing → protobuf decode →
# kserve conversion → answers), socket-free over a stub service; seeds in tests/fuzz/corpus_grpc/.
# Run: ./$(BUILD)/fuzz_grpc -runs=1000000 CORPUS_COPY
FUZZ_GRPC_SRCS := tests/fuzz/fuzz_grpc.c tests/fuzz/grpc_stub_service.c src/api/kserve_grpc.c \
                  src/api/kserve_grpc_codec.c src/api/kserve.c src/net/http2.c src/net/listen.c \
                  src/gpu/pinned.c src/server/access.c \
                  $(sort $(wildcard src/core/*.c))
.PHONY: fuzz-grpc
fuzz-grpc: $(BUILD)/fuzz_grpc
$(BUILD)/fuzz_grpc: $(FUZZ_GRPC_SRCS) $(GEN_SRCS) $(wildcard include/*.h src/core/*.h src/api/*.h src/net/http2.h)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -I$(BUILD)/gen -o $@ $(FUZZ_GRPC_SRCS) $(GEN_SRCS) \
	  -lnghttp2 -lprotobuf-c -lcjson -luv -lm -lpthread

# the C and CUDA sources clang-format owns (generated protobuf-c code lives under $(BUILD)/gen and
# is never formatted; a stray copy in the tree is left out too). CLANG_FORMAT: Debian 12's is 14.
CLANG_FORMAT ?= clang-format
FORMAT_SRCS = $(shell find include src tests bench \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' \) \
                ! -name '*.pb-c.[ch]' | sort)
format:
	$(CLANG_FORMAT) -i $(FORMAT_SRCS)

# fails (and names each file and line) when a source is not as `make format` would leave it
format-check:
	@$(CLANG_FORMAT) --version
	$(CLANG_FORMAT) --dry-run -Werror $(FORMAT_SRCS)

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --suppress=missingIncludeSystem --inline-suppr -Iinclude -Isrc src tests bench

clean:
	rm -rf build build-*

-include $(OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(TEST_OBJS:.o=.d) $(CU_OBJS:.o=.d)
