"""Checking a pack's Ed25519 signature (`tcc run --require-signature PUBKEY`; docs/security.md).

`manifest.sig` signs the exact bytes of manifest.json, which holds every other member's size
and sha256. The check runs on the raw bytes before the manifest is parsed, so a pack that
fails it is refused before anything in it is interpreted or mapped executable. The
cryptography is pyca/cryptography's (the optional extra `tcc[sign]`), imported only here;
runtime_c/src/signature.c makes the same check through the system's libcrypto.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tcc.rt.errors import PublicKeyError

MAKE_PUBLIC_KEY = "openssl pkey -in key.pem -pubout -out key.pub"


def load_public_key(path) -> Callable[[bytes, bytes], bool]:
    """`verify(message, signature) -> bool` for the Ed25519 public key in the PEM file `path`."""
    where = os.fsdecode(path)
    try:
        from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from cryptography.hazmat.primitives.serialization import load_pem_public_key
    except ImportError:
        raise PublicKeyError("--require-signature needs the cryptography package: "
                             "pip install 'tcc[sign]'") from None
    try:
        with open(where, "rb") as f:
            pem = f.read(1 << 20)
    except OSError as e:
        raise PublicKeyError(f"{where}: cannot read the public key: {e.strerror or e}") from None
    try:
        key = load_pem_public_key(pem)
    except (ValueError, UnsupportedAlgorithm):
        key = None
    if not isinstance(key, Ed25519PublicKey):
        raise PublicKeyError(f"{where}: not an Ed25519 public key in PEM format; make one with: "
                             f"{MAKE_PUBLIC_KEY}")

    def verify(message: bytes, signature: bytes) -> bool:
        try:
            key.verify(bytes(signature), bytes(message))
        except InvalidSignature:
            return False
        return True

    return verify
