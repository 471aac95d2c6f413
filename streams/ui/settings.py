"""Settings of the incident explorer (``faultstream ui``), from the environment
(``FAULTSTREAM_UI_*``, pydantic-settings) or the command line.

====================================  =========================================================
variable                              meaning (default)
====================================  =========================================================
FAULTSTREAM_CLICKHOUSE                the store: ``chdb://DIR`` or ``http(s)://...``
                                      (``chdb://.state/clickhouse``)
FAULTSTREAM_UI_DATABASE               the database the sink writes (``faultstream``)
FAULTSTREAM_UI_HOST / _PORT           where to listen (``127.0.0.1`` / ``8077``)
FAULTSTREAM_UI_POLL_S                 how often the incident list refreshes itself, s (5)
FAULTSTREAM_UI_ALLOW_COMMANDS         offer approve / reject (``false``: read-only)
FAULTSTREAM_UI_TOKENS                 JSON ``{"<name>": "<token>", ...}``: who may log in to
                                      decide, and their tokens (at least 32 characters each)
FAULTSTREAM_UI_TOKEN_FILE             a JSON file of the same shape
FAULTSTREAM_UI_SESSION_SECRET         the key that signs session cookies (default: a random
                                      one per start: sessions end with the process)
FAULTSTREAM_UI_SESSION_MAX_AGE_S      how long a login lasts, s (28800)
FAULTSTREAM_UI_SECURE_COOKIES         send the session cookie over HTTPS only (``false``; set
                                      it behind a TLS proxy)
FAULTSTREAM_UI_COMMAND_TIMEOUT_S      how long a decision waits for the broker, s (10)
FAULTSTREAM_UI_BOOTSTRAP              Kafka servers for decisions (``KAFKA_BOOTSTRAP_SERVERS``)
FAULTSTREAM_UI_TOPIC_PREFIX           topic prefix for decisions (``FAULTSTREAM_TOPIC_PREFIX``)
====================================  =========================================================

Decisions are signed with the command keys of ``streams.command_auth``
(``FAULTSTREAM_COMMAND_*``) and published with the ``KAFKA_*`` settings and
``FAULTSTREAM_TOPIC_PREFIX``, as ``faultstream remediation approve`` does.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["MIN_TOKEN", "UISettings", "UISettingsError"]

#: Shortest login token accepted, characters.
MIN_TOKEN = 32


class UISettingsError(ValueError):
    """Settings the explorer cannot start with; the message says which."""


class UISettings(BaseSettings):
    """See the module docstring."""

    model_config = SettingsConfigDict(env_prefix="FAULTSTREAM_UI_", extra="ignore", populate_by_name=True)

    clickhouse: str = Field("chdb://.state/clickhouse",
                            validation_alias=AliasChoices("clickhouse", "FAULTSTREAM_CLICKHOUSE"))
    database: str = "faultstream"
    host: str = "127.0.0.1"
    port: int = Field(8077, ge=0, le=65535)
    poll_s: float = Field(5.0, gt=0, le=3600, allow_inf_nan=False)
    allow_commands: bool = False
    tokens: dict[str, SecretStr] = Field(default_factory=dict)
    token_file: Path | None = None
    session_secret: SecretStr | None = None
    session_max_age_s: int = Field(28_800, gt=0)
    secure_cookies: bool = False
    command_timeout_s: float = Field(10.0, gt=0, le=120, allow_inf_nan=False)
    #: Kafka bootstrap servers overriding ``KAFKA_BOOTSTRAP_SERVERS`` (the ``--bootstrap``
    #: option); None: the ``KAFKA_*`` environment
    bootstrap: str | None = None
    #: topic prefix overriding ``FAULTSTREAM_TOPIC_PREFIX``; None: the environment's
    topic_prefix: str | None = None

    def users(self) -> dict[str, bytes]:
        """``{name: token bytes}`` of ``tokens`` and ``token_file`` together. Raises
        :class:`UISettingsError` for an unreadable or malformed file, a name given twice with
        different tokens, a blank name or a token shorter than :data:`MIN_TOKEN`."""
        users = {k: v.get_secret_value().encode("utf-8") for k, v in self.tokens.items()}
        if self.token_file is not None:
            try:
                data = json.loads(self.token_file.read_text(encoding="utf-8"))
            except OSError as exc:
                raise UISettingsError(f"UI token file {self.token_file}: cannot read: {exc.strerror or exc}") from exc
            except ValueError as exc:
                raise UISettingsError(f"UI token file {self.token_file}: not JSON: {exc}") from exc
            if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
                raise UISettingsError(f'UI token file {self.token_file}: expected {{"<name>": "<token>", ...}}')
            for name, token in data.items():
                raw = token.encode("utf-8")
                if users.get(name, raw) != raw:
                    raise UISettingsError(f"UI user {name!r} is given twice with different tokens")
                users[name] = raw
        for name, token in users.items():
            if not name.strip() or len(name) > 64:
                raise UISettingsError(f"UI user name {name!r}: 1-64 characters, not blank")
            if len(token) < MIN_TOKEN:
                raise UISettingsError(f"UI token of {name!r} has {len(token)} bytes; at least {MIN_TOKEN} are needed "
                                      "(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')")
        return users
