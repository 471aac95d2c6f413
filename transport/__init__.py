"""Clients of the systems faultstream exchanges data with, shared by inputs and outputs.

* :mod:`transport.kafka_settings` -- :class:`~transport.kafka_settings.KafkaSettings` from the
  ``KAFKA_*`` environment and :func:`~transport.kafka_settings.kafka_settings` (with a
  ``--bootstrap`` override);
* :mod:`transport.kafka` -- :class:`~transport.kafka.RecordProducer` (idempotent producer of
  pydantic records) and :func:`~transport.kafka.consumer_config`;
* :mod:`transport.slurm` -- :class:`~transport.slurm.SlurmClient`, which runs ``sacct``,
  ``scontrol`` and ``squeue`` with argument lists and timeouts, and the parsers of their output.

Connectors (``connectors/``) and sinks (``sinks/``) both use these; the package imports only
``schemas`` (see ``docs/architecture.md``, Layers).
"""
