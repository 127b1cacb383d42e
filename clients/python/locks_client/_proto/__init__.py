"""The ``locks.v1`` gRPC stubs, generated from ``locks-grpc/proto/locks/v1/locks.proto`` by
``clients/python/generate.py`` and checked in: importing the client generates and writes
nothing. A test regenerates them and fails when they differ."""
