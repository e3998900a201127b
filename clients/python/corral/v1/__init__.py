"""Corral's API (proto/corral/v1): the *_pb2 and *_pb2_grpc modules are generated here when the SDK is built."""
