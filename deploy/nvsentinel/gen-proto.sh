#!/usr/bin/env bash
# Regenerates the Python protobuf and gRPC stubs of NVSentinel's HealthEvent proto
# (transport/nvsentinel_pb/health_event.proto, vendored from NVIDIA/NVSentinel
# data-models/protobufs/health_event.proto, Apache-2.0) with grpcio-tools.
# The stubs are checked in so that installing faultstream needs no protoc; run this after
# updating the vendored .proto. tests/transport/test_nvsentinel_grpc.py fails when the
# checked-in stubs no longer describe the vendored file.
# Usage: deploy/nvsentinel/gen-proto.sh  (from anywhere; idempotent)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
python3 -c "import grpc_tools" 2>/dev/null || python3 -m pip install -q "grpcio-tools>=1.66"
# -I . makes the generated modules import each other as transport.nvsentinel_pb.*
python3 -m grpc_tools.protoc -I . \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  transport/nvsentinel_pb/health_event.proto
echo "regenerated transport/nvsentinel_pb/health_event_pb2{,_grpc}.py{,i}"
