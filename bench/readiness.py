"""How long each service takes from process start to SERVING, with numba's cache cold and warm,
and how long the launcher takes to bring the whole mesh up.

    .venv/bin/python bench/readiness.py [--starts 10] [--services NAME ...] [--no-mesh] [--json]
    .venv/bin/python bench/readiness.py --quick      # one cold start of each service, no mesh

One start is `mcts-mesh serve NAME --port-file F` (as the launcher, compose and Kubernetes start
a service), timed from just before the process is spawned until its port file appears: the
service writes it once its health reports SERVING (libs/server.py), after its `ready()` hook
(the mcts service loads or compiles its numba kernels; neural loads its models; retrieval opens
its store and encoder). The service is then stopped with SIGTERM before the next start.

- cold: every start gets a new, empty NUMBA_CACHE_DIR (and neural a new, empty ONNX graph cache:
  a first start, a new pod);
- warm: one untimed start fills a NUMBA_CACHE_DIR (and neural's graph cache), then every timed
  start reuses it (a restart with the caches kept: the same container, or a cache volume).
Other caches (the OS page cache of the Python packages and models) are warm in both: this
machine cannot drop them.

The mesh row times `launcher.start_mesh` (all five services, free loopback ports, no REST front)
until the orchestrator is SERVING, with the warm numba cache.

Each row gives the median, min and max seconds over its starts and the median CPU seconds (user +
system, from /proc) the process used until SERVING, which depends much less on the shared
machine's load than the wall time; `--json` prints them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import procstat  # noqa: E402 - bench/ on the path first

SERVICES = ("mcts", "neural", "retrieval", "llm", "orchestrator")
START_TIMEOUT_S = 300.0
"""Seconds a start may take before the bench gives up on it."""


def service_env(name: str, cache_dir: Path, work: Path) -> dict[str, str]:
    """The environment of one start of `name`: free ports, a numba cache, a scratch store."""
    from libs.services import BY_NAME

    prefix = BY_NAME[name].env_prefix
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), f"{prefix}PORT": "0",
           f"{prefix}HOST": "127.0.0.1"}
    if name == "neural":  # its ONNX graph cache is cold or warm with numba's
        env["NEURAL_GRAPH_CACHE_DIR"] = str(cache_dir / "onnx-graphs")
    if name == "retrieval":
        env["RETRIEVAL_DATA_DIR"] = str(work / "retrieval-data")
    if name == "orchestrator":
        env["ORCHESTRATOR_REST_PORT"] = "-1"
    return env


def time_start(name: str, cache_dir: Path, work: Path) -> tuple[float, float]:
    """Seconds from spawning `mcts-mesh serve name` to its port file (SERVING), and the CPU
    seconds (user + system) the process used by then; stops it after.

    Raises:
        RuntimeError: the service exited or was not SERVING within START_TIMEOUT_S.
    """
    port_file, log_path = work / f"{name}.json", work / f"{name}.log"
    port_file.unlink(missing_ok=True)
    with log_path.open("w") as log:
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "mcts_mesh.cli", "serve", name, "--port-file", str(port_file)],
            cwd=REPO, env=service_env(name, cache_dir, work), stdout=log,
            stderr=subprocess.STDOUT)
    try:
        while not port_file.exists():
            if process.poll() is not None or time.perf_counter() - started > START_TIMEOUT_S:
                raise RuntimeError(f"{name} did not start:\n{log_path.read_text()[-2000:]}")
            time.sleep(0.005)
        seconds = time.perf_counter() - started
        cpu = procstat.cpu_seconds(process.pid)
        if "grpc" not in json.loads(port_file.read_text()):
            raise RuntimeError(f"{name} did not start: {port_file.read_text()}")
        return seconds, cpu
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def time_mesh(cache_dir: Path, work: Path) -> float:
    """Seconds `launcher.start_mesh` takes to bring all five services to SERVING."""
    from mcts_mesh.launcher import start_mesh

    started = time.perf_counter()
    mesh = start_mesh(port_base=0, rest_port=None, log_dir=work / "mesh-logs",
                      env={"NUMBA_CACHE_DIR": str(cache_dir),
                           "NEURAL_GRAPH_CACHE_DIR": str(cache_dir / "onnx-graphs"),
                           "RETRIEVAL_DATA_DIR": str(work / "mesh-retrieval")})
    seconds = time.perf_counter() - started
    mesh.stop()
    return seconds


def summary(label: str, mode: str, times: list[float], cpu: list[float] | None = None) -> dict:
    """One row: median, min and max seconds of `times`, and the median CPU seconds of `cpu`."""
    return {"what": label, "cache": mode, "starts": len(times),
            "median_s": round(statistics.median(times), 2), "min_s": round(min(times), 2),
            "max_s": round(max(times), 2),
            "cpu_s": round(statistics.median(cpu), 2) if cpu else None}


def starts(name: str, count: int, cache_dir_of, work: Path) -> tuple[list[float], list[float]]:
    """`count` timed starts of `name`, each with the cache folder `cache_dir_of()` gives."""
    runs = [time_start(name, cache_dir_of(), work) for _ in range(count)]
    return [wall for wall, _ in runs], [cpu for _, cpu in runs]


def measure(args, work: Path) -> list[dict]:
    """The rows the arguments ask for (see the module doc)."""
    rows = []
    warm_dir = work / "numba-warm"
    for name in args.services:
        if not args.no_cold:
            rows.append(summary(name, "cold", *starts(
                name, args.starts,
                lambda: Path(tempfile.mkdtemp(dir=work, prefix="numba-cold-")), work)))
            print(rows[-1], flush=True)
        if not args.no_warm:
            time_start(name, warm_dir, work)  # fills the cache; not timed
            rows.append(summary(name, "warm", *starts(name, args.starts, lambda: warm_dir,
                                                      work)))
            print(rows[-1], flush=True)
    if args.mesh:
        time_mesh(warm_dir, work)  # fills the cache for every service; not timed
        rows.append(summary("mesh (launcher)", "warm",
                            [time_mesh(warm_dir, work) for _ in range(args.starts)]))
        print(rows[-1], flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=10, help="timed starts per row")
    parser.add_argument("--services", nargs="+", choices=SERVICES, default=list(SERVICES))
    parser.add_argument("--no-mesh", dest="mesh", action="store_false",
                        help="skip the launcher's whole-mesh row")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold rows")
    parser.add_argument("--no-warm", action="store_true", help="skip the warm rows")
    parser.add_argument("--quick", action="store_true",
                        help="one cold start of each service, no warm rows, no mesh")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON at the end")
    args = parser.parse_args()
    if args.quick:
        args.starts, args.mesh, args.no_warm = 1, False, True
    with tempfile.TemporaryDirectory(prefix="readiness-") as folder:
        rows = measure(args, Path(folder))
    print(f"\n{'what':<18} {'cache':<5} {'starts':>6} {'median s':>9} {'min s':>6} {'max s':>6} "
          f"{'CPU s':>6}")
    for row in rows:
        cpu = "" if row["cpu_s"] is None else row["cpu_s"]
        print(f"{row['what']:<18} {row['cache']:<5} {row['starts']:>6} {row['median_s']:>9} "
              f"{row['min_s']:>6} {row['max_s']:>6} {cpu:>6}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
