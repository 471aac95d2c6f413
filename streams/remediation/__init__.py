"""Remediation in the stream, in one package (the pure engine is :mod:`correlators.remediation`,
the executors :mod:`sinks.executors`; the layers keep them apart):

* :mod:`streams.remediation.runner` -- the Kafka-free driver of one cluster's engine and its
  executors (:class:`~streams.remediation.runner.RemediationRunner`);
* :mod:`streams.remediation.inputs` -- decoding and authentication of the records the agents
  read; the allocation message of a scheduler record;
* :mod:`streams.remediation.agent` -- the Faust agents, table and timer
  (:func:`~streams.remediation.agent.attach_remediation`);
* :mod:`streams.remediation.cli` -- the ``faultstream remediation`` commands.

Messages to a cluster's engine are typed (:data:`schemas.messages.RemediationMessage`).
"""
