"""Ed25519 model signatures: what signs, what verifies, and what cannot."""

from __future__ import annotations

import stat

import pytest

from components.common import signing

DIGEST = "ab" * 32


def _pair(tmp_path, name="keys"):
    private, public = signing.write_pair(tmp_path / name)
    signer = signing.private_key({signing.SIGNING_KEY_ENV: private.read_text()})
    verifier = signing.public_key({signing.VERIFY_KEY_ENV: public.read_text()})
    return private, public, signer, verifier


def test_a_signature_verifies_under_its_public_key_only(tmp_path):
    private, public, signer, verifier = _pair(tmp_path)
    tag = signing.sign(DIGEST, signer)
    assert tag.startswith(f"ed25519:{signing.key_id(verifier)}:")
    assert signing.verifies(tag, DIGEST, verifier)
    assert not signing.verifies(tag, "cd" * 32, verifier)  # another model
    _, _, other_signer, other_verifier = _pair(tmp_path, "other")
    assert not signing.verifies(tag, DIGEST, other_verifier)
    assert not signing.verifies(signing.sign(DIGEST, other_signer), DIGEST, verifier)
    assert signing.signer_of(signing.sign(DIGEST, other_signer)) == signing.key_id(other_verifier)
    for broken in ("", "hmac:" + "00" * 32, tag.replace("ed25519", "rsa"), tag[:-4] + "AAAA"):
        assert not signing.verifies(broken, DIGEST, verifier), broken


def test_the_signing_key_derives_the_verify_key_and_a_loader_holds_only_the_public_one(tmp_path):
    private, public, signer, verifier = _pair(tmp_path)
    # the register task: its private key verifies what it signed
    derived = signing.public_key({signing.SIGNING_KEY_ENV: private.read_text()})
    assert signing.key_id(derived) == signing.key_id(verifier)
    # a loader: the public key alone, which cannot sign
    assert signing.private_key({signing.VERIFY_KEY_ENV: public.read_text()}) is None
    assert not hasattr(verifier, "sign")
    assert signing.public_key({}) is None  # no keys: digests only


def test_keys_are_written_once_the_private_one_for_its_owner_only(tmp_path):
    private, public, _, _ = _pair(tmp_path)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError, match="never overwritten"):
        signing.write_pair(tmp_path / "keys")


@pytest.mark.parametrize("text", ["not-a-key", "YWJj", "A" * 60])
def test_a_key_that_is_no_ed25519_key_is_refused_by_name(text):
    with pytest.raises(signing.SigningKeyError, match=signing.VERIFY_KEY_ENV):
        signing.public_key({signing.VERIFY_KEY_ENV: text})
    with pytest.raises(signing.SigningKeyError, match=signing.SIGNING_KEY_ENV):
        signing.private_key({signing.SIGNING_KEY_ENV: text})


def test_the_cli_makes_a_pair(tmp_path, capsys):
    assert signing.main([str(tmp_path / "k")]) == 0
    assert "signing-key" in capsys.readouterr().out
    assert signing.main([str(tmp_path / "k")]) != 0
    assert "exists" in capsys.readouterr().err
