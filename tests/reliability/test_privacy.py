"""What a model version reveals about its users: the snapshot it carries, attacked the way a
reader of the registry can (hash every candidate id, compare keys), under the public default
key and under a deployment's secret."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from components.common import hashing
from components.score.features import UserState, pair_digest, write_snapshot
from tests.integration.conftest import make_dataset

pytestmark = pytest.mark.integration


def _attack(raw, state: UserState, key: str) -> dict[str, float]:
    """Share of the snapshot's users and (user, item) pairs an attacker holding ``key`` and
    every raw id of the logs names exactly."""
    table = pa.concat_tables(
        pq.read_table(part, columns=["user_id", "item_id"]) for part in raw.glob("dt=*/*.parquet")
    )
    users = np.unique(table.column("user_id").to_numpy())
    items = np.unique(table.column("item_id").to_numpy())
    user_keys = hashing.hash_ids(users, key=key)[0]
    item_keys = hashing.hash_ids(items, key=key)[0]
    stored = np.unique(state.totals["user"]["key"])
    named = np.isin(stored, user_keys)
    # every (user, item) pair the attacker can form, keyed the way the snapshot keys pairs
    u = np.repeat(user_keys, len(item_keys))
    i = np.tile(item_keys, len(user_keys))
    pairs = state.totals["user_item"]["key"]
    with pytest.MonkeyPatch.context() as mp:  # pair digests are keyed by the attacker's key
        mp.setattr(hashing, "id_hash_key", lambda environ=None: key)
        guessed = pair_digest(u, i)
    return {
        "users": float(named.mean()),
        "pairs": float(np.isin(pairs, guessed).mean()),
    }


def test_a_model_snapshot_holds_no_click_log_and_reverses_only_under_the_public_key(
    tmp_path, monkeypatch, fault_report
):
    raw = tmp_path / "raw"
    found = {}
    for name, secret in (("public", None), ("secret", "the-deployment-s-own-secret-0")):
        if secret is None:
            monkeypatch.delenv(hashing.KEY_ENV, raising=False)
        else:
            monkeypatch.setenv(hashing.KEY_ENV, secret)
        data = make_dataset(tmp_path, name=f"data-{name}")
        meta = json.loads((data / "meta.json").read_text())
        files = write_snapshot(data, tmp_path / f"snapshot-{name}")
        assert set(files) == {"count_state", "user_state"}
        state = UserState.load(files["user_state"])
        kept = sum(meta["rows"]["kept"].values())
        events = len(state.events["ts"])
        users = len(state.totals["user"]["key"])
        # at most the last seq_len clicks and neg_len skips per user, not the window's events
        assert events <= users * (meta["seq_len"] + meta["neg_len"]) and events < 0.5 * kept
        # histories hold bucket residues (times the rank within a time step), never an item's key
        residues = state.events["item_key"]
        modulus = meta["buckets"]["item"] - 1
        ranks = 2 + meta["seq_len"] + meta["neg_len"]  # a rank within a time step, at most
        assert residues.min() >= modulus and residues.max() < ranks * modulus
        found[name] = {
            "events": events,
            "kept": kept,
            "public": _attack(raw, state, hashing.HASH_KEY),
        }
    public, secret = found["public"]["public"], found["secret"]["public"]
    assert public == {"users": 1.0, "pairs": 1.0}  # generated data: the documented default
    assert secret == {"users": 0.0, "pairs": 0.0}  # without the secret, nothing is named
    share = found["secret"]["events"] / found["secret"]["kept"]
    fault_report(
        "security",
        "a registry reader rebuilds users' click histories from a model version",
        f"the version carries no events log: {found['secret']['events']:,} of "
        f"{found['secret']['kept']:,} kept events ({share:.0%}: each user's last clicks and "
        "skips, items as bucket residues) and per-user/pair counts keyed by a keyed hash; "
        "hashing every raw id names 100% of users and (user, item) pairs under the public "
        "default key (generated data only) and 0% under a deployment secret",
    )


def test_a_snapshot_keeps_times_coarse_enough_not_to_single_users_out(tmp_path, fault_report):
    """Exact times single a user out: two known click times, or the last exposure time a raw log
    shows. The snapshot keeps ``SNAPSHOT_SECONDS``: the same attacks, measured on the snapshot a
    version carries and on one with exact times."""
    from benchmarks.snapshot_time import last_exposure_links, two_clicks_single_out
    from components.common.dataset_meta import DatasetMeta
    from components.score.features import (
        SNAPSHOT_SECONDS,
        Layout,
        read_user_events,
        user_event_parts,
    )
    from components.train.model import Vocab

    data = make_dataset(tmp_path)
    shipped = UserState.load(write_snapshot(data, tmp_path / "snapshot")["user_state"])
    layout = Layout.of(Vocab.from_meta(DatasetMeta.read(data, splits=())), check_key=False)
    exact = UserState.of_events(read_user_events(user_event_parts(data)), layout, resolution=1)
    assert (shipped.events["ts"] % SNAPSHOT_SECONDS == 0).all()
    times = shipped.totals["user"]["exposure"]
    assert (times % SNAPSHOT_SECONDS == 0).all() and (
        times >= exact.totals["user"]["exposure"]
    ).all()
    attacks = {
        name: (two_clicks_single_out(s.events), last_exposure_links(s.totals["user"]["exposure"]))
        for name, s in (("exact", exact), ("shipped", shipped))
    }
    assert attacks["exact"][0] > 0.9 and attacks["exact"][1] > 0.5
    assert attacks["shipped"][0] < attacks["exact"][0] / 2
    assert attacks["shipped"][1] < 0.05
    fault_report(
        "privacy",
        "an attacker knows two click times of a user, or holds the raw log's last exposure times",
        f"the snapshot keeps times at {SNAPSHOT_SECONDS} s: two clicks single out "
        f"{attacks['shipped'][0]:.0%} of users (exact times: {attacks['exact'][0]:.0%}), the last "
        f"exposure links {attacks['shipped'][1]:.1%} ({attacks['exact'][1]:.0%}); what it costs "
        "in served AUC: make bench-quality",
    )
