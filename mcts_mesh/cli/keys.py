"""`keys`: the orchestrator's API keys (create, list, revoke), edited in its key store (a file or
Redis) directly, not through the API."""

from __future__ import annotations

import asyncio
import json
import sys


def register(sub) -> None:
    """Adds `keys` and its subcommands to the command line's subparsers."""
    keys = sub.add_parser("keys", help="API keys of the orchestrator (stored as SHA-256 hashes in "
                          "ORCHESTRATOR_API_KEYS_FILE, or Redis with ORCHESTRATOR_REDIS_URL)")
    keys.add_argument("--file", default=None,
                      help="edit this key file instead of the orchestrator's store")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    _register_create(keys_sub)
    keys_sub.add_parser("list", help="names, creation times and own limits (never the keys)"
                        ).add_argument("--json", action="store_true")
    keys_sub.add_parser("revoke", help="delete a key").add_argument("name")
    keys.set_defaults(func=cmd_keys)


def _register_create(keys_sub) -> None:
    create = keys_sub.add_parser("create", help="make a key and print it once")
    create.add_argument("name", help="1-64 of a-z 0-9 _ . - (e.g. the client's name)")
    for window in ("second", "minute", "hour"):
        create.add_argument(f"--per-{window}", type=int, default=None,
                            help=f"this key's own limit of calls per {window} (0: none; "
                                 "unset: the orchestrator's ORCHESTRATOR_RATE_LIMIT_* defaults)")
    create.add_argument("--scope", action="append", default=None,
                        choices=("solve", "query", "ingest", "admin"),  # access.scopes.SCOPES
                        help="what the key may call (repeat for several): solve, query, ingest, "
                             "admin (every method); default: solve and query")
    create.add_argument("--collection", action="append", default=None,
                        help="a collection the key may use (repeat for several; default: any)")
    create.add_argument("--max-in-flight", type=int, default=None,
                        help="this key's own cap on calls running at once (0: none; unset: "
                             "ORCHESTRATOR_MAX_IN_FLIGHT_PER_KEY)")
    for budget, kind, what in (("tokens", int, "LLM tokens"), ("usd", float, "US dollars"),
                               ("simulations", int, "MCTS simulations")):
        create.add_argument(f"--budget-{budget}", type=kind, default=None,
                            help=f"{what} this key may use per ORCHESTRATOR_BUDGET_WINDOW_S (0: "
                                 "none; any --budget-* set replaces the ORCHESTRATOR_BUDGET_* "
                                 "defaults)")


def _key_store(args):
    """The store `keys` edits: `--file`, else the orchestrator's own (ORCHESTRATOR_API_KEYS_FILE,
    ORCHESTRATOR_REDIS_URL, else var/orchestrator/api-keys.json), and its Redis client (or None)."""
    from services.orchestrator.access import key_store, redis_client
    from services.orchestrator.access.keys import FileKeyStore
    from services.orchestrator.settings import OrchestratorSettings

    if args.file:
        return FileKeyStore(args.file), None
    settings = OrchestratorSettings()
    client = redis_client(settings)
    return key_store(settings, client), client


def cmd_keys(args) -> int:
    """`keys create NAME` prints a new key once (only its SHA-256 is stored) with its scopes
    (`--scope`, repeated; default `solve` and `query`), allowed collections, cap in flight and
    budgets; `keys list` shows names, creation times, scopes and own limits; `keys revoke NAME`
    deletes a key (running orchestrators refuse it within ORCHESTRATOR_API_KEYS_RELOAD_S)."""
    from libs.errors import MeshError

    try:
        return asyncio.run(_run(args))
    except MeshError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


async def _run(args) -> int:
    store, client = _key_store(args)
    try:
        if args.keys_command == "create":
            await _create(store, args)
        elif args.keys_command == "revoke":
            await store.revoke(args.name)
            print(f"key {args.name!r} revoked in {store.describe()}", file=sys.stderr)
        else:
            await _list(store, args)
        return 0
    finally:
        if client is not None:
            await client.aclose()


async def _create(store, args) -> None:
    from services.orchestrator.access.keys import Budgets, Grants, RateLimits
    from services.orchestrator.access.scopes import DEFAULT_NEW_KEY_SCOPES

    own = (args.per_second, args.per_minute, args.per_hour)
    limits = None if own == (None, None, None) else \
        RateLimits(*(value or 0 for value in own))
    budgets = (args.budget_tokens, args.budget_usd, args.budget_simulations)
    grants = Grants(
        scopes=args.scope or DEFAULT_NEW_KEY_SCOPES, collections=args.collection,
        max_in_flight=args.max_in_flight,
        budgets=None if budgets == (None, None, None) else Budgets(
            args.budget_tokens or 0, args.budget_usd or 0.0,
            args.budget_simulations or 0))
    key = await store.create(args.name, limits, grants)
    print(key)
    print(f"key {args.name!r} (scopes {', '.join(sorted(grants.scopes))}) stored in "
          f"{store.describe()} (as its SHA-256 only): copy it now, it cannot be shown "
          "again", file=sys.stderr)


async def _list(store, args) -> None:
    records = sorted(await store.read(), key=lambda record: record.name)
    if args.json:
        for record in records:
            row = record.to_json()
            del row["sha256"]
            print(json.dumps(row))
        return
    print(f"{len(records)} keys in {store.describe()}")
    for record in records:
        own = record.limits
        limits = (f"{own.per_second}/s {own.per_minute}/min {own.per_hour}/h"
                  if own else "default limits")
        scopes = ",".join(sorted(record.scopes)) if record.scopes else "all"
        print(f"  {record.name:<24} created {record.created}  {limits}  "
              f"scopes {scopes}")
