"""The scoring server bounds its work and tells a client only what the client sent wrong.

The app ``make serve`` runs (:mod:`components.score.app`) on a registered version of the
serving tests' world, in this process (Starlette's test client: the same ASGI app uvicorn
serves; ``tests/integration/test_serving.py`` runs it under uvicorn).
"""

from __future__ import annotations

import io
import json
import os
import time

import numpy as np
import pytest

from tests.serving_world import AT, NAME, day5, requests_of

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(world, registered, tmp_path_factory):
    """A client of the scoring app of the verified champion."""
    from fastapi.testclient import TestClient

    from components.common.integrity import verified_download
    from components.common.tracking import connect
    from components.score.app import create_app

    local = verified_download(connect(world["uri"]), NAME, 1, tmp_path_factory.mktemp("verified"))
    with TestClient(create_app(str(local), timeout=30), raise_server_exceptions=False) as client:
        yield client


def _answer(client, body, content_type="application/json"):
    response = client.post(
        "/invocations",
        content=body if isinstance(body, bytes) else json.dumps(body),
        headers={"Content-Type": content_type},
    )
    payload = response.json()
    if response.status_code != 200:  # one line, no trace, no path of this machine
        assert set(payload) == {"error_code", "message"}, payload
        assert "\n" not in payload["message"] and "Traceback" not in response.text
        assert os.getcwd() not in response.text and "/tmp" not in response.text
    return response.status_code, payload


def test_every_format_is_read_as_sent_and_nothing_unknown_is_dropped(
    world,
    served,
    fault_report,
):
    requests = requests_of(world, True).head(5)
    records = json.loads(requests.to_json(orient="records"))
    status, body = _answer(served, {"dataframe_records": records})
    assert status == 200
    expected = np.asarray(body["predictions"])
    assert len(expected) == 5 and np.std(expected) > 0
    # CSV (events as JSON lists in their cells) and Parquet score the same rows alike
    as_csv = requests.assign(
        **{c: [json.dumps(v) for v in requests[c]] for c in requests if c.startswith("events_")}
    ).to_csv(index=False)
    status, body = _answer(served, as_csv.encode(), "text/csv")
    assert status == 200
    np.testing.assert_allclose(body["predictions"], expected, rtol=1e-6)
    sink = io.BytesIO()
    requests.to_parquet(sink, index=False)
    status, body = _answer(served, sink.getvalue(), "application/x-parquet")
    assert status == 200 and np.allclose(body["predictions"], expected, rtol=1e-6)
    fault_report(
        "serving",
        "a CSV request (MLflow's server: a 400 with its stack trace and local paths)",
        "read as text, events as JSON lists in their cells: the same scores as JSON and Parquet",
    )
    # a 64-bit id beside a null is the same id as its text: typed from the JSON, not a float64
    big = 2**62 + 1
    rows = [{**records[0], "category_id": big}, {**records[1], "category_id": None}]
    status, as_int = _answer(served, {"dataframe_records": rows})
    rows[0]["category_id"] = str(big)
    status_text, as_text = _answer(served, {"dataframe_records": rows})
    assert status == status_text == 200 and as_int == as_text
    fault_report(
        "serving",
        "a 64-bit id beside a null in a JSON column (MLflow's parser: float64, the id changed)",
        "typed from the raw JSON: scored as the same id as its text",
    )
    # unknown columns and params are refused, never dropped
    misspelt = [{**records[0], "categry_id": 3}]
    status, body = _answer(served, {"dataframe_records": misspelt})
    assert status == 400 and body["message"].startswith("unknown column(s) categry_id")
    status, body = _answer(served, {"dataframe_records": records, "params": {"batch": 8}})
    assert status == 400 and body["message"].startswith("unknown param(s) 'batch'")
    status, body = _answer(served, {"dataframe_records": records, "params": {"batch_size": 2}})
    assert status == 200 and np.allclose(body["predictions"], expected, rtol=1e-6)
    fault_report(
        "serving",
        "a misspelt optional column or an unknown param (MLflow drops both before the model)",
        "HTTP 400 naming it (`unknown column(s) categry_id`, `unknown param(s) 'batch'`)",
    )
    # a dict where an id goes is no id (its text would be hashed as one)
    rows = [{**records[0], "events_item_id": [{"id": 1}] * len(records[0]["events_item_id"])}]
    status, body = _answer(served, {"dataframe_records": rows})
    assert status == 400 and "row 0 event 0: events_item_id is a dict" in body["message"]
    fault_report(
        "serving",
        "objects or lists where an id goes, inside event lists too",
        "HTTP 400 naming the row, the event and the column; nothing hashed as its Python text",
    )


def test_the_server_bounds_bodies_work_and_time_and_hides_its_failures(
    world,
    served,
    monkeypatch,
    fault_report,
):
    from components.register import pyfunc
    from components.score.protocol import MAX_BYTES

    status, body = _answer(served, b" " * (MAX_BYTES + 1))
    assert status == 413 and body["error_code"] == "REQUEST_LIMIT_EXCEEDED"
    fault_report(
        "serving",
        f"a request body over {MAX_BYTES // 2**20} MiB",
        "HTTP 413 before the body is read whole; rows (20,000) and events (200,000) per request "
        "are bounded with a 400",
    )
    # a ranking call: one user, 10,000 candidates, the user's state assembled once
    user = int(day5(world)["user_id"].iloc[0])
    n = 10_000
    ranking = {"user_id": [user] * n, "item_id": list(range(n)), "timestamp": [AT] * n}
    started = time.perf_counter()
    status, body = _answer(served, {"inputs": ranking})
    seconds = time.perf_counter() - started
    assert status == 200 and len(body["predictions"]) == n
    assert seconds < 30  # the request timeout of this app; measured in benchmarks/serving.py
    fault_report(
        "serving",
        "a ranking call of one user over 10,000 candidate items (it took 37 s and 3.4 GB when "
        "each row copied its user's history)",
        f"answered in {seconds:.1f} s here: the user's state is assembled once per request "
        "(docs/performance.md measures requests/s, p50/p99 and memory by request size)",
    )
    # past the deadline scoring stops between batches: no work outlives the 504
    records = json.loads(requests_of(world, False).head(50).to_json(orient="records"))
    scored = []

    class Late:
        @staticmethod
        def monotonic():
            return time.monotonic() + 3600

    def counting(model, batches):
        scored.extend(1 for _ in batches)
        return np.zeros(0)

    monkeypatch.setattr(pyfunc, "time", Late)
    monkeypatch.setattr("components.train.inference.predict_logits", counting)
    status, body = _answer(served, {"dataframe_records": records, "params": {"batch_size": 1}})
    assert status == 504 and body["error_code"] == "DEADLINE_EXCEEDED" and scored == []
    monkeypatch.undo()
    fault_report(
        "serving",
        "a request still scoring when the server's timeout answers 504",
        "scoring stops at the next batch (`--timeout`, 60 s, is MLflow's timeout too)",
    )

    # an unexpected failure: logged here, answered 500 with a line and nothing of the machine
    def broken(*args, **kwargs):
        raise RuntimeError(f"cannot open {os.getcwd()}/secret/file")

    monkeypatch.setattr("components.train.inference.predict_logits", broken)
    status, body = _answer(served, {"dataframe_records": records})
    assert status == 500 and body["error_code"] == "INTERNAL_ERROR"
    assert "secret" not in body["message"]
    status, body = _answer(served, b"user_id\n1\n", "text/csv")
    assert status == 400 and body["message"].startswith("missing column(s) item_id, timestamp")
    fault_report(
        "security",
        "stack traces and server paths in error answers (bad CSV, a failing model)",
        "every non-200 answer is {error_code, message} with one line: no trace, no path; an "
        "unexpected failure is logged by the server and answered 500",
    )


def _parquet_bomb(rows: int) -> bytes:
    """A few hundred bytes of Parquet that unpack to ``rows`` rows (one repeated value)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"user_id": pa.array(np.zeros(rows, dtype=np.int64))})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", row_group_size=rows)
    return sink.getvalue()


def test_a_parquet_body_is_bounded_by_its_footer_before_it_is_decoded(served, fault_report):
    from components.score.features import MAX_ROWS

    bomb = _parquet_bomb(5_000_000)
    assert len(bomb) < 200_000
    started = time.monotonic()
    status, body = _answer(served, bomb, "application/x-parquet")
    took = time.monotonic() - started
    assert status == 413 and f"holds 5,000,000 rows; at most {MAX_ROWS:,}" in body["message"]
    assert took < 5, took  # refused from the footer, nothing decoded
    assert served.get("/ping").status_code == 200
    fault_report(
        "serving",
        f"a {len(bomb) // 1024} KB Parquet body that unpacks to 5 M rows",
        f"413 from its footer's row count in {took:.2f} s, before any of it is decoded",
    )


@pytest.mark.parametrize("digits", [30, 5000])
def test_an_integer_no_id_can_be_is_a_400_naming_row_and_column(
    world, served, digits, fault_report
):
    records = json.loads(requests_of(world, False).head(2).to_json(orient="records"))
    records[1]["user_id"] = "BIG"  # json.dumps itself refuses an int of thousands of digits
    body = json.dumps({"dataframe_records": records}).replace('"BIG"', "9" * digits)
    status, answer = _answer(served, body.encode())
    assert status == 400, answer
    assert ("row 1: user_id" in answer["message"]) or ("no id or time can be" in answer["message"])
    fault_report(
        "serving",
        f"a user_id of {digits} digits",
        "400 in one line (row and column, or the number's bound), no 500, no traceback",
    )


def test_a_burst_past_the_admission_bound_gets_fast_503s_and_the_rest_answers(
    world, served, fault_report
):
    """Many more concurrent requests than the server holds: those past its bound are answered
    503 with Retry-After at once, every other one is scored, none times out."""
    from concurrent.futures import ThreadPoolExecutor

    from components.score.app import SCORING_AT_ONCE, WAITING_AT_MOST

    # requests large enough that the burst arrives while the first ones are still scored
    records = json.loads(requests_of(world, False).head(2000).to_json(orient="records"))
    body = json.dumps({"dataframe_records": records})
    burst = 6 * (SCORING_AT_ONCE + WAITING_AT_MOST)

    def post(_):
        started = time.monotonic()
        response = served.post(
            "/invocations", content=body, headers={"Content-Type": "application/json"}
        )
        return response.status_code, response.headers.get("retry-after"), time.monotonic() - started

    with ThreadPoolExecutor(max_workers=burst) as pool:
        answers = list(pool.map(post, range(burst)))
    codes = [code for code, _, _ in answers]
    assert set(codes) <= {200, 503} and codes.count(200) >= SCORING_AT_ONCE
    busy = [(after, took) for code, after, took in answers if code == 503]
    assert busy and all(after == "1" for after, _ in busy)
    assert served.get("/ping").status_code == 200
    fault_report(
        "serving",
        f"{burst} concurrent requests ({SCORING_AT_ONCE} scored at once, {WAITING_AT_MOST} may wait)",
        f"{codes.count(200)} scored, {len(busy)} answered 503 with Retry-After at once, no timeout",
    )
