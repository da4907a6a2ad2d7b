"""Model signatures whose verifier cannot forge them: Ed25519 over a registered model's digest.

An HMAC signs and verifies with one key, so every pod that verifies a model (serving, batch
scoring, evaluate) could also sign a planted one. Here the register task alone holds the
private key (``$DAILYREC_MODEL_SIGNING_KEY``, the Secret ``dailyrec-model-signing``); every
loader holds the public key (``$DAILYREC_MODEL_VERIFY_KEY``, the ConfigMap
``dailyrec-model-verify``: public, but only an admin may change it) and refuses a version whose
signature does not verify. Both keys are the base64 of their 32 raw bytes;
``python -m components.common.signing DIR`` makes a pair (the private file readable by its owner
only).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import sys
from pathlib import Path

from components.common.cli import Exit, cli_parser, exit_for

SIGNING_KEY_ENV = "DAILYREC_MODEL_SIGNING_KEY"
"""The private key: the register task only."""
VERIFY_KEY_ENV = "DAILYREC_MODEL_VERIFY_KEY"
"""The public key: every loader of a registered model."""
SCHEME = "ed25519"
DOMAIN = b"dailyrec-model-digest/v1\0"
"""Prefixed to what is signed: a signature made here verifies nothing else."""


class SigningKeyError(ValueError):
    """A key in the environment that is no Ed25519 key (the message names the variable)."""


def _raw(variable: str, text: str) -> bytes:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise SigningKeyError(
            f"${variable} is no Ed25519 key (the base64 of 32 bytes; make a pair with "
            "python -m components.common.signing DIR)"
        )
    return raw


def private_key(environ: dict | None = None):
    """The signing key from the environment, or None."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    text = (os.environ if environ is None else environ).get(SIGNING_KEY_ENV, "")
    if not text.strip():
        return None
    return Ed25519PrivateKey.from_private_bytes(_raw(SIGNING_KEY_ENV, text))


def public_key(environ: dict | None = None):
    """The key loaders verify with: ``$DAILYREC_MODEL_VERIFY_KEY``, else the signing key's public
    half (the register task holds only that), else None (no signature required)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    env = os.environ if environ is None else environ
    text = env.get(VERIFY_KEY_ENV, "")
    if text.strip():
        return Ed25519PublicKey.from_public_bytes(_raw(VERIFY_KEY_ENV, text))
    signer = private_key(env)
    return signer.public_key() if signer is not None else None


def key_id(public) -> str:
    """16 hex digits naming a public key (it is public: a plain digest is fine)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def sign(digest: str, signer) -> str:
    """``ed25519:<key id>:<base64 signature>`` of a model's digest."""
    signature = signer.sign(DOMAIN + digest.encode())
    return f"{SCHEME}:{key_id(signer.public_key())}:{base64.b64encode(signature).decode()}"


def verifies(tag: str, digest: str, public) -> bool:
    """Whether ``tag`` (:func:`sign`'s) is a valid signature of ``digest`` under ``public``."""
    from cryptography.exceptions import InvalidSignature

    scheme, _, rest = (tag or "").partition(":")
    _, _, encoded = rest.partition(":")
    if scheme != SCHEME:
        return False
    try:
        public.verify(base64.b64decode(encoded, validate=True), DOMAIN + digest.encode())
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def signer_of(tag: str) -> str:
    """The key id a signature tag names ('' for none or another scheme)."""
    parts = (tag or "").split(":")
    return parts[1] if len(parts) == 3 and parts[0] == SCHEME else ""


def write_pair(folder: str | Path) -> tuple[Path, Path]:
    """A new key pair in ``folder``: ``signing-key`` (mode 0600) and ``verify-key``."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        PublicFormat,
    )

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    signing, verify = folder / "signing-key", folder / "verify-key"
    for path, raw, mode in ((signing, private, 0o600), (verify, public, 0o644)):
        if path.exists():
            raise FileExistsError(f"{path} exists: a key is never overwritten")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(base64.b64encode(raw).decode() + "\n")
    return signing, verify


def main(argv: list[str] | None = None) -> int:
    p = cli_parser(
        "python -m components.common.signing",
        "Make an Ed25519 key pair for signing registered models.",
    )
    p.add_argument("folder", help="where to write signing-key (0600) and verify-key")
    args = p.parse_args(argv)
    try:
        signing, verify = write_pair(args.folder)
    except OSError as exc:
        print(f"signing: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    print(f"wrote {signing} (the register task's Secret) and {verify} (every loader's ConfigMap)")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
