"""NVSentinel's HealthEvent proto and its generated Python stubs.

``health_event.proto`` is NVIDIA NVSentinel's ``data-models/protobufs/health_event.proto``
(Apache-2.0, licence header kept): package ``datamodels``, the ``HealthEvent`` / ``HealthEvents``
messages and the ``PlatformConnector`` service (``HealthEventOccurredV1(HealthEvents) returns
(google.protobuf.Empty)``) that NVSentinel's platform connector serves on its node socket.

``health_event_pb2.py``, ``health_event_pb2.pyi`` and ``health_event_pb2_grpc.py`` are generated
by ``deploy/nvsentinel/gen-proto.sh`` (grpcio-tools) and checked in, so installing faultstream
needs no protobuf compiler; they require the protobuf and grpcio runtimes named in
``pyproject.toml`` (at least the versions that generated them).
``tests/transport/test_nvsentinel_grpc.py`` compiles the vendored ``.proto`` again and fails when
the checked-in stubs no longer describe it.
"""
