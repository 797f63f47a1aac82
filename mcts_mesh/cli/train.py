"""`train`: the training jobs (Connect Four policy-value by self-play, the AlphaZero loop, TRM and
HRM on puzzles, the learned routers); each writes a checkpoint a service loads. The AlphaZero
loop's own options and commands are in `mcts_mesh.cli.az`."""

from __future__ import annotations

import json
from pathlib import Path

from libs.data import evaluation_dir
from mcts_mesh.cli import az


def register(sub) -> None:
    """Adds `train`, then the AlphaZero loop's `selfplay-actor` and `plot-history`, to the
    command line's subparsers."""
    train = sub.add_parser("train", help="train a model (writes a checkpoint the service loads)")
    train.add_argument("what", choices=["connect4-pv", "connect4-az", "trm", "hrm", "router"])
    train.add_argument("--output", default=None,
                       help="checkpoint folder (default models/connect4-pv or models/<preset>)")
    train.add_argument("--games", type=int, default=1000)
    train.add_argument("--simulations", type=int, default=3000)
    train.add_argument("--epochs", type=int, default=4)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--workers", type=int, default=2, help="connect4-pv: self-play threads")
    train.add_argument("--board", default="7x6",
                       help="connect4-pv: the board, WxH (e.g. 5x4; judged by the exact values "
                            "instead of Pons' 7x6 benchmark); connect4-az takes --set board=WxH")
    _add_reasoning_arguments(train)
    _add_router_arguments(train)
    _add_text_router_arguments(train)
    train.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                       help="connect4-az/trm/hrm: auto (default) = CUDA when present")
    az.add_train_arguments(train)
    train.set_defaults(func=cmd_train)
    az.register(sub)


def _add_reasoning_arguments(train) -> None:
    """trm/hrm's options."""
    train.add_argument("--preset", default=None, help="trm/hrm: a model preset")
    train.add_argument("--steps", type=int, default=20000, help="trm/hrm: optimizer steps")
    train.add_argument("--batch-size", type=int, default=64, help="trm/hrm")
    train.add_argument("--blanks", type=int, default=16, help="trm/hrm: blanks per Sudoku puzzle")
    train.add_argument("--init-from", default=None,
                       help="trm/hrm: continue from the weights of this checkpoint directory "
                            "(same preset, or one for another grid size with weights of the same "
                            "shapes: hrm-cpu-maze9 -> hrm-cpu-maze11)")
    train.add_argument("--task", choices=["sudoku", "maze"], default=None,
                       help="trm/hrm: what to generate (default: from the preset's vocabulary and "
                            "length; trm-mlp-cpu-maze9 trains on 9x9-grid mazes)")
    train.add_argument("--eval-every", type=int, default=500, help="trm/hrm: steps")
    train.add_argument("--eval-puzzles", type=int, default=1000, help="trm/hrm: held-out puzzles")
    train.add_argument("--time-limit-s", type=float, default=None, help="trm/hrm: training seconds")
    train.add_argument("--lr", type=float, default=1e-3, help="trm/hrm: learning rate")
    train.add_argument("--ema-rate", type=float, default=None,
                       help="trm/hrm: decay of the weights' exponential moving average, whose "
                            "copy is evaluated and saved (default: 0.999 for trm, none for hrm, "
                            "as their reference code)")
    train.add_argument("--data-workers", type=int, default=0,
                       help="trm/hrm: processes generating puzzles ahead of the training steps "
                            "(0: in the step; use several on a GPU)")


def _add_router_arguments(train) -> None:
    """router's options (the Connect Four GRU; its log, labels and workload)."""
    train.add_argument("--router-dir", default="var/router",
                       help="router: folder of the default routing log and labels files")
    train.add_argument("--routing-log", action="append", default=[],
                       help="router: a routing log (JSON lines) to train from; repeatable "
                            "(default: ROUTER_DIR/routing.jsonl)")
    train.add_argument("--labels", action="append", default=[],
                       help="router: a labels file ({thread_id, kept} lines); repeatable "
                            "(default: ROUTER_DIR/labels.jsonl)")
    train.add_argument("--generate", type=int, default=0, metavar="N",
                       help="router: first run the labelled workload, N positions of the train "
                            "split per Pons file, each once per agent set, on a private mesh")
    train.add_argument("--routes", default="",
                       help="router: --generate runs only these routes (comma-separated names, "
                            "e.g. mcts@deep)")
    train.add_argument("--max-plies", type=int, default=None, metavar="N",
                       help="router: --generate runs only the sampled positions with fewer than "
                            "N moves played")
    train.add_argument("--judge-cache", default="var/router/judged.jsonl",
                       help="router: cache of judged moves (empty: none)")
    train.add_argument("--latency-weight", type=float, default=0.3,
                       help="router: kept share traded for one second of mean latency")
    train.add_argument("--hidden", type=int, default=16, help="router: GRU hidden units")
    train.add_argument("--router-epochs", type=int, default=2000,
                       help="router: full-batch optimizer steps")


def _add_text_router_arguments(train) -> None:
    """router --text's options."""
    train.add_argument("--text", action="store_true",
                       help="router: the text router (MiniLM with LoRA) instead of the Connect "
                            "Four GRU; log and labels default to ROUTER_DIR/text-routing.jsonl "
                            "and ROUTER_DIR/text-labels.jsonl, the output to models/router-text; "
                            "--generate N asks N train-split questions per dataset once per "
                            "role and needs a language model")
    train.add_argument("--data-dir", default=None,
                       help="router --text: the evaluation data folder holding gsm8k, "
                            "strategyqa, hotpotqa (default: MCTS_MESH_DATA_DIR, else "
                            "../shared/data beside the repository)")
    train.add_argument("--datasets", default="gsm8k,strategyqa,hotpotqa",
                       help="router --text: --generate asks these datasets' questions")
    train.add_argument("--roles", default="draft,decompose,refine,search",
                       help="router --text: --generate runs these roles")
    train.add_argument("--text-simulations", type=int, default=20,
                       help="router --text: the search role's mcts_iterations")
    train.add_argument("--token-weight", type=float, default=0.01,
                       help="router --text: correct share traded for 1,000 tokens")
    train.add_argument("--text-latency-weight", type=float, default=0.01,
                       help="router --text: correct share traded for one second of latency")
    train.add_argument("--text-epochs", type=int, default=30,
                       help="router --text: full-batch optimizer steps")
    train.add_argument("--lora-rank", type=int, default=8, help="router --text: LoRA rank r")


def _router_routes(names: str):
    """The routes named in `--routes` ("mcts@deep,neural"); every route when empty."""
    from services.orchestrator.routing.rules import CONNECT_FOUR_ROUTES, parse_route

    if not names:
        return CONNECT_FOUR_ROUTES
    try:
        routes = [parse_route(name.strip()) for name in names.split(",")]
    except ValueError as error:
        raise SystemExit(f"train router: --routes: {error}") from error
    unknown = [route.name for route in routes if route not in CONNECT_FOUR_ROUTES]
    if unknown:
        raise SystemExit(f"train router: --routes: {', '.join(unknown)} is not a route the "
                         "meta-controller chooses among")
    return routes


def cmd_train_text_router(args) -> int:
    """`train router --text`: optionally run the labelled text workload (a language model is
    needed: without one it exits with one line), then train the text router from log + labels."""
    from services.orchestrator.text.roles import TextRole
    from training.router.text import TextRouterConfig, train_text_router
    from training.router.text_workload import DATASETS, NoLanguageModel, generate

    run_dir = Path(args.router_dir)
    logs = [Path(p) for p in args.routing_log] or [run_dir / "text-routing.jsonl"]
    labels = [Path(p) for p in args.labels] or [run_dir / "text-labels.jsonl"]
    if args.generate:
        datasets = [name.strip() for name in args.datasets.split(",") if name.strip()]
        roles = [name.strip() for name in args.roles.split(",") if name.strip()]
        unknown = [n for n in datasets if n not in DATASETS] + \
            [n for n in roles if n not in {str(role) for role in TextRole}]
        if unknown:
            raise SystemExit(f"train router --text: unknown dataset or role: {', '.join(unknown)}")
        try:
            data_dir = Path(args.data_dir) if args.data_dir else evaluation_dir()
            counts = generate(logs[0], labels[0], data_dir, args.generate, args.seed,
                              datasets, roles, args.text_simulations)
        except NoLanguageModel as error:
            raise SystemExit(f"train router --text: FAILED_PRECONDITION: {error.message}") \
                from error
        print(json.dumps({"generated": counts}), flush=True)
    try:
        report = train_text_router(TextRouterConfig(
            Path(args.output or "models/router-text"), logs, labels,
            token_weight=args.token_weight, latency_weight=args.text_latency_weight,
            epochs=args.text_epochs, lora_rank=args.lora_rank, seed=args.seed))
    except (ValueError, KeyError) as error:
        raise SystemExit(f"train router --text: {error}") from error
    history = report.pop("history")
    print(json.dumps({**report, "history": history[-1:]}, indent=2, default=str))
    return 0


def cmd_train_router(args) -> int:
    """`train router`: optionally run the labelled workload, then train from log + labels."""
    from training.router.connect4 import RouterConfig, generate, train_router

    if args.text:
        return cmd_train_text_router(args)

    run_dir = Path(args.router_dir)
    logs = [Path(p) for p in args.routing_log] or [run_dir / "routing.jsonl"]
    labels = [Path(p) for p in args.labels] or [run_dir / "labels.jsonl"]
    if args.generate:
        counts = generate(logs[0], labels[0], args.generate, args.seed,
                          Path(args.judge_cache) if args.judge_cache else None,
                          args.max_plies, _router_routes(args.routes))
        print(json.dumps({"generated": counts}), flush=True)
    try:
        report = train_router(RouterConfig(
            Path(args.output or "models/router-connect4"), logs, labels,
            latency_weight=args.latency_weight, hidden=args.hidden, epochs=args.router_epochs,
            seed=args.seed))
    except (ValueError, KeyError) as error:
        raise SystemExit(f"train router: {error}") from error
    print(json.dumps(report, indent=2, default=str))
    return 0


def cmd_train(args) -> int:
    if args.what == "router":
        return cmd_train_router(args)
    if args.what == "connect4-az":
        return az.cmd_train_connect4_az(args)
    if args.what == "connect4-pv":
        from training.connect4_selfplay import SelfPlayConfig, train_connect4_pv

        report = train_connect4_pv(SelfPlayConfig(
            Path(args.output or "models/connect4-pv"), games=args.games,
            simulations=args.simulations, epochs=args.epochs, seed=args.seed,
            workers=args.workers, board=args.board))
    else:
        from training.reasoning.trainer import ReasoningConfig, train_reasoning

        if not args.preset:
            raise SystemExit(f"train {args.what}: --preset is required "
                             "(e.g. trm-mlp-cpu-sudoku6, hrm-cpu-sudoku6, trm-mlp-cpu-maze9)")
        report = train_reasoning(ReasoningConfig(
            args.what, args.preset, Path(args.output or f"models/{args.preset}"),
            steps=args.steps, batch_size=args.batch_size, blanks=args.blanks, seed=args.seed,
            eval_every=args.eval_every, eval_puzzles=args.eval_puzzles,
            time_limit_s=args.time_limit_s, lr=args.lr, task=args.task, init_from=args.init_from,
            device=_device(args.device), data_workers=args.data_workers,
            ema_rate=args.ema_rate))
    print(json.dumps(report, indent=2, default=str))
    return 0


def _device(choice: str | None) -> str:
    from training.device import resolve_device

    try:
        return resolve_device(choice or "auto")
    except ValueError as error:
        raise SystemExit(str(error)) from None
