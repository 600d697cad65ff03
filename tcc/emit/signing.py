"""Signing packs with Ed25519 (`tcc compile --sign KEY`; docs/security.md).

The signature covers the exact bytes of manifest.json, which holds the size and sha256 of
every other member, so it vouches for the whole pack; it is stored as the member
`manifest.sig` (64 raw bytes), which the manifest does not list. The cryptography is
pyca/cryptography's (the optional extra `tcc[sign]`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tcc.errors import TccError

MAKE_KEY = "openssl genpkey -algorithm ed25519 -out key.pem"


class SigningError(TccError):
    """The signing key cannot be used."""


def load_signing_key(path) -> Callable[[bytes], bytes]:
    """The function that signs a manifest with the Ed25519 private key in the PEM file `path`."""
    where = os.fsdecode(path)
    try:
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import load_pem_private_key
    except ImportError:
        raise SigningError("--sign needs the cryptography package: pip install 'tcc[sign]'") from None
    try:
        with open(where, "rb") as f:
            pem = f.read(1 << 20)
    except OSError as e:
        raise SigningError(f"--sign {where}: cannot read the key: {e.strerror or e}") from None
    try:
        key = load_pem_private_key(pem, password=None)
    except TypeError:
        raise SigningError(f"--sign {where}: the key is encrypted; tcc reads unencrypted keys "
                           f"only ({MAKE_KEY})") from None
    except (ValueError, UnsupportedAlgorithm):
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"--sign {where}: not an Ed25519 private key in PEM format; make one "
                           f"with: {MAKE_KEY}")
    return key.sign
