# tgr-pipeline: every install step lives here, so a fresh clone needs only `make build-tdi` / `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# CPU build of torch (a CUDA build is several GB); override e.g. TORCH_SPEC='torch' on a GPU box.
TORCH_SPEC ?= torch==2.13.0
# Downloads and builds that outlive a clone (the llama.cpp wheel, GGUF models).
TGR_CACHE_DIR ?= $(HOME)/.cache/tgr-pipeline
export TGR_CACHE_DIR
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false

# Embedded LLM server (docs/embedded-llm.md). Default: xllamacpp, a prebuilt wheel holding llama.cpp's
# own C++ HTTP server (portable AVX2 build: no compile, no AMX crash); keep the pin equal to the `llm`
# extra in pyproject.toml. Fallback, taken when xllamacpp does not install or import here, or forced
# with `rm -f .venv/.llm-installed && make setup-llm LLAMA_BACKEND=llama-cpp-python`: llama-cpp-python
# built from source (~10 minutes on 2 cores, wheel cached in LLAMA_WHEEL_DIR; it replaces xllamacpp).
# llama-cpp-python only ships an sdist; its native build crashes on these CPUs (AMX), so pin flags.
LLAMA_BACKEND ?= xllamacpp
LLAMA_XLLAMACPP := xllamacpp==2026.10.11549
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
LLAMA_WHEEL_DIR := $(TGR_CACHE_DIR)/wheels
# Empty: the flow's default (BuildTDIConfig.embedded_model, models.embedded_llm.catalog.DEFAULT_MODEL).
LLM_MODEL ?=

# Every default lives in the flows' config dataclasses (python -m flows.<flow> --help); the Makefile
# passes overrides only. build-tdi's defaults: a small dataset from the stdlib on the embedded LLM.
BUILD_TDI_ARGS ?=
# Mined TDI (no LLM): data-flow pairs from the stdlib + this venv's site-packages (docs/mining.md).
# The folder train-discriminator depends on; mine-tdi is told to write there (its default folder too).
MINED_TDI := artifacts/tdi/tdi-mined
MINE_ARGS ?=
# Discriminator: pretraining shards (the mined TDI, made on first use; or any build-tdi dataset, or
# auto = newest published under artifacts/tdi), finetune/test tool sets from ../shared/data/benchmarks
# (or tool-set folders, docs/toolsets.md). Empty BASE_MODEL, FINETUNE, TEST_SET: the flow's defaults
# (offline-minilm; ultratool,tmdb; apibank: python -m flows.train_discriminator --help).
TDI_DATA ?= $(MINED_TDI)
BASE_MODEL ?=
RUN ?= minilm
FINETUNE ?=
TEST_SET ?=
TRAIN_ARGS ?=
GRAPH_ARGS ?=
TOOLSETS ?= apibank,ultratool,tmdb,toolbench_stable
DISCRIMINATOR ?= artifacts/discriminator/$(RUN)/best
# Dependency retriever (make train-retriever): build-graph's 'retrieval' pruning encoder once it exists.
RETRIEVER ?= artifacts/retriever/dependency-retriever/best
RETRIEVER_ARGS ?=
WAREHOUSE ?= artifacts/warehouse/tgr.duckdb
# make sql: e.g. SQL_ARGS='-c "SELECT * FROM graph_density"' (one statement, then exit) or --write
PREFECT_PORT ?= 4200
# pytest-xdist processes for make test: the suite waits on servers and child processes much of the time,
# so 2 workers on 2 cores take it from 4 min 53 s to 2 min 47 s (bench/RESULTS.md, "Test suite").
TEST_WORKERS ?= 2
PREFECT_API := http://127.0.0.1:$(PREFECT_PORT)/api
PREFECT_RUN_DIR := artifacts/prefect

.PHONY: help setup setup-llm setup-ray fetch-llm build-tdi mine-tdi test test-fast train-discriminator train-retriever graph graph-gold sql eval-retrieval gtool bench prefect-up prefect-down deploy clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

setup: $(VENV)/.installed  ## create .venv with the project and its dev tools

$(VENV)/.llm-installed: $(VENV)/.installed
	@set -e; \
	if [ "$(LLAMA_BACKEND)" = xllamacpp ]; then \
	  if $(BIN)/pip install -q "$(LLAMA_XLLAMACPP)" && \
	     $(PY) -c 'import xllamacpp as x; print("xllamacpp", x.__version__, "|", x.get_system_info().strip())'; then \
	    echo xllamacpp > $@; exit 0; \
	  fi; \
	  echo "WARNING: $(LLAMA_XLLAMACPP) does not install or import on this machine (see above);" \
	    "falling back to llama-cpp-python $(LLAMA_CPP_VERSION) built from source"; \
	elif [ "$(LLAMA_BACKEND)" != llama-cpp-python ]; then \
	  echo "LLAMA_BACKEND must be xllamacpp or llama-cpp-python, not '$(LLAMA_BACKEND)'"; exit 2; \
	fi; \
	mkdir -p "$(LLAMA_WHEEL_DIR)"; \
	if ! ls "$(LLAMA_WHEEL_DIR)"/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "building llama-cpp-python $(LLAMA_CPP_VERSION) from source (about 10 minutes on 2 cores, once per machine)"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel -q --no-deps --no-cache-dir "llama-cpp-python==$(LLAMA_CPP_VERSION)" -w "$(LLAMA_WHEEL_DIR)"; \
	fi; \
	$(BIN)/pip install -q "$$(ls "$(LLAMA_WHEEL_DIR)"/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl | head -1)[server]" "fastapi>=0.139,<0.151"; \
	$(BIN)/pip uninstall -q -y xllamacpp 2>/dev/null || true; \
	echo llama-cpp-python > $@

setup-llm: $(VENV)/.llm-installed  ## install the embedded llama.cpp server (prebuilt xllamacpp; LLAMA_BACKEND)

setup-ray: setup  ## install the optional Ray engine (build-tdi --task-runner ray: prefect-ray, ray)
	$(BIN)/pip install -q -e ".[dev,ray]"

fetch-llm: setup-llm  ## fetch and verify the embedded model (LLM_MODEL: default the flow's embedded model)
	$(PY) -m models.embedded_llm fetch $(if $(LLM_MODEL),--model $(LLM_MODEL))

build-tdi: fetch-llm  ## main job: build a small TDI dataset from the stdlib on the embedded LLM
	$(PY) -m flows.build_tdi $(if $(LLM_MODEL),--embedded-model $(LLM_MODEL)) $(BUILD_TDI_ARGS)

test: setup-llm  ## run the test suite
	$(PY) -m models.embedded_llm fetch --model smollm2-135m
	$(BIN)/pytest -q -n $(TEST_WORKERS)

test-fast: setup  ## tests without the slow end-to-end flow runs
	$(BIN)/pytest -q -n $(TEST_WORKERS) -m "not slow"

mine-tdi: setup  ## mine TDI dependency pairs from Python code, no LLM (minutes)
	$(PY) -m flows.mine_tdi --output-root $(patsubst %/,%,$(dir $(MINED_TDI))) --dataset $(notdir $(MINED_TDI)) $(MINE_ARGS)

$(MINED_TDI)/manifest.json:
	$(MAKE) mine-tdi

train-discriminator: setup $(if $(filter $(MINED_TDI),$(TDI_DATA)),$(MINED_TDI)/manifest.json)  ## mined TDI (if missing) -> pretrain -> finetune -> calibrate -> parameter level -> test
	$(PY) -m flows.train_discriminator --pretrain-data $(TDI_DATA) $(if $(FINETUNE),--finetune $(FINETUNE)) $(if $(TEST_SET),--test $(TEST_SET)) $(if $(BASE_MODEL),--base-model $(BASE_MODEL)) --output artifacts/discriminator/$(RUN) $(TRAIN_ARGS)

train-retriever: setup $(if $(filter $(MINED_TDI),$(TDI_DATA)),$(MINED_TDI)/manifest.json)  ## mined TDI (if missing) -> dependency retriever + parameter head (bi-encoder; docs/retriever.md)
	$(PY) -m flows.train_retriever --tdi $(TDI_DATA) --output $(patsubst %/,%,$(dir $(RETRIEVER))) $(RETRIEVER_ARGS)

graph: setup  ## score tool pairs and build the DuckDB tool-graph warehouse (with the trained retriever, if any)
	$(PY) -m flows.build_graph --toolset $(TOOLSETS) --discriminator $(DISCRIMINATOR) --warehouse $(WAREHOUSE) $(if $(wildcard $(RETRIEVER)/config.json),--retrieval-encoder $(RETRIEVER)) $(GRAPH_ARGS)

graph-gold: setup  ## warehouse with the gold (manual) and parameter-match (schema) edges, no discriminator
	$(PY) -m flows.build_graph --toolset $(TOOLSETS) --no-discriminator --warehouse $(WAREHOUSE) $(GRAPH_ARGS)

sql: setup  ## SQL shell on the warehouse (WAREHOUSE; read-only; the duckdb package's own engine, docs/warehouse.md)
	$(PY) -m warehouse.shell $(WAREHOUSE) $(SQL_ARGS)

eval-retrieval: setup  ## Recall/NDCG/Pass Rate@5/10 for BM25, TF-IDF, embeddings, +TGR
	$(PY) -m flows.eval_retrieval --warehouse $(WAREHOUSE)

gtool: setup  ## GTool on CPU: robustness curve, tool selection, predicted edges -> warehouse (docs/gtool.md)
	$(PY) -m flows.gtool --warehouse $(WAREHOUSE) $(GTOOL_ARGS)

bench: setup  ## run the benchmarks (results: bench/RESULTS.md)
	$(PY) -m bench.bench_llm_throughput
	$(PY) -m bench.bench_balance_shards
	$(PY) -m bench.bench_train_throughput
	$(PY) -m bench.bench_graph
	@if [ -f $(WAREHOUSE) ]; then $(PY) -m bench.bench_rerank --warehouse $(WAREHOUSE); \
	 else echo "bench_rerank skipped: no $(WAREHOUSE) (run make graph first)"; fi

prefect-up: setup-llm  ## start a local Prefect server + worker and register the deployments
	@mkdir -p $(PREFECT_RUN_DIR)
	@# each service in its own process group, recorded in a pid file: prefect-down stops it and what it started
	@if ! curl -sf $(PREFECT_API)/health >/dev/null; then \
	  $(PY) -m tasks.common.services start $(PREFECT_RUN_DIR)/server.pid $(PREFECT_RUN_DIR)/server.log -- \
	    $(BIN)/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT); \
	  for i in $$(seq 90); do curl -sf $(PREFECT_API)/health >/dev/null && break; sleep 1; done; \
	fi
	@curl -sf $(PREFECT_API)/health >/dev/null || (echo "Prefect server did not start; see $(PREFECT_RUN_DIR)/server.log" && exit 1)
	@# project-local, not the user's global profile: Prefect reads ./.env when run from this folder
	@touch .env && sed -i '/# tgr-pipeline prefect-up$$/d' .env && echo 'PREFECT_API_URL=$(PREFECT_API)  # tgr-pipeline prefect-up' >> .env
	$(MAKE) deploy
	@PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) -m tasks.common.services start $(PREFECT_RUN_DIR)/worker.pid \
	  $(PREFECT_RUN_DIR)/worker.log -- $(BIN)/prefect worker start --pool tgr-local --type process
	@echo "Prefect UI: http://127.0.0.1:$(PREFECT_PORT)  (worker log: $(PREFECT_RUN_DIR)/worker.log)"
	@echo "Run:  $(BIN)/prefect deployment run build-tdi/stdlib-demo"

deploy:  ## register the deployments in prefect.yaml with the running server
	PREFECT_API_URL=$(PREFECT_API) $(BIN)/prefect work-pool create tgr-local --type process --overwrite >/dev/null
	PREFECT_API_URL=$(PREFECT_API) TGR_REPO=$(CURDIR) $(BIN)/prefect --no-prompt deploy --all

prefect-down:  ## stop the worker and server started by prefect-up (plain runs go back to a temporary server)
	@# the worker first, waited for (SIGTERM, then SIGKILL after 10 s), then the server: a worker left running
	@# retries the stopped server for minutes (tests/test_services.py)
	-@for p in worker server; do $(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m tasks.common.services stop $(PREFECT_RUN_DIR)/$$p.pid; done
	-@[ -f .env ] && sed -i '/# tgr-pipeline prefect-up$$/d' .env && { [ -s .env ] || rm -f .env; }; true

clean:  ## remove run outputs (keeps .venv and the model cache)
	rm -rf artifacts .pytest_cache
