# rlmesh: the commands a newcomer types, and the ones CI runs (.ci/run).
#   make demo         .venv with torch (CPU build where there is no GPU) and rlmesh's core
#                     dependencies only, then PPO on CartPole (install-core)
#   make install      the same plus every extra and the test tools (what make test uses)
#   make test         unit + conformance + integration + cluster tests
#   make conformance  RLlib's tuned examples to their own stop (a benchmark, not CI)
#   make wheel-check  build the wheel, install it in a fresh venv, import it from outside the repo
#   make gpu-check    every algorithm with a CUDA learner, and what a device can break (tests/gpu)
#   make docs         the docs site (mkdocs.yml) built with --strict into site/

PY ?= python3
VENV ?= .venv
WHEEL_VENV ?= build/wheel-venv
PYTHON := $(VENV)/bin/python
PIP := $(PYTHON) -m pip
# Test folders that exist: git keeps no empty folder, and pytest stops on a missing path.
TEST_DIRS := $(wildcard tests/unit tests/conformance tests/integration tests/cluster)

.PHONY: venv install install-core test test-unit bench scale conformance demo runtime-demo wheel-check gpu-check docs clean

# $(call make-venv,DIR): reuse a torch the base python already has (--system-site-packages),
# so no second copy is downloaded; else a plain venv.
define make-venv
	@if $(PY) -c 'import torch' >/dev/null 2>&1; then \
		echo "venv: $(PY) already has torch; creating $(1) with --system-site-packages"; \
		$(PY) -m venv --system-site-packages $(1); \
	else \
		echo "venv: creating $(1)"; \
		$(PY) -m venv $(1); \
	fi
endef

venv: $(PYTHON)
$(PYTHON):
	$(call make-venv,$(VENV))

# pip is not upgraded on purpose: the index may be unreachable offline. The stamp lives in
# the venv, so a new venv, or a change to the dependencies, installs again.
# install-core: torch and rlmesh's own dependencies, what `make demo` needs. install: that plus
# every extra and the test tools, what `make test` needs.
install-core: $(VENV)/.installed-core
$(VENV)/.installed-core: $(PYTHON) pyproject.toml deploy/ensure_torch.py
	$(PYTHON) deploy/ensure_torch.py
	$(PIP) install -e .
	touch $@

install: $(VENV)/.installed
$(VENV)/.installed: $(VENV)/.installed-core
	$(PIP) install -e '.[test]'
	touch $@

# RLMESH_CHECK_DEVICES: every CPU learner the tests start runs under torch's 'meta' default
# device, so a tensor made without device= fails here as it would on a GPU (CI has none).
# tests/run_tests.py runs pytest and, if it dies by a signal, ends with the test and stack.
test: install
	RLMESH_CHECK_DEVICES=1 $(PYTHON) -m tests.run_tests -q --durations=20 $(TEST_DIRS)

test-unit: install
	$(PYTHON) -m pytest -q tests/unit

bench: install
	$(PYTHON) -m tests.benchmarks.run

# The swarm (tests/scale, issue 50): simulated runners on the real control plane, N x model MB and fragment-rate sweeps, tables to build/scale.md (a benchmark, not CI).
scale: install
	$(PYTHON) -m tests.scale.swarm --local --sweep n-model --out build/scale.md && $(PYTHON) -m tests.scale.swarm --local --sweep rate -n 100 --out build/scale.md

# RLlib's tuned examples as conformance files (tests/conformance/files): each CartPole and
# Pendulum file trained to its own stop within its own budget, one table (docs/rllib.md).
# With RLlib's venv (make .venv-rllib/.installed) RLlib runs the same files beside it.
conformance: install
	$(PYTHON) -m tests.benchmarks.bench_conformance

# On a machine with CUDA: the suite of tests/gpu/cases.py, several cases at a time, one table.
# Without CUDA it says so and exits 0 (`python -m tests.gpu.run --cpu-check` runs it on the
# CPU). On a machine with rlmesh installed by hand and no venv: make gpu-check GPU_PYTHON=python3
GPU_PYTHON ?= $(PYTHON)
gpu-check:
	$(GPU_PYTHON) -m tests.gpu.run

# The main job: PPO learns CartPole-v1 with 2 env-runner processes (the tuned example
# shipped in rlmesh/tuned_examples), results under ~/rlmesh_results.
demo: install-core
	$(VENV)/bin/rlmesh train -f cartpole-ppo.yaml --checkpoint-at-end

# The runtime alone: actor processes streaming arrays, one killed and restarted.
runtime-demo: install-core
	$(VENV)/bin/rlmesh demo

# The wheel must work on its own: installed in a fresh venv and imported from outside
# the repo, so nothing is found through the source tree or the working directory.
wheel-check: venv
	@# a stale build/lib would carry deleted modules into the wheel
	rm -rf build dist
	$(PIP) wheel --no-deps -w dist .
	$(call make-venv,$(WHEEL_VENV))
	$(WHEEL_VENV)/bin/python deploy/ensure_torch.py
	$(WHEEL_VENV)/bin/python -m pip install dist/rlmesh-*.whl
	@# quoted, and the venv's path from the shell: a clone's path may hold spaces (make's
	@# abspath splits on them)
	wv="$$(cd "$(WHEEL_VENV)" && pwd)" && cd / && "$$wv/bin/python" "$(CURDIR)/deploy/check_wheel.py" "$(CURDIR)" "$(CURDIR)"/dist/rlmesh-*.whl
	wv="$$(cd "$(WHEEL_VENV)" && pwd)" && cd / && "$$wv/bin/rlmesh" --help
	@echo "wheel-check: OK"

# The docs site: README and docs/ as pages, the API reference from the docstrings (mkdocstrings),
# search. --strict: a broken link or anchor, a page left out of the nav, or an API entry naming
# a missing object fails the build. The docs extra comes after install-core, so torch is
# already in place (a CPU build where there is no GPU). NO_MKDOCS_2_WARNING: material 9.x
# prints a banner about its successor on every build.
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
$(VENV)/.installed-docs: $(VENV)/.installed-core
	$(PIP) install -e '.[docs]'
	touch $@

# Keeps $(VENV); `rm -rf $(VENV)` for a fresh one.
clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

# The peers of the PPO benchmarks: stable-baselines3 (tests/benchmarks/peer_sb3.py; with
# sb3-contrib, RecurrentPPO for bench_recurrent: peer_sb3_recurrent.py) and
# RLlib (tests/benchmarks/peer_rllib.py), each in a venv of its own, so neither shapes
# rlmesh's dependencies nor the other's (ray pins its own). ensure_torch first: left to
# itself, pip would pull a CUDA torch of several GB. Without them, `make bench` still runs;
# the PPO rows then show rlmesh's side alone, or RLlib's figures as quoted in the issue.
PEERS_VENV ?= .venv-peers
RLLIB_VENV ?= .venv-rllib
RLLIB_SPEC ?= ray[rllib]==2.60.0
# Sample Factory, the Atari benchmark's APPO peer (tests/benchmarks/peer_sf_atari.py): 2.1.1
# runs on gymnasium < 1.0 and numpy < 2; ale-py 0.9.1 ships the ROMs for those.
SF_VENV ?= .venv-sf
SF_SPEC ?= sample-factory==2.1.1
# PufferLib, the vector-env peer of the CartPole benchmark (tests/benchmarks/peer_puffer.py):
# 2.0.2 is the newest with a wheel (3.0 is an sdist whose build fetches Raylib from GitHub);
# it pins numpy 1.23, gymnasium 0.29.1 and gym 0.23 itself. Its trainer (clean_pufferl.py)
# and configs are in neither the wheel nor the sdist: peer_puffer.py drives PufferLib's
# vectorization, env and policy with a PPO loop of our own.
PUFFER_VENV ?= .venv-puffer
PUFFER_SPEC ?= pufferlib==2.0.2
.PHONY: bench-peers
bench-peers: $(PEERS_VENV)/.installed $(RLLIB_VENV)/.installed $(SF_VENV)/.installed $(PUFFER_VENV)/.installed
$(PEERS_VENV)/.installed: deploy/ensure_torch.py
	$(PY) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python deploy/ensure_torch.py
	$(PEERS_VENV)/bin/pip install stable-baselines3 sb3-contrib gymnasium box2d pygame 'mujoco>=3.1,<4' imageio packaging  # box2d, pygame: LunarLander; mujoco, imageio, packaging: the MuJoCo v5 envs (gymnasium[mujoco]'s list)
	touch $@
$(RLLIB_VENV)/.installed: deploy/ensure_torch.py
	$(PY) -m venv $(RLLIB_VENV)
	$(RLLIB_VENV)/bin/python deploy/ensure_torch.py
	$(RLLIB_VENV)/bin/pip install '$(RLLIB_SPEC)' psutil pillow ale-py opencv-python-headless  # pillow: RLlib 2.60 imports PIL on build(); ale-py, opencv: Pong and RLlib's Atari wrappers
	touch $@
$(SF_VENV)/.installed: deploy/ensure_torch.py
	$(PY) -m venv $(SF_VENV)
	$(SF_VENV)/bin/python deploy/ensure_torch.py
	$(SF_VENV)/bin/pip install '$(SF_SPEC)' 'gymnasium<1.0' 'numpy<2' 'ale-py==0.9.1'
	touch $@
$(PUFFER_VENV)/.installed: deploy/ensure_torch.py
	$(PY) -m venv $(PUFFER_VENV)
	$(PUFFER_VENV)/bin/python deploy/ensure_torch.py
	$(PUFFER_VENV)/bin/pip install --only-binary=pufferlib '$(PUFFER_SPEC)'  # the wheel: the sdist's build downloads Raylib
	touch $@
