"""make deploy reads the KFP backend's version through the real kfp.Client and refuses one older than
the pipeline needs (2.17: optional Secret env vars, the schedule-time placeholder, recursive DAG
states, the run deadline)."""

from __future__ import annotations

import http.server
import json
import re
import threading

import pytest

from pipelines.deploy import DeployConfig, deploy
from pipelines.kfp_version import UnsupportedBackend, check_backend, parse_version

pytestmark = pytest.mark.filterwarnings("ignore:This client only works:FutureWarning")


@pytest.fixture
def kfp_api():
    """A stand-in KFP API server answering healthz as kubeflow/pipelines' apiserver does; set ``.tag``."""

    class Healthz(http.server.BaseHTTPRequestHandler):
        tag = "2.17.0"
        paths: list[str] = []

        def do_GET(self):  # noqa: N802 (http.server's name)
            Healthz.paths.append(self.path)
            body = json.dumps(
                {"commit_sha": "0123abc", "tag_name": Healthz.tag, "multi_user": False}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Healthz.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield Healthz
    server.shutdown()


def client(url):
    import kfp

    return kfp.Client(host=url, namespace="dailyrec")


def test_the_version_comes_from_healthz_through_the_real_client(kfp_api):
    assert check_backend(client(kfp_api.url)) == "2.17.0"
    assert kfp_api.paths[-1] == "/apis/v2beta1/healthz"
    kfp_api.tag = "v2.18.1-rc.1"
    assert check_backend(client(kfp_api.url)) == "v2.18.1-rc.1"


@pytest.mark.parametrize(
    ("tag", "says", "not_said"),
    [
        ("2.16.1", "schedule-time placeholder", "optional Secret"),
        ("2.14.3", "optional Secret/ConfigMap env vars", "PipelineTaskFinalStatus"),
        ("2.13.1", "PipelineTaskFinalStatus", None),
    ],
)
def test_an_older_backend_is_refused_in_one_line_naming_what_it_lacks(kfp_api, tag, says, not_said):
    kfp_api.tag = tag
    with pytest.raises(UnsupportedBackend) as caught:
        check_backend(client(kfp_api.url))
    message = str(caught.value)
    assert message.startswith(f"the KFP backend is {tag}; dailyrec-daily needs >= 2.17 (")
    assert says in message and "\n" not in message
    assert not_said is None or not_said not in message


def test_a_backend_that_does_not_say_is_let_through_with_a_warning(kfp_api, capsys):
    kfp_api.tag = "unknown"  # what a development build of the apiserver reports
    assert check_backend(client(kfp_api.url)) == "unknown"
    assert "reports version 'unknown'; this pipeline needs >= 2.17" in capsys.readouterr().err


def test_parse_version():
    assert parse_version("2.14.0") == (2, 14) and parse_version("v2.9") == (2, 9)
    assert parse_version("2.14.0-rc.1") == (2, 14)
    assert parse_version("unknown") is None and parse_version("2") is None


def test_make_deploy_stops_before_applying_anything_on_an_old_backend(kfp_api, tmp_path):
    commands = []

    def run_command(cmd, **kwargs):  # records instead of running: no image build, no kubectl
        commands.append(cmd)
        raise AssertionError(f"ran {cmd}")

    kfp_api.tag = "2.5.0"
    config = DeployConfig(
        env="a100",
        registry="reg.example/ml",
        host=kfp_api.url,
        tag="t1",
        skip_images=True,
        out=str(tmp_path / "out"),
    )
    with pytest.raises(
        UnsupportedBackend, match=r"KFP backend is 2\.5\.0; dailyrec-daily needs >= 2\.17"
    ):
        deploy(config, client_factory=client, run_command=run_command)
    assert commands == [] and kfp_api.paths == ["/apis/v2beta1/healthz"]


def test_the_minimum_is_stated_once_in_the_docs_and_matches_the_code():
    from pathlib import Path

    from pipelines.daily import MIN_KFP_BACKEND

    root = Path(__file__).resolve().parents[2]
    needed = ".".join(map(str, MIN_KFP_BACKEND))
    cluster = (root / "docs" / "cluster.md").read_text()
    assert f"| Kubeflow Pipelines, multi-user | **≥ {needed}**" in cluster
    others = [root / "README.md", root / "manifests" / "README.md", *root.glob("docs/*.md")]
    for path in others:
        for found in re.findall(
            r"(?:Kubeflow Pipelines|KFP)[^\n|]{0,20}≥ (\d+\.\d+)", path.read_text()
        ):
            assert found == needed, f"{path.name} states KFP ≥ {found}"
