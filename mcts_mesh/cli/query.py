"""`ingest` and `query`: the text path's clients of the orchestrator (StreamIngestDocuments,
AnswerQuery)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import grpc

from mcts_mesh.cli.common import fail, failure_records, stub


def register(sub) -> None:
    """Adds `ingest` and `query` to the command line's subparsers."""
    ingest = sub.add_parser("ingest", help="ingest text, markdown or JSONL files into retrieval")
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument("--collection", default="default")
    ingest.add_argument("--batch-size", type=int, default=64,
                        help="documents per stream message (default %(default)s)")
    ingest.add_argument("--limit", type=int, default=None,
                        help="ingest only the first N documents")
    ingest.add_argument("--max-document-chars", type=int, default=100_000,
                        help="refuse the input when a document is longer (retrieval's "
                             "RETRIEVAL_MAX_DOCUMENT_CHARS; default %(default)s)")
    ingest.add_argument("--quiet", action="store_true", help="no progress bar")
    ingest.set_defaults(func=cmd_ingest)

    query = sub.add_parser("query", help="answer a text query from the ingested documents")
    query.add_argument("text")
    query.add_argument("--collection", default="")
    query.add_argument("--top-k", type=int, default=None)
    query.add_argument("--samples", dest="sample_count", type=int, default=None,
                       help="self-consistency drafts per iteration (default: the setting, 5)")
    query.add_argument("--temperature", type=float, default=None)
    query.add_argument("--max-tokens", type=int, default=None,
                       help="token budget of the request (prompt + completion)")
    query.add_argument("--max-cost-usd", type=float, default=None,
                       help="cost budget in US dollars (needs LLM_PRICES for the model)")
    query.add_argument("--role", choices=["draft", "decompose", "refine"], default=None,
                       help="how the language model answers (default: drafts with "
                            "self-consistency)")
    query.add_argument("--mcts-iterations", type=int, default=None,
                       help="search over reasoning steps with this many simulations")
    query.add_argument("--step-branching", type=int, default=None,
                       help="search: next steps proposed per leaf (default: the setting, 3)")
    query.add_argument("--max-steps", type=int, default=None,
                       help="search: steps per trajectory at most (default: the setting, 6)")
    query.add_argument("--max-refinements", type=int, default=None,
                       help="refine: critique-and-revise rounds at most (default: the setting, 3)")
    query.add_argument("--mode", choices=["hybrid", "dense", "sparse"], default="hybrid",
                       help="retrieval ranking (default %(default)s)")
    query.add_argument("--fusion", choices=["dbsf", "rrf"], default="dbsf",
                       help="fusion of a hybrid retrieval (default %(default)s)")
    query.add_argument("--json", action="store_true")
    query.set_defaults(func=cmd_query)


def cmd_ingest(args) -> int:
    """Reads and checks every document first (a bad file is reported before anything is stored),
    then streams them to OrchestratorService.StreamIngestDocuments with a progress bar (documents
    sent, total, ETA) on stderr."""
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
    from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from mcts_mesh.client import open_channel

    documents = _read_documents(args)
    if isinstance(documents, int):
        return documents
    progress = Progress(TextColumn("ingest"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("documents"), TimeElapsedColumn(), TextColumn("ETA"),
                        TimeRemainingColumn(), console=_stderr_console(),
                        disable=args.quiet)
    task = progress.add_task("ingest", total=len(documents))

    def messages():
        for begin in range(0, len(documents), args.batch_size):
            batch = documents[begin:begin + args.batch_size]
            yield pb.StreamIngestDocumentsRequest(collection=args.collection, documents=batch)
            progress.advance(task, len(batch))

    # No BDP probing: the flow-control window stays small, so the bar follows what retrieval has
    # taken in rather than what the socket buffered.
    channel = open_channel(args.target, args.api_key, extra_options=[("grpc.http2.bdp_probe", 0)])
    orchestrator = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
    try:
        with progress:
            reply = orchestrator.StreamIngestDocuments(messages(), timeout=args.deadline)
    except grpc.RpcError as error:
        return fail(error)
    except KeyboardInterrupt:
        print("interrupted: documents stored before the interruption stay stored; a re-run "
              "skips them", file=sys.stderr)
        return 130
    finally:
        channel.close()
    print(f"ingested {reply.document_count} documents as {reply.chunk_count} chunks into "
          f"{args.collection!r} ({reply.updated_document_count} updated, "
          f"{reply.skipped_document_count} unchanged and skipped)")
    return 0


def _read_documents(args) -> list | int:
    """Every document of `args.paths`, read and checked, or the exit status 2 of a bad batch
    size, a bad file (reported, nothing ingested) or no documents at all."""
    from libs.errors import InvalidArgument
    from services.retrieval.ingest import load_documents

    if not 1 <= args.batch_size <= 10_000:
        print(f"error: --batch-size {args.batch_size} is outside 1..10000", file=sys.stderr)
        return 2
    try:
        documents = load_documents([Path(p) for p in args.paths], limit=args.limit,
                                   max_document_chars=args.max_document_chars)
    except InvalidArgument as error:
        print(f"error: {error.description}", file=sys.stderr)
        print("nothing was ingested", file=sys.stderr)
        return 2
    if not documents:
        print("error: no documents found in the given paths", file=sys.stderr)
        return 2
    return documents


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def cmd_query(args) -> int:
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    channel, orchestrator = stub(args.target, args.api_key)
    from mesh.common.v1 import common_pb2

    request = pb.AnswerQueryRequest(
        query=args.text, collection=args.collection,
        search_mode=common_pb2.SearchMode.Value(f"SEARCH_MODE_{args.mode.upper()}"),
        fusion=common_pb2.FusionMethod.Value(f"FUSION_METHOD_{args.fusion.upper()}"))
    if args.top_k is not None:
        request.top_k = args.top_k
    for field in ("sample_count", "temperature", "max_tokens", "max_cost_usd",
                  "mcts_iterations", "step_branching", "max_steps", "max_refinements"):
        if getattr(args, field) is not None:
            setattr(request, field, getattr(args, field))
    if args.role:
        request.role = pb.TextRole.Value(f"TEXT_ROLE_{args.role.upper()}")
    try:
        response = orchestrator.AnswerQuery(request, timeout=args.deadline)
    except grpc.RpcError as error:
        return fail(error)
    finally:
        channel.close()
    if args.json:
        from google.protobuf import json_format

        print(json.dumps(json_format.MessageToDict(response)))
        return 0
    label = "offline extractive provider" if response.offline else response.provider
    for failure in failure_records(response):
        print(f"{failure['agent']} failed ({failure['code']}: {failure['message']})",
              file=sys.stderr)
    if response.passages_only:
        print("(no draft: the LLM did not answer in time; the retrieved passages follow)")
    else:
        print(response.answer)
        print(f"\n(confidence {response.confidence:.2f}; drafted by {label})")
    if response.drafts:
        cost = f"${response.cost_usd:.6f}" if response.cost_known else "cost unknown (no price)"
        print(f"  {len(response.drafts)} drafts, {response.total_tokens} tokens, {cost}; "
              f"stopped: {response.stop_reason}")
    _print_role(response)
    for i, source in enumerate(response.sources, 1):
        print(f"  [{i}] {source.document_id} {source.title[:70]!r} score {source.score:.3f}")
    return 0


def _print_role(response) -> None:
    """What a role did (sub-questions, refinements, the search's trajectory) and its spend."""
    for sub in response.sub_questions:
        print(f"  sub-question: {sub.question}\n    -> {sub.answer}")
    for number, refinement in enumerate(response.refinements, 1):
        print(f"  round {number} critique: {refinement.critique[:200]}")
    if response.HasField("step_search"):
        search = response.step_search
        for step in search.trajectory:
            print(f"  step (value {step.value:.2f}{', checked' if step.checked else ''}): "
                  f"{step.text}")
        print(f"  search: {search.leaves_evaluated} leaves evaluated, {search.steps_proposed} "
              f"steps proposed, depth {search.max_depth}, tree "
              f"{search.statistics.tree_size} nodes, complete: {search.complete}")
    if response.role and not response.drafts:
        cost = f"${response.cost_usd:.6f}" if response.cost_known else "cost unknown (no price)"
        print(f"  {response.total_tokens} tokens, {cost}; stopped: {response.stop_reason}")
