"""API keys of remote endpoints: in the OS keyring (Secret Service, macOS Keychain, Windows
Credential Locker) where one works, else in a private file (0600 in a 0700 folder) in the
deskllm home. Never in the database, the logs or an error message."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from deskllm import paths

if TYPE_CHECKING:
    import keyring.backend

log = logging.getLogger("deskllm.remote")

SERVICE = "deskllm"
FILE_NAME = "remote-keys.json"


def _username(endpoint: str) -> str:
    return f"remote-endpoint:{endpoint}"


def keyring_usable(backend: keyring.backend.KeyringBackend) -> bool:
    """False for keyring's stand-in when no backend works (a Linux box without a Secret
    Service daemon, a headless server): its every call raises."""
    from keyring.backends import chainer, fail

    if isinstance(backend, fail.Keyring):
        return False
    return not (isinstance(backend, chainer.ChainerBackend) and not backend.backends)


class KeyStore:
    """Keys by endpoint name. `backend`: the keyring to use (default: the one the keyring
    library picks, which PYTHON_KEYRING_BACKEND can name); `fallback`: the private file."""

    def __init__(
        self,
        backend: keyring.backend.KeyringBackend | None = None,
        fallback: Path | None = None,
    ) -> None:
        if backend is None:
            # Imported when keys are used: importing keyring and choosing its backend take
            # about half a second, which every deskllm command would pay otherwise.
            import keyring

            backend = keyring.get_keyring()
        self.backend = backend
        self.fallback = fallback if fallback is not None else paths.home() / FILE_NAME

    @property
    def uses_keyring(self) -> bool:
        return keyring_usable(self.backend)

    def where(self) -> str:
        """Where new keys go, in words (never the key)."""
        if self.uses_keyring:
            return f"the OS keyring ({type(self.backend).__name__})"
        return f"the private file {self.fallback}"

    def set(self, endpoint: str, key: str) -> str:
        """Keep `key` for `endpoint`; returns where it went (see where())."""
        from keyring.errors import KeyringError

        if self.uses_keyring:
            try:
                self.backend.set_password(SERVICE, _username(endpoint), key)
                self._drop_from_file(endpoint)  # one place only: no stale copy lingers
                return self.where()
            except KeyringError as exc:
                # A locked or broken keyring: the file still keeps the key private.
                log.warning("the keyring refused the key of %s (%s); using %s", endpoint,
                            type(exc).__name__, self.fallback)  # fmt: skip
        keys = self._read_file()
        keys[endpoint] = key
        self._write_file(keys)
        return f"the private file {self.fallback}"

    def get(self, endpoint: str) -> str | None:
        from keyring.errors import KeyringError

        if self.uses_keyring:
            try:
                key = self.backend.get_password(SERVICE, _username(endpoint))
            except KeyringError as exc:
                log.warning("could not read the keyring (%s)", type(exc).__name__)
                key = None
            if key is not None:
                return key
        return self._read_file().get(endpoint)

    def delete(self, endpoint: str) -> None:
        from keyring.errors import KeyringError, PasswordDeleteError

        if self.uses_keyring:
            try:
                self.backend.delete_password(SERVICE, _username(endpoint))
            except PasswordDeleteError:
                pass  # it had none
            except KeyringError as exc:
                log.warning("could not delete from the keyring (%s)", type(exc).__name__)
        self._drop_from_file(endpoint)

    # The fallback file -------------------------------------------------------------------
    def _read_file(self) -> dict[str, str]:
        try:
            data = json.loads(self.fallback.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("could not read %s (%s): no keys from it", self.fallback,
                        type(exc).__name__)  # fmt: skip
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}

    def _write_file(self, keys: dict[str, str]) -> None:
        paths.private_dir(self.fallback.parent)
        tmp = self.fallback.with_name(self.fallback.name + ".tmp")
        paths.write_private_text(tmp, json.dumps(keys, indent=1, sort_keys=True))
        os.replace(tmp, self.fallback)  # whole or not at all; the rename keeps 0600

    def _drop_from_file(self, endpoint: str) -> None:
        keys = self._read_file()
        if endpoint in keys:
            del keys[endpoint]
            self._write_file(keys)


class LazyKeyStore:
    """A KeyStore made when a key is first used: the window holds one from the start, and
    choosing the keyring's backend (about half a second) would slow every start."""

    def __init__(self) -> None:
        self._store: KeyStore | None = None

    def __getattr__(self, name: str):
        if self._store is None:
            self._store = KeyStore()
        return getattr(self._store, name)
