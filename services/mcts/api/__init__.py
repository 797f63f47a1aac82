"""The gRPC edge of the mcts service: the one servicer, request parsing and validation, response
building, the neural service's client and the queue of searches waiting for a thread. The only
package of the service that knows grpc and the proto messages."""
