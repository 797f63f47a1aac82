"""`models`: the HRM/TRM presets with their parameter counts, the export of the retrieval
encoder to int8 ONNX, and the neural service's cache of Connect Four graphs."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path


def register(sub) -> None:
    """Adds `models` and its subcommands to the command line's subparsers."""
    models = sub.add_parser("models", help="model presets (HRM, TRM); the retrieval encoder")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    presets = models_sub.add_parser("presets", help="list every HRM/TRM preset with its "
                                    "parameter count (as the papers count)")
    presets.add_argument("--json", action="store_true")
    presets.set_defaults(func=cmd_models_presets)
    export = models_sub.add_parser(
        "export-embedder", help="export the packaged all-MiniLM-L6-v2 to an int8 ONNX encoder "
                                "for retrieval (run by `make setup`; nothing is downloaded)")
    export.add_argument("--output", default="var/embedder/all-MiniLM-L6-v2-int8.onnx",
                        help="where to write it (RETRIEVAL_ONNX_PATH; default %(default)s)")
    export.add_argument("--force", action="store_true",
                        help="export again even when an export of the same weights is there")
    export.set_defaults(func=cmd_models_export_embedder)
    graphs = models_sub.add_parser(
        "cache-graphs", help="export every Connect Four network's ONNX graph into the neural "
                             "service's cache, so that its next start serves them before torch "
                             "is imported (a start also writes them)")
    graphs.add_argument("--models-dir", default="models", help="default %(default)s")
    graphs.add_argument("--output", default="var/neural/onnx-graphs",
                        help="the cache (NEURAL_GRAPH_CACHE_DIR; default %(default)s)")
    graphs.set_defaults(func=cmd_models_cache_graphs)


def cmd_models_cache_graphs(args) -> int:
    from services.neural.onnx_graphs import GraphCache
    from services.neural.runners import cache_graphs

    names = cache_graphs(Path(args.models_dir), GraphCache(Path(args.output)))
    print(f"{args.output}: the graphs of {len(names)} network(s): {', '.join(names) or 'none'}")
    return 0


def cmd_models_export_embedder(args) -> int:
    from services.retrieval.onnx_export import check_manifest, export_embedder

    output = Path(args.output)
    if not args.force:
        try:
            check_manifest(output)
            print(f"{output}: up to date (an export of the packaged weights)")
            return 0
        except (FileNotFoundError, ValueError):
            pass
    if not args.verbose:  # onnxruntime's quantizer logs every tensor at INFO
        logging.getLogger().setLevel(logging.WARNING)
    started = time.perf_counter()
    manifest = export_embedder(output, force=True)
    print(f"{output}: int8 ONNX encoder ({output.stat().st_size / 1e6:.1f} MB, attention fused, "
          f"MatMul and attention weights int8 per channel) from {manifest['model']} in "
          f"{time.perf_counter() - started:.0f} s")
    return 0


def cmd_models_presets(args) -> int:
    from services.neural.models.presets import PRESETS, preset_parameter_counts

    counts = preset_parameter_counts()
    rows = [{"name": preset.name, "architecture": preset.architecture,
             "parameters": counts[preset.name], "vocab_size": preset.config.vocab_size,
             "seq_len": preset.config.seq_len, "description": preset.description}
            for preset in PRESETS.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(row["name"]) for row in rows)
    print(f"{'preset':<{width}}  arch  {'parameters':>12}  vocab  seq_len  description")
    for row in rows:
        print(f"{row['name']:<{width}}  {row['architecture']:<4}  {row['parameters']:>12,}  "
              f"{row['vocab_size']:>5}  {row['seq_len']:>7}  {row['description']}")
    return 0
