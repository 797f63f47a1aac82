#!/usr/bin/env bash
# Writes the Python stubs for protos/ into libs/stubs/.
# buf resolves and compiles the protos into an image; grpc_tools turns the image
# into _pb2.py, _pb2.pyi and _pb2_grpc.py. The google/api protos come from the
# vendored copy in third_party/googleapis (from the googleapis-common-protos wheel), so no network
# registry is involved.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
BUF=${BUF:-.venv/bin/buf}

# The googleapis protos are vendored (committed) in third_party/googleapis; they must equal those of
# the installed googleapis-common-protos wheel, so the Python runtime and the contracts agree.
site=$("$PY" -c 'import google.api, os; print(os.path.dirname(os.path.dirname(google.api.__path__[0])))')
for f in $(cd third_party/googleapis && find google -name '*.proto' | sort); do
  if ! cmp -s "third_party/googleapis/$f" "$site/$f"; then
    echo "gen: third_party/googleapis/$f differs from the installed googleapis-common-protos wheel" >&2
    exit 1
  fi
done

image=$(mktemp --suffix=.binpb)
trap 'rm -f "$image"' EXIT
"$BUF" build -o "$image" --as-file-descriptor-set
files=$(cd protos && find mesh -name '*.proto' | sort)

rm -rf libs/stubs/mesh
mkdir -p libs/stubs
# shellcheck disable=SC2086
"$PY" -m grpc_tools.protoc --descriptor_set_in="$image" \
  --python_out=libs/stubs --pyi_out=libs/stubs --grpc_python_out=libs/stubs $files
# Packages for every generated directory.
find libs/stubs/mesh -type d -exec touch {}/__init__.py \;
# The image is kept for the REST front and reflection of the google.api options.
