#!/usr/bin/env bash
# buf breaking: the protos of the working tree against those of the previous commit of main.
# The previous commit is checked out into a temporary worktree and given the same google/api protos,
# so both sides build offline.
set -euo pipefail
cd "$(dirname "$0")/.."
BUF=${BUF:-.venv/bin/buf}
against=${1:-HEAD~1}
if ! git rev-parse --verify --quiet "$against" >/dev/null; then
  echo "breaking: no commit $against; nothing to compare"; exit 0
fi
if ! git ls-tree -r --name-only "$against" -- protos | grep -q '\.proto$'; then
  echo "breaking: $against has no protos; nothing to compare"; exit 0
fi
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/prev" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach "$tmp/prev" "$against" >/dev/null 2>&1
# Commits before the googleapis protos were vendored lack them: give them today's copy.
if [ ! -d "$tmp/prev/third_party/googleapis" ]; then
  mkdir -p "$tmp/prev/third_party"
  cp -r third_party/googleapis "$tmp/prev/third_party/"
fi
(cd "$tmp/prev" && "$OLDPWD/$BUF" build -o "$tmp/prev.binpb")
# Both sides as single images (the workspace has two modules; an image has one), with the rules
# of buf.yaml's breaking section.
"$BUF" build -o "$tmp/current.binpb"
"$BUF" breaking "$tmp/current.binpb" --against "$tmp/prev.binpb" \
  --config '{"version":"v2","breaking":{"use":["FILE"]}}'
echo "breaking: no breaking change against $against"
