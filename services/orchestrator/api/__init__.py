"""The orchestrator's gRPC edge, the only part that knows its proto messages: the servicer, request
parsing and validation, response building and the enum maps."""
