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
FAULTSTREAM_UI_GRAFANA_URL            link-out templates for an incident's culprit host and
FAULTSTREAM_UI_LOKI_URL               window (none: no link); see "Link-outs" below
FAULTSTREAM_UI_PROMETHEUS_URL
====================================  =========================================================

Link-outs: each template is an ``http(s)://`` URL with placeholders in braces, filled per
culprit host of an incident page: ``{host}``, ``{cluster}``, and the verdict's window widened
by :data:`LINK_PAD_S` on each side as ``{from_ms}`` / ``{to_ms}`` (epoch milliseconds, what
Grafana's ``from``/``to`` take), ``{from_s}`` / ``{to_s}`` (epoch seconds) and
``{from_iso}`` / ``{to_iso}`` (RFC 3339 UTC). Every value is percent-encoded
(``urllib.parse.quote``, no character left safe) before it is put in, so a host name cannot
change the URL's structure; ``{{`` and ``}}`` write literal braces (a LogQL selector). A
template with another placeholder, unbalanced braces or another scheme is refused at start.

Decisions are signed with the command keys of ``streams.command_auth``
(``FAULTSTREAM_COMMAND_*``) and published with the ``KAFKA_*`` settings and
``FAULTSTREAM_TOPIC_PREFIX``, as ``faultstream remediation approve`` does.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["LINK_FIELDS", "LINK_PAD_S", "MIN_TOKEN", "UISettings", "UISettingsError", "check_link_template"]

#: Shortest login token accepted, characters.
MIN_TOKEN = 32
#: The placeholders a link-out template may use (see the module docstring).
LINK_FIELDS = frozenset({"host", "cluster", "from_ms", "to_ms", "from_s", "to_s", "from_iso", "to_iso"})
#: Seconds a link-out's time range reaches before the verdict's window and after it.
LINK_PAD_S = 300


def check_link_template(template: str) -> str:
    """``template`` when it is a usable link-out template (an ``http://`` or ``https://`` URL
    whose placeholders are all in :data:`LINK_FIELDS`, without format specs); ValueError
    naming the problem otherwise."""
    if not template.startswith(("http://", "https://")):
        raise ValueError(f"link template {template[:80]!r} must start with http:// or https://")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"link template {template[:80]!r}: {exc} (write {{{{ and }}}} for literal braces)") from None
    for _, name, spec, conv in parts:
        if name is None:
            continue
        if name not in LINK_FIELDS or spec or conv:
            raise ValueError(f"link template {template[:80]!r}: unknown placeholder {{{name}}}; "
                             f"use {', '.join('{' + f + '}' for f in sorted(LINK_FIELDS))}")
    return template


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
    #: link-out templates (see the module docstring); None or "": no such link
    grafana_url: str | None = None
    loki_url: str | None = None
    prometheus_url: str | None = None

    @field_validator("grafana_url", "loki_url", "prometheus_url")
    @classmethod
    def _link_template(cls, value: str | None) -> str | None:
        value = (value or "").strip()
        return check_link_template(value) if value else None

    def link_templates(self) -> dict[str, str]:
        """``{"Grafana": template, "Loki": ..., "Prometheus": ...}`` of the templates set, in
        that order."""
        named = (("Grafana", self.grafana_url), ("Loki", self.loki_url), ("Prometheus", self.prometheus_url))
        return {name: t for name, t in named if t}

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
