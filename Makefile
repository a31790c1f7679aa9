# The two commands of the README are `make book` and `make test`; both bootstrap .venv.
# Every target installs what it needs itself (idempotent: a stamp file skips the install
# when requirements.txt and pyproject.toml have not changed).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NB     ?= $(wildcard book/[0-9]*.ipynb)
NBTEST ?=
# Where pip takes torch from before requirements.txt: empty for PyPI (on Linux the CUDA build);
# https://download.pytorch.org/whl/cpu for the CPU build (README, "Requirements").
TORCH_INDEX ?=

# Stable hashing (set order) and one thread for torch/BLAS: the stored outputs are
# bit-reproducible under these settings (see the book's preface).
export PYTHONHASHSEED := 0
export OMP_NUM_THREADS := 1

.PHONY: help venv book test test-package test-notebooks test-book execute lab lint clean

help:
	@echo "make book     build the HTML book into _build/html (from the stored outputs)"
	@echo "make test     ruff, package tests + nbval on every notebook + the book build"
	@echo "make execute  re-execute notebooks in place (NB=book/04_attention.ipynb for one)"
	@echo "make lab      open the notebooks in JupyterLab"
	@echo "make lint     ruff on the package, tests and notebooks"

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing pinned requirements into $(VENV) (first time: about a minute)"
	@if [ -n "$(TORCH_INDEX)" ]; then $(BIN)/python -m pip install --quiet --disable-pip-version-check \
		"$$(grep '^torch==' requirements.txt)" --index-url "$(TORCH_INDEX)"; fi
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt 2>&1 \
		| grep -v "is ignored: it is neither a file nor a directory" || true
	@$(BIN)/python -m pip check >/dev/null || { $(BIN)/python -m pip check; exit 1; }
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . 2>&1 \
		| grep -v "is ignored: it is neither a file nor a directory" || true
	@$(BIN)/python -c "import mini_transformer, torch, numpy; print('mini_transformer', mini_transformer.__version__, '| torch', torch.__version__, '| numpy', numpy.__version__)"
	@touch $(STAMP)

book: $(STAMP)
	@$(BIN)/jupyter-book build -W -n --keep-going --quiet . 
	@echo "Book built: file://$(CURDIR)/_build/html/index.html"

test: lint test-package test-notebooks test-book

# --doctest-modules: the examples in the docstrings are tests too. -n logical: one pytest-xdist
# worker per core (each test is independent; OMP_NUM_THREADS=1 keeps a worker to its core).
test-package: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -q -n logical --doctest-modules mini_transformer tests/

# The chapters as a Colab reader runs them: the package installed from its wheel, each chapter
# alone in an empty folder outside the repository; nbval (stored outputs reproduce) and the
# run-every-cell-twice check side by side on the two cores (tools/test_notebooks.py).
test-notebooks: $(STAMP)
	$(BIN)/python tools/test_notebooks.py $(NBTEST)

test-book: book

execute: $(STAMP)
	$(BIN)/python tools/execute_notebooks.py $(NB)

lab: $(STAMP)
	$(BIN)/jupyter lab book/

# One formatter: `ruff format`, checked on every Python file of the package, tests, tools
# and benchmarks.
FORMATTED := mini_transformer tests tools benchmarks

lint: $(STAMP)
	$(BIN)/ruff check mini_transformer tests tools benchmarks book
	$(BIN)/ruff format --check $(FORMATTED)

clean:
	rm -rf _build
