"""NVSentinel's platform-connector gRPC interface: the client and the server side.

NVSentinel's health monitors hand their HealthEvents to its platform connector over gRPC:
service ``datamodels.PlatformConnector``, one unary method ``HealthEventOccurredV1(HealthEvents)
returns (google.protobuf.Empty)`` (``transport/nvsentinel_pb/health_event.proto``, vendored from
NVSentinel's ``data-models/protobufs/health_event.proto``), served on a Unix socket of the node
(:data:`DEFAULT_SOCKET`). This module speaks it with grpcio and the generated stubs, for both
directions:

* :class:`PlatformConnectorClient` sends a batch of events in one call (faultstream acting as one
  more health monitor: NVSentinel's fault-quarantine cordons the node of a fatal event and sets the
  node condition named by ``checkName``, node-drainer drains it, fault-remediation runs the
  ``recommendedAction``; a healthy event with the same ``checkName`` lifts the quarantine). Used
  by the verdict bridge (``connectors.nvsentinel``) and the remediation executor
  (``sinks.executors.nvsentinel``).
* :func:`serve` runs a server of the same service whose calls go to a handler (the
  ``--listen`` mode of ``connectors.nvsentinel``).

Events cross this module as protojson objects (``dict``: the proto's camelCase field names, enum
values by name, ``generatedTimestamp`` RFC 3339 UTC text), converted with
``google.protobuf.json_format`` (:func:`to_message`, :func:`from_message`), the form
``connectors.nvsentinel.HealthEvent`` holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import empty_pb2, json_format
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from transport.nvsentinel_pb import health_event_pb2 as pb
from transport.nvsentinel_pb import health_event_pb2_grpc as pb_grpc

__all__ = [
    "ACTION_MAP",
    "DEFAULT_SOCKET",
    "MAX_MESSAGE",
    "TRANSIENT",
    "PlatformConnectorClient",
    "PlatformConnectorError",
    "from_message",
    "serve",
    "to_message",
]

log = logging.getLogger("faultstream.transport.nvsentinel")

#: Where NVSentinel's platform connector listens on a node (its Helm chart's default socket).
DEFAULT_SOCKET = "unix:///var/run/nvsentinel.sock"
#: gRPC status codes of a call worth retrying (the server restarting, overloaded, slow).
TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                       grpc.StatusCode.RESOURCE_EXHAUSTED})
#: Longest HealthEvent ``message`` faultstream writes (characters).
MAX_MESSAGE = 1024
#: faultstream remediation action kind -> NVSentinel ``RecommendedAction`` (``reboot`` becomes
#: the deployment's reboot action, ``RESTART_BM`` or ``RESTART_VM``; ``drain``/``cordon`` ask for
#: no automated repair: NVSentinel quarantines and drains a fatal event by itself).
ACTION_MAP: dict[str, str] = {
    "notify": "NONE",
    "recertify": "RUN_DCGMEUD",
    "cordon": "CONTACT_SUPPORT",
    "drain": "CONTACT_SUPPORT",
    "disable_port": "CONTACT_SUPPORT",
    "reset_gpu": "COMPONENT_RESET",
    "reboot": "RESTART_BM",
    "swap_hot_spare": "CONTACT_SUPPORT",
    "reprovision": "REPLACE_VM",
    "rma": "CONTACT_SUPPORT",
}


class PlatformConnectorError(Exception):
    """A HealthEvents call that failed for good (the message names the target, the gRPC status
    and its details), an event the proto cannot hold, or an address that cannot be bound."""


def to_message(event: Mapping[str, Any]) -> pb.HealthEvent:
    """The ``datamodels.HealthEvent`` of a protojson object. Raises
    :class:`PlatformConnectorError` for a value the proto cannot hold (an unknown field, an enum
    name the proto does not have, a malformed timestamp)."""
    try:
        return json_format.ParseDict(dict(event), pb.HealthEvent())
    except json_format.ParseError as exc:
        raise PlatformConnectorError(f"not a datamodels.HealthEvent: {exc}") from None


def from_message(message: pb.HealthEvent) -> dict[str, Any]:
    """A ``datamodels.HealthEvent`` as its protojson object (fields at their default left out; an
    enum number the proto does not name stays a number)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, grpc.RpcError) and hasattr(exc, "code") and exc.code() in TRANSIENT


class PlatformConnectorClient:
    """Sends HealthEvents to NVSentinel's platform connector (or any server of the
    ``datamodels.PlatformConnector`` service).

    ``target``: a gRPC target (``unix:///var/run/nvsentinel.sock``, ``host:port``), plaintext as
    NVSentinel's node socket is. ``timeout_s``: deadline of one call, seconds. ``attempts``,
    ``retry_wait_s``, ``retry_max_wait_s``: tenacity retries with exponential back-off of calls
    ending ``UNAVAILABLE``, ``DEADLINE_EXCEEDED`` or ``RESOURCE_EXHAUSTED``. The channel opens on
    first use and is reused."""

    def __init__(self, target: str = DEFAULT_SOCKET, *, timeout_s: float = 10.0, attempts: int = 3,
                 retry_wait_s: float = 0.5, retry_max_wait_s: float = 5.0) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.retry_wait_s = retry_wait_s
        self.retry_max_wait_s = retry_max_wait_s
        self._channel: grpc.Channel | None = None
        self._stub: pb_grpc.PlatformConnectorStub | None = None

    def send(self, events: Sequence[Mapping[str, Any]]) -> int:
        """Send ``events`` (protojson objects) in one ``HealthEventOccurredV1`` call
        (``HealthEvents.version`` 1); returns how many were sent (0, and no call, for none).
        Raises :class:`PlatformConnectorError` when an event is not expressible in the proto or
        the call fails for good (a non-transient status, or the retries ran out)."""
        if not events:
            return 0
        request = pb.HealthEvents(version=1, events=[to_message(e) for e in events])
        if self._stub is None:
            self._channel = grpc.insecure_channel(self.target)
            self._stub = pb_grpc.PlatformConnectorStub(self._channel)
        stub = self._stub
        try:
            for attempt in Retrying(stop=stop_after_attempt(max(1, self.attempts)),
                                    wait=wait_exponential(multiplier=self.retry_wait_s, min=self.retry_wait_s,
                                                          max=self.retry_max_wait_s),
                                    retry=retry_if_exception(_transient), reraise=True):
                with attempt:
                    stub.HealthEventOccurredV1(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise PlatformConnectorError(f"HealthEventOccurredV1 to {self.target}: "
                                         f"{code.name if code else 'error'}: {details}") from None
        return len(events)

    def close(self) -> None:
        """Close the channel (a later :meth:`send` opens a new one)."""
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None

    def __enter__(self) -> "PlatformConnectorClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: A server's handler: the call's events as (protojson object, the event's protobuf bytes)
#: pairs -> None to answer ``OK``, or a reason to answer ``UNAVAILABLE`` (the sender retries).
Handler = Callable[[list[tuple[dict[str, Any], bytes]]], "str | None"]


class _Servicer(pb_grpc.PlatformConnectorServicer):
    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    def HealthEventOccurredV1(self, request: pb.HealthEvents, context: grpc.ServicerContext) -> empty_pb2.Empty:  # noqa: N802
        problem = self.handler([(from_message(m), m.SerializeToString()) for m in request.events])
        if problem:
            context.abort(grpc.StatusCode.UNAVAILABLE, problem)
        return empty_pb2.Empty()


def serve(listen: str, handler: Handler, *, max_workers: int = 4) -> tuple[grpc.Server, str]:
    """Start a ``datamodels.PlatformConnector`` server on ``listen`` (``unix:///path.sock``,
    ``host:port``; port 0 picks a free one) whose calls go to ``handler`` (:data:`Handler`, run
    on one of ``max_workers`` threads). Returns the started server (``server.stop(grace)`` ends
    it) and the bound address (``host:port`` with the chosen port). Raises
    :class:`PlatformConnectorError` when the address cannot be bound."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="nvsentinel-grpc"))
    pb_grpc.add_PlatformConnectorServicer_to_server(_Servicer(handler), server)
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError as exc:
        raise PlatformConnectorError(f"cannot listen on {listen}: {exc}") from None
    address = listen if listen.startswith("unix:") else f"{listen.rsplit(':', 1)[0]}:{port}"
    server.start()
    log.info("datamodels.PlatformConnector server listening on %s", address)
    return server, address
