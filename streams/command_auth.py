"""Signed remediation commands: HMAC-SHA256 with shared keys named by a key id.

A remediation command (approve, reject, cancel, reset-breaker) changes what happens to a
cluster's nodes, so the worker applies only commands signed with a key it holds. The CLI
(``faultstream remediation ...``) signs every command it sends; the worker's command agent
checks each one and dead-letters the rest with the reason (:func:`authenticate`).

**Signature.** ``signature = HMAC-SHA256(key, b"faultstream-remediation-command-v2\\n" +
canonical JSON of the command without "signature" and without the time twin "at_utc")`` as
lower-case hex (Python's ``hmac`` and ``hashlib``; compared with ``hmac.compare_digest``).
Canonical JSON: keys sorted, no spaces, UTF-8 (:func:`schemas.records.canonical_json`); a
signer in another language writes the same bytes. The signed JSON includes ``key_id``,
``command_id``, ``by``, ``reason``, ``cluster``, ``action_id`` and ``at``: none can be changed
without the key. ``command_id`` must be the command's content id
(:meth:`schemas.records.RemediationCommand.with_id`), so a replayed command is a duplicate.

**Freshness.** ``at`` (UTC ns) is when the sender signed it. A command older than ``max_age_s``
(300 s) by the worker's clock, or more than ``max_skew_s`` (30 s) in its future, is rejected
as stale: a captured command cannot be replayed later. The worker never uses ``at`` as the
decision time; it decides at its own clock (``streams.remediation.runner``).

**Keys** (pydantic-settings, prefix ``FAULTSTREAM_COMMAND_``; :class:`CommandKeySettings`):

==================================  =============================================================
variable                            meaning (default)
==================================  =============================================================
FAULTSTREAM_COMMAND_KEYS            JSON object ``{"<key id>": "<secret>", ...}`` (none)
FAULTSTREAM_COMMAND_KEY_FILE        path of a JSON file of the same shape (none); keys from
                                    both are used, the same id twice with different secrets
                                    is an error
FAULTSTREAM_COMMAND_SIGNING_KEY     the key id the CLI signs with (default: the only key; with
                                    several keys it must be set)
FAULTSTREAM_COMMAND_MAX_AGE_S       oldest command the worker accepts, seconds (300)
FAULTSTREAM_COMMAND_MAX_SKEW_S      how far in the future a command's ``at`` may be, s (30)
==================================  =============================================================

A key id is 1-64 characters of letters, digits, ``.``, ``_``, ``-``; a secret at least 32
characters (its UTF-8 bytes are the HMAC key; ``python -c "import secrets;
print(secrets.token_hex(32))"`` makes one). **Rotation:** add the new key beside the old one on
every worker, switch the CLI's ``FAULTSTREAM_COMMAND_SIGNING_KEY`` to it, then remove the old
key once no command signed with it can still be fresh (``max_age_s``). A worker without any
key rejects every command (fails closed).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Mapping

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.records import RemediationCommand, canonical_json

__all__ = [
    "CommandAuthError",
    "CommandKeyError",
    "CommandKeySettings",
    "Keyring",
    "MIN_SECRET",
    "authenticate",
    "sign",
    "signing_payload",
]

NS = 1_000_000_000
#: Shortest secret accepted, characters.
MIN_SECRET = 32
_DOMAIN = b"faultstream-remediation-command-v2\n"
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_HEX = re.compile(r"^[0-9a-f]{64}$")


class CommandKeyError(ValueError):
    """Command keys that cannot be used: a bad key id, a short secret, an unreadable or
    malformed key file, no key to sign with. The message says which and where."""


class CommandAuthError(ValueError):
    """A command the worker must not apply: unsigned, signed with an unknown key, badly
    signed, with a ``command_id`` that is not its content id, or stale. The message is the
    dead-letter reason."""


class Keyring:
    """Shared command keys by key id (``{key_id: secret bytes}``) and the id to sign with."""

    def __init__(self, keys: Mapping[str, bytes], signing_key: str | None = None):
        for key_id, secret in keys.items():
            if not _KEY_ID.match(key_id):
                raise CommandKeyError(f"command key id {key_id!r}: 1-64 letters, digits, '.', '_' or '-'")
            if len(secret) < MIN_SECRET:
                raise CommandKeyError(f"command key {key_id!r}: the secret has {len(secret)} bytes, "
                                      f"at least {MIN_SECRET} are needed")
        if signing_key is not None and signing_key not in keys:
            raise CommandKeyError(f"signing key {signing_key!r} is not among the command keys "
                                  f"({', '.join(sorted(keys)) or 'none'})")
        self._keys = dict(keys)
        self._signing = signing_key

    def __bool__(self) -> bool:
        return bool(self._keys)

    def ids(self) -> list[str]:
        """The key ids held, sorted."""
        return sorted(self._keys)

    def secret(self, key_id: str) -> bytes | None:
        """The secret of ``key_id``, or None."""
        return self._keys.get(key_id)

    def signing_key_id(self) -> str:
        """The key id to sign with: the configured one, else the only key. Raises
        :class:`CommandKeyError` when there is none or several to choose from."""
        if self._signing is not None:
            return self._signing
        if len(self._keys) == 1:
            return next(iter(self._keys))
        if not self._keys:
            raise CommandKeyError("no command signing key: set FAULTSTREAM_COMMAND_KEYS or "
                                  "FAULTSTREAM_COMMAND_KEY_FILE (the worker holds the same keys)")
        raise CommandKeyError(f"{len(self._keys)} command keys ({', '.join(self.ids())}): set "
                              "FAULTSTREAM_COMMAND_SIGNING_KEY to the one to sign with")


class CommandKeySettings(BaseSettings):
    """Command keys and freshness limits from the environment (see the module docstring)."""

    model_config = SettingsConfigDict(env_prefix="FAULTSTREAM_COMMAND_", extra="ignore")

    keys: dict[str, SecretStr] = Field(default_factory=dict)
    key_file: Path | None = None
    signing_key: str | None = None
    max_age_s: float = Field(default=300.0, gt=0)
    max_skew_s: float = Field(default=30.0, ge=0)

    def keyring(self) -> Keyring:
        """The keys of ``keys`` and ``key_file`` together. Raises :class:`CommandKeyError`
        for an unreadable or malformed key file, a key id given twice with different secrets,
        a bad key id or a short secret."""
        keys = {k: v.get_secret_value().encode("utf-8") for k, v in self.keys.items()}
        if self.key_file is not None:
            try:
                data = json.loads(self.key_file.read_text(encoding="utf-8"))
            except OSError as exc:
                raise CommandKeyError(f"command key file {self.key_file}: cannot read: {exc.strerror or exc}") from exc
            except ValueError as exc:
                raise CommandKeyError(f"command key file {self.key_file}: not JSON: {exc}") from exc
            if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
                raise CommandKeyError(f"command key file {self.key_file}: expected a JSON object "
                                      '{"<key id>": "<secret>", ...}')
            for key_id, secret in data.items():
                raw = secret.encode("utf-8")
                if keys.get(key_id, raw) != raw:
                    raise CommandKeyError(f"command key {key_id!r} is given twice with different secrets "
                                          f"(FAULTSTREAM_COMMAND_KEYS and {self.key_file})")
                keys[key_id] = raw
        return Keyring(keys, self.signing_key)


def signing_payload(cmd: RemediationCommand) -> bytes:
    """The bytes a command's signature covers: a fixed domain prefix and the canonical JSON
    of every field but ``signature`` and the time twin ``at_utc``."""
    data = cmd.model_dump(mode="json", exclude={"signature", "at_utc"})
    return _DOMAIN + canonical_json(data).encode("utf-8")


def _mac(secret: bytes, cmd: RemediationCommand) -> str:
    return hmac.new(secret, signing_payload(cmd), hashlib.sha256).hexdigest()


def sign(cmd: RemediationCommand, keyring: Keyring, key_id: str | None = None) -> RemediationCommand:
    """A copy of ``cmd`` with ``key_id`` (``key_id`` or the keyring's signing key), its
    content ``command_id`` and the HMAC-SHA256 ``signature``. Raises
    :class:`CommandKeyError` when there is no key to sign with."""
    kid = key_id or keyring.signing_key_id()
    secret = keyring.secret(kid)
    if secret is None:
        raise CommandKeyError(f"no command key {kid!r} (held: {', '.join(keyring.ids()) or 'none'})")
    out = cmd.model_copy(update={"key_id": kid, "signature": ""}).with_id()
    out.signature = _mac(secret, out)
    return out


def authenticate(cmd: RemediationCommand, keyring: Keyring, now_ns: int, *, max_age_s: float = 300.0,
                 max_skew_s: float = 30.0) -> RemediationCommand:
    """Return ``cmd`` when it is signed with a held key, its ``command_id`` is its content id
    and its ``at`` is within ``max_age_s`` before / ``max_skew_s`` after ``now_ns`` (the
    worker's clock, UTC ns). Raises :class:`CommandAuthError` with the reason otherwise."""
    what = f"{cmd.command} by {cmd.by!r}"
    if not keyring:
        raise CommandAuthError(f"{what}: the worker holds no command key (FAULTSTREAM_COMMAND_KEYS / "
                               "FAULTSTREAM_COMMAND_KEY_FILE): every command is refused")
    if not cmd.signature or not cmd.key_id:
        raise CommandAuthError(f"{what}: unsigned (no key_id/signature): sign it with faultstream remediation")
    secret = keyring.secret(cmd.key_id)
    if secret is None:
        raise CommandAuthError(f"{what}: signed with unknown key {cmd.key_id[:64]!r}")
    if not _HEX.match(cmd.signature) or not hmac.compare_digest(_mac(secret, cmd), cmd.signature):
        raise CommandAuthError(f"{what}: bad signature for key {cmd.key_id!r}")
    if cmd.command_id != cmd.model_copy().with_id().command_id:
        raise CommandAuthError(f"{what}: command_id {cmd.command_id!r} is not the command's content id")
    age = (now_ns - cmd.at) / NS
    if age > max_age_s:
        raise CommandAuthError(f"{what}: stale: sent {age:.0f} s ago (max_age_s {max_age_s:g})")
    if -age > max_skew_s:
        raise CommandAuthError(f"{what}: sent {-age:.0f} s in the future (max_skew_s {max_skew_s:g})")
    return cmd
