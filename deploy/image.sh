#!/bin/sh
# The build steps both images share, run inside their build stage (deploy/Dockerfile: CPU torch;
# deploy/Dockerfile.gpu: the CUDA torch of PyPI). One step per layer, so that a code change
# reinstalls nothing:
#   sh deploy/image.sh deps      # /opt/venv with torch (TORCH_INDEX_URL, TORCH_LOCAL_VERSION),
#                                # then the run-time set (deploy/requirements-runtime.txt)
#   sh deploy/image.sh project   # the mesh itself (/src), an import check, the int8 encoder,
#                                # the Connect Four networks' ONNX graphs (/src/models)
#   sh deploy/image.sh prune     # what no service runs: pip, test suites, C++ headers, test binaries
# Reads TORCH_INDEX_URL, TORCH_LOCAL_VERSION, PIP_EXTRA_ARGS (word-split: "--find-links /wheels")
# and, for `project`, EXPECT_TORCH ("cpu" or "cuda": which torch build must have been installed).
set -eu
PIP_EXTRA_ARGS=${PIP_EXTRA_ARGS:-}
venv=/opt/venv
site=$venv/lib/python3.11/site-packages

deps() {
  python -m venv "$venv"
  grep '^torch==' /src/deploy/requirements-runtime.txt | sed "s/\$/${TORCH_LOCAL_VERSION}/" \
    > /tmp/torch.txt
  # shellcheck disable=SC2086 # PIP_EXTRA_ARGS is a list of options
  "$venv/bin/pip" install ${PIP_EXTRA_ARGS} --extra-index-url "${TORCH_INDEX_URL}" -r /tmp/torch.txt
  # shellcheck disable=SC2086
  "$venv/bin/pip" install ${PIP_EXTRA_ARGS} -r /src/deploy/requirements-runtime.txt
}

project() {
  # shellcheck disable=SC2086
  "$venv/bin/pip" install ${PIP_EXTRA_ARGS} --no-deps /src
  # The build fails here, not at run time, when a service's code cannot import or the wrong torch
  # build came in (a CPU wheel from a local wheelhouse in the CUDA image, or the other way round).
  "$venv/bin/python" - "${EXPECT_TORCH}" <<'PY'
import sys
import mesh.orchestrator.v1.orchestrator_service_pb2  # noqa: F401
import services.mcts.rollout.engine  # noqa: F401
import torch
cuda = torch.version.cuda
if (sys.argv[1] == "cuda") != (cuda is not None):
    sys.exit(f"expected {sys.argv[1]} torch, got torch {torch.__version__} (CUDA {cuda})")
print(f"torch {torch.__version__}, CUDA {cuda}")
PY
  # Retrieval's int8 ONNX encoder (RETRIEVAL_ONNX_PATH's default, relative to /app), from the
  # packaged weights; without it retrieval falls back to torch.
  (cd /tmp && HF_HUB_OFFLINE=1 "$venv/bin/mcts-mesh" models export-embedder \
     --output /opt/embedder/all-MiniLM-L6-v2-int8.onnx)
  # The neural service's graph cache (NEURAL_GRAPH_CACHE_DIR's default, relative to /app): with it
  # a container's first start serves the Connect Four networks before torch is imported.
  (cd /tmp && "$venv/bin/mcts-mesh" models cache-graphs --models-dir /src/models \
     --output /opt/graphs)
}

prune() {
  # pip installs nothing at run time (setuptools stays: torch.utils.cpp_extension imports it).
  "$venv/bin/python" -m pip uninstall --yes --quiet pip
  # Packages' own test suites (never imported by the services; `testing` helper packages stay),
  # torch's C++ headers, CMake files and C++ test binaries (torch_shm_manager stays).
  find "$site" -type d -name tests -prune -exec rm -rf {} +
  rm -rf "$site/torch/test" "$site/torch/include" "$site/torch/share" "$site/onnx/backend/test"
  find "$site/torch/bin" -mindepth 1 ! -name torch_shm_manager -exec rm -rf {} +
}

"$1"
