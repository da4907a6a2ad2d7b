"""Credentials are known by their shape, not only by a few names: a URI's query or fragment
parameter named like one (``sig``, ``pwd``, ``auth``, ``#access_token``), a value shaped like a
token or an access key, a cluster file's ``DB_PASS``. Deploy refuses what a run would refuse,
before anything is uploaded; a guessable id secret is refused."""

from __future__ import annotations

import json

import pytest

from components.common import hashing
from components.common.tracking import CredentialError, carries_credentials, check_no_credentials

CATEGORY = "security"

CARRYING = [  # (what, uri, the credential in it)
    (
        "a SAS signature (sig=)",
        "https://st.example.com/raw?sv=2024-01-01&sig=abcDEF123%3D",
        "abcDEF123%3D",
    ),
    ("a password parameter (pwd=)", "s3://bucket/raw?pwd=hunter2", "hunter2"),
    (
        "a fragment token (#access_token=)",
        "https://ml.example.com/#access_token=abc.def",
        "abc.def",
    ),
    (
        "an auth parameter (auth=)",
        "https://ml.example.com/?auth=Basic%20dXNlcjpwYXNz",
        "dXNlcjpwYXNz",
    ),
    ("a presigned URL (X-Amz-Signature=)", "https://h.example.com/x?X-Amz-Signature=ab12", "ab12"),
    ("an API key parameter (api-key=)", "https://h.example.com/?api-key=k-998877", "k-998877"),
    (
        "an AWS access key id in the path",
        "https://h.example.com/raw/AKIAABCDEFGHIJKLMNOP/",
        "AKIAABCDEFGHIJKLMNOP",
    ),
    (
        "a web token under a neutral name",
        "https://h.example.com/?t=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln",
        "eyJhbGciOiJIUzI1NiJ9",
    ),
    ("a password in the userinfo", "https://user:pa55@ml.example.com", "pa55"),
]
CLEAN = [
    "https://mlflow.example.com",
    "http://127.0.0.1:5000",
    "gs://bucket/raw",
    "s3://bucket/raw?versionId=3HL4kqtJlcpXroDTDmJ",
    "https://h.example.com/?design=a&bypass=1",
]


@pytest.mark.parametrize(("what", "uri", "secret"), CARRYING)
def test_a_uri_carrying_a_credential_is_refused_by_its_shape(what, uri, secret, fault_report):
    assert carries_credentials(uri)
    with pytest.raises(CredentialError) as refused:
        check_no_credentials(uri, "raw_uri")
    assert secret not in str(refused.value)  # never echoed
    fault_report(
        CATEGORY,
        f"a URI carrying {what}",
        "refused in one line with the credential redacted",
    )


@pytest.mark.parametrize("uri", CLEAN)
def test_a_uri_without_credentials_passes(uri):
    assert not carries_credentials(uri) and check_no_credentials(uri) == uri


def test_deploy_refuses_a_cluster_file_with_credentials_before_it_compiles(
    tmp_path, monkeypatch, fault_report
):
    """The cluster file's trainjob env with a DB password and an API key: refused by the run's own
    parameter check, at deploy, naming where they are and never their values."""
    import kube.types
    from pipelines.compile import cluster_defaults, compile_pipeline
    from pipelines.params import ParameterError, check_parameters

    doc = json.loads((kube.types.CLUSTERS / "a100.json").read_text())
    doc["trainjob"]["env"].update({"DB_PASS": "hunter2-db", "SERVICE_API_KEY": "k-123456"})
    (tmp_path / "a100.json").write_text(json.dumps(doc))
    monkeypatch.setattr(kube.types, "CLUSTERS", tmp_path)
    images = {"runtime": "r.example.com/rt:1", "trainer": "r.example.com/tr:1"}
    with pytest.raises(ParameterError) as refused:
        check_parameters(cluster_defaults("a100", images))
    said = str(refused.value)
    assert "trainjob.env.DB_PASS" in said and "trainjob.env.SERVICE_API_KEY" in said
    assert "hunter2-db" not in said and "k-123456" not in said
    with pytest.raises(ParameterError):
        compile_pipeline(tmp_path / "pipeline.yaml", cluster_defaults("a100", images))
    assert not (tmp_path / "pipeline.yaml").exists()
    fault_report(
        CATEGORY,
        "make deploy with DB_PASS and an API key in kube/clusters/<env>.json's trainjob env",
        "refused by the run's own parameter check before compiling or uploading, naming the keys, "
        "never the values",
    )


@pytest.mark.parametrize("secret", ["aaaaaaaaaaaaaaaa", "abababababababab", "abcabcabcabcabca"])
def test_a_guessable_id_secret_is_refused(secret, monkeypatch, fault_report):
    monkeypatch.setenv(hashing.KEY_ENV, secret)
    hashing._derived_key.cache_clear()
    with pytest.raises(hashing.IdKeyError, match="too guessable"):
        hashing.id_hash_key()
    fault_report(
        CATEGORY,
        f"id secret {secret!r} (16 characters, few distinct)",
        f"refused: under {hashing.MIN_SECRET_BITS} bits by its characters' spread",
    )


def test_a_random_id_secret_is_taken(monkeypatch):
    import secrets

    for secret in (secrets.token_urlsafe(24), secrets.token_hex(16)):
        monkeypatch.setenv(hashing.KEY_ENV, secret)
        assert hashing.id_hash_key() != hashing.HASH_KEY


def test_a_recorded_key_fingerprint_is_no_oracle_for_guessed_secrets(
    tmp_path, monkeypatch, fault_report
):
    """A registry reader holds a dataset's (and so a model's) key fingerprint and guesses the
    secret: each guess costs a full scrypt, so even the weakest accepted secret is out of reach,
    where one SHA-256 a guess (the legacy form) was not."""
    import time

    from tests.integration.conftest import make_dataset

    secret = "Qx7-deployment-secret-2026"
    monkeypatch.setenv(hashing.KEY_ENV, secret)
    data = make_dataset(tmp_path)
    recorded = json.loads((data / "meta.json").read_text())["buckets"]["key_fingerprint"]
    assert recorded == hashing.key_fingerprint() != hashing.legacy_fingerprint()
    guesses = [f"guess-{i:04d}" for i in range(8)]
    started = time.perf_counter()
    assert all(hashing._fingerprint.__wrapped__(g) != recorded for g in guesses)
    per_guess = (time.perf_counter() - started) / len(guesses)
    started = time.perf_counter()
    for g in guesses * 1000:
        hashing.legacy_fingerprint(g)
    legacy = (time.perf_counter() - started) / (len(guesses) * 1000)
    assert per_guess > 1000 * legacy and per_guess > 0.02
    years = 2 ** (hashing.MIN_SECRET_BITS - 1) * per_guess / (365 * 86400)
    assert years > 1000
    fault_report(
        "security",
        "a registry reader tests guesses of the id secret against a recorded key fingerprint",
        f"each guess costs a scrypt ({per_guess * 1000:.0f} ms here, {per_guess / legacy:,.0f}x "
        f"the legacy SHA-256): half the space of a {hashing.MIN_SECRET_BITS}-bit secret takes "
        f"about {years:,.0f} core-years",
    )
