"""charts/gpuscale-adapter takes prometheus-adapter's chart values unchanged: values files written as its users write
them (charts/gpuscale-adapter/examples) lint and render; every object validates for Kubernetes 1.28 and 1.37; the
adapter's own flag parser reads from the rendered arguments the Prometheus URL, port, relist interval, log level and
certificate asked; the APIServices are the ones asked; what cannot be honoured is named at install; the schema refuses
unknown keys and wrong types by name; and the chart packages."""

from __future__ import annotations

import base64
import json
import ssl
import tarfile
from pathlib import Path, PurePosixPath

import pytest
import trustme
import yaml

from adapter.flags import FLAGS
from harness.deploy import adapter_chart, helm
from harness.deploy.adapter_chart import CHART, EXAMPLES
from harness.deploy.manifests import Rendered, mount_covering
from harness.deploy.validation import K8S_VERSIONS, problems

EXAMPLE = {path.stem: path for path in EXAMPLES}
FULL = EXAMPLE["prometheus-adapter"]
# where each example is installed: the full one where its namespaceOverride puts everything anyway
NAMESPACES = {"prometheus-adapter": "monitoring"}


def render(name: str) -> Rendered:
    return adapter_chart.template([EXAMPLE[name]], namespace=NAMESPACES.get(name, "gpuscale"))


@pytest.fixture(scope="module")
def tls_values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tls.* as a user fills them in: a CA and a serving certificate for the Service's names."""
    ca = trustme.CA()
    cert = ca.issue_cert("gpuscale-adapter.gpuscale.svc", "gpuscale-adapter.gpuscale")
    values = {
        "tls": {
            "enable": True,
            "ca": ca.cert_pem.bytes().decode(),
            "certificate": b"".join(b.bytes() for b in cert.cert_chain_pems).decode(),
            "key": cert.private_key_pem.bytes().decode(),
        }
    }
    path = tmp_path_factory.mktemp("tls") / "tls.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_the_examples_are_there() -> None:
    assert set(EXAMPLE) >= {"prometheus-adapter", "prometheus-adapter-minimal", "prometheus-adapter-existing-rules"}


@pytest.mark.parametrize("values", [None, *EXAMPLES], ids=lambda p: p.stem if p else "defaults")
def test_helm_lints_the_chart_strictly(values: Path | None) -> None:
    done = helm.lint(CHART, [values] if values else [])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", ["defaults", "tls", *EXAMPLE], ids=str)
def test_every_rendered_object_validates(name: str, version: str, tls_values: Path) -> None:
    if name == "defaults":
        rendered = adapter_chart.template()
    elif name == "tls":
        rendered = adapter_chart.template([tls_values])
    else:
        rendered = render(name)
    assert rendered.objects
    assert [p for obj in rendered.objects for p in problems(obj, version)] == []


def test_the_full_example_sets_every_key_of_prometheus_adapters_chart() -> None:
    missing = set(adapter_chart.PROMETHEUS_ADAPTER_KEYS) - helm.key_paths(yaml.safe_load(FULL.read_text()))
    assert missing == set()


def test_every_key_of_prometheus_adapters_chart_is_a_value_of_this_one() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key in adapter_chart.PROMETHEUS_ADAPTER_KEYS:
        node: dict[str, object] = schema
        for part in key.split("."):
            properties = node.get("properties")
            assert isinstance(properties, dict), f"the schema has no {key}"
            assert part in properties, f"the schema has no {key}"
            node = properties[part]
        assert key in helm.key_paths(values), f"values.yaml has no {key}"


# (example, --prometheus-url, --secure-port, --metrics-relist-interval in seconds, --v)
ARGUMENTS = [
    ("prometheus-adapter", "http://kube-prometheus-stack-prometheus.monitoring.svc:9090/prometheus", 8443, 30, 2),
    ("prometheus-adapter-minimal", "http://prometheus-server.monitoring.svc.cluster.local:80", 6443, 60, 0),
    # logLevel 4 gives --v=4, and extraArguments' --v=5 comes after it
    ("prometheus-adapter-existing-rules", "http://thanos-query.observability.svc:10902", 6443, 120, 5),
    ("gpuscale", "http://monitoring-kube-prometheus-prometheus.monitoring.svc:9090", 6443, 60, 0),
]


@pytest.mark.parametrize(("name", "url", "port", "relist", "verbosity"), ARGUMENTS, ids=[a[0] for a in ARGUMENTS])
def test_the_adapter_reads_what_the_values_ask(name: str, url: str, port: int, relist: int, verbosity: int) -> None:
    view = adapter_chart.adapter_view(render(name))
    assert view.container["command"] == ["gpuscale-adapter"]
    assert view.settings.prometheus.url == url
    assert view.settings.secure_port == port
    assert {p["name"]: p["containerPort"] for p in view.container["ports"]}["https"] == port
    assert view.settings.relist_interval == relist
    assert view.settings.verbosity == verbosity


def test_the_full_examples_extra_arguments_and_volumes_reach_the_adapter() -> None:
    view = adapter_chart.adapter_view(render("prometheus-adapter"))
    assert str(view.settings.prometheus.ca_file) == "/etc/prometheus-ca/ca.crt"
    mount = mount_covering(view.container, "/etc/prometheus-ca/ca.crt")
    assert mount is not None
    assert mount["name"] == "prometheus-ca"
    assert view.settings.ignored_flags == ("--logtostderr",)
    pod = view.deployment["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert [c["name"] for c in pod["containers"]] == ["adapter", "ca-age-reporter"]
    assert view.container["securityContext"]["runAsUser"] == 10001


def test_our_own_prometheus_client_values_become_the_adapters_flags() -> None:
    prometheus = adapter_chart.adapter_view(render("gpuscale")).settings.prometheus
    assert (prometheus.timeout, prometheus.verb, prometheus.series_limit) == (15, "POST", 50000)
    assert (prometheus.max_answer_bytes, prometheus.max_bytes_in_flight) == (64 * 2**20, 96 * 2**20)


def serving_secret(rendered: Rendered) -> tuple[str, str]:
    """The Secret the adapter's --tls-cert-file is read from, and the file's key in it."""
    view = adapter_chart.adapter_view(rendered)
    cert = view.settings.tls.cert_file
    assert cert is not None
    assert view.settings.tls.key_file is not None
    mount = mount_covering(view.container, str(cert))
    assert mount is not None
    volumes = {v["name"]: v for v in view.deployment["spec"]["template"]["spec"]["volumes"]}
    return volumes[mount["name"]]["secret"]["secretName"], str(PurePosixPath(cert).relative_to(mount["mountPath"]))


def test_tls_values_give_the_adapter_its_certificate_and_the_apiservices_its_ca(
    tls_values: Path, tmp_path: Path
) -> None:
    rendered = adapter_chart.template([tls_values])
    given = yaml.safe_load(tls_values.read_text())["tls"]
    name, key = serving_secret(rendered)
    data = {k: base64.b64decode(v) for k, v in rendered.one("Secret", name)["data"].items()}
    assert data[key].decode() == given["certificate"]
    # the pair loads as the adapter loads it
    (tmp_path / "tls.crt").write_bytes(data["tls.crt"])
    (tmp_path / "tls.key").write_bytes(data["tls.key"])
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    for apiservice in rendered.all("APIService"):
        assert base64.b64decode(apiservice["spec"]["caBundle"]).decode() == given["ca"]
        assert "insecureSkipTLSVerify" not in apiservice["spec"]


def test_cert_manager_issues_the_certificate_the_adapter_serves_and_injects_its_ca() -> None:
    rendered = render("prometheus-adapter")
    name, _ = serving_secret(rendered)
    [certificate] = [c for c in rendered.all("Certificate") if c["spec"]["secretName"] == name]
    service = rendered.one("Service", "prometheus-adapter")
    assert f"prometheus-adapter.{service['metadata']['namespace']}.svc" in certificate["spec"]["dnsNames"]
    assert (certificate["spec"]["duration"], certificate["spec"]["revisionHistoryLimit"]) == ("2160h0m0s", 3)
    issuer = rendered.one("Issuer", certificate["spec"]["issuerRef"]["name"])
    [ca] = [c for c in rendered.all("Certificate") if c["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]]
    assert ca["spec"]["isCA"] is True
    for apiservice in rendered.all("APIService"):
        annotation = apiservice["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert annotation == f"monitoring/{certificate['metadata']['name']}"
        assert not {"insecureSkipTLSVerify", "caBundle"} & apiservice["spec"].keys()


CUSTOM = {"v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"}
RESOURCE = {"v1.metrics.k8s.io", "v1beta1.metrics.k8s.io"}
APISERVICES = [
    ("defaults", [], CUSTOM | {"v1beta1.external.metrics.k8s.io"}),
    ("prometheus-adapter", [], CUSTOM | {"v1beta1.external.metrics.k8s.io"} | RESOURCE),
    ("prometheus-adapter-minimal", [], CUSTOM | {"v1beta1.external.metrics.k8s.io"}),
    ("prometheus-adapter-existing-rules", [], CUSTOM | {"v1beta1.external.metrics.k8s.io"}),
    # KEDA's metrics server holds external.metrics.k8s.io
    ("gpuscale", [], CUSTOM),
    ("defaults", ["rules.builtin=false"], set()),
    ("defaults", ["rules.builtin=false", "rules.default=true"], CUSTOM),
    ("defaults", ["apiServices.external=false", "apiServices.resource=true"], CUSTOM | RESOURCE),
    ("gpuscale", ["apiServices.external=true"], CUSTOM | {"v1beta1.external.metrics.k8s.io"}),
]


@pytest.mark.parametrize(("name", "settings", "expected"), APISERVICES)
def test_the_apiservices_are_the_ones_the_rules_serve(name: str, settings: list[str], expected: set[str]) -> None:
    values = [] if name == "defaults" else [EXAMPLE[name]]
    rendered = adapter_chart.template(values, settings, namespace=NAMESPACES.get(name, "gpuscale"))
    assert {a["metadata"]["name"] for a in rendered.all("APIService")} == expected
    services = {(s["metadata"]["name"], s["metadata"]["namespace"]): s for s in rendered.all("Service")}
    for apiservice in rendered.all("APIService"):
        target = apiservice["spec"]["service"]
        service = services[(target["name"], target["namespace"])]
        https = next(p for p in service["spec"]["ports"] if p["targetPort"] == "https")
        assert target["port"] == https["port"]


def notes_of(name: str) -> str:
    values = [] if name == "defaults" else [EXAMPLE[name]]
    return adapter_chart.notes(values, namespace=NAMESPACES.get(name, "gpuscale"))


def test_what_the_full_example_asks_and_cannot_be_done_is_named_at_install() -> None:
    ignored = adapter_chart.ignored(notes_of("prometheus-adapter"))
    assert set(ignored) == {
        "psp",
        "image.repository registry.k8s.io/prometheus-adapter/prometheus-adapter and image.tag v0.12.0",
        "runAsUser",
        "extraArguments --logtostderr=true",
    }
    assert ignored["extraArguments --logtostderr=true"] == FLAGS.flags["logtostderr"].ignored
    image = adapter_chart.adapter_view(render("prometheus-adapter")).container["image"]
    assert image == f"{yaml.safe_load((CHART / 'values.yaml').read_text())['image']['repository']}:0.1.0"


def test_rules_given_beside_rules_existing_are_named_at_install() -> None:
    assert set(adapter_chart.ignored(notes_of("prometheus-adapter-existing-rules"))) == {
        "rules.builtin",
        "rules.custom",
        "rules.external",
        "podDisruptionBudget.maxUnavailable",
        "strategy.rollingUpdate",
    }


def test_a_default_install_ignores_nothing_and_says_that_rules_default_is_off() -> None:
    text = notes_of("defaults")
    assert adapter_chart.ignored(text) == {}
    assert "rules.default is not set" in text
    assert "v1beta1.external.metrics.k8s.io" in text


def test_the_charts_table_of_ignored_flags_is_the_adapters() -> None:
    table = yaml.safe_load((CHART / "files" / "ignored-flags.yaml").read_text())["flags"]
    assert table == {long: f.ignored for long, f in FLAGS.flags.items() if f.ignored}


WRONG = [
    (["replicas=two"], "/replicas"),
    (["rules.default=maybe"], "/rules/default"),
    (["listenPort=70000"], "/listenPort"),
    (["service.port=https"], "/service/port"),
    (["podLabels.tier=null", "podLabels.team=1"], "/podLabels/team"),
    (["replica=3"], "'replica'"),
    (["prometheus.uri=http://prometheus:9090"], "'uri'"),
    (["rules.defualt=true"], "'defualt'"),
    (["rules.custom[0].seriesQuery=up", "rules.custom[0].metricQuery=sum(up)"], "'metricQuery'"),
]


@pytest.mark.parametrize(("settings", "named"), WRONG, ids=[w[1] for w in WRONG])
def test_the_schema_refuses_a_wrong_type_or_unknown_key_by_name(settings: list[str], named: str) -> None:
    done = adapter_chart.template_done(settings=settings)
    assert done.returncode != 0
    assert named in done.stderr


def test_tls_without_a_certificate_is_refused_by_name() -> None:
    done = adapter_chart.template_done(settings=["tls.enable=true"])
    assert done.returncode != 0
    assert "tls.ca" in done.stderr


def test_the_chart_packages_with_what_its_templates_and_readme_read(tmp_path: Path) -> None:
    done = helm.package(CHART, tmp_path)
    assert done.returncode == 0, done.stderr
    [package] = tmp_path.glob("gpuscale-adapter-*.tgz")
    with tarfile.open(package) as archive:
        names = set(archive.getnames())
    # every file of the chart's directory: the examples the README links, files/ the templates read
    assert names == {f"gpuscale-adapter/{p.relative_to(CHART)}" for p in CHART.rglob("*") if p.is_file()}
    assert {"gpuscale-adapter/values.schema.json", "gpuscale-adapter/files/default-rules.yaml"} <= names
