"""deploy/: the compose stack and the Kubernetes manifests stay true to the code.

No container engine runs where Retsu is developed, so nothing here starts a container.
What can be checked is checked against the code itself, at test time: every ``RETSU_``
variable names a real setting and its value loads through the real loader; every
command is a role the real CLI accepts (worker names from ``retsu worker list queue``);
every probe and health check hits a route the real API or management app serves, on the
port the settings give; images are pinned; Prometheus scrapes exactly the Retsu
services; Grafana's provisioning finds the dashboard; secrets are placeholders.
Renaming any of these in the code fails a test here, not a deployment.
"""

from __future__ import annotations

import configparser
import functools
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml
from check_jsonschema.builtin_schemas import get_builtin_schema
from litestar import Litestar

from retsu import __version__
from retsu.adapters.postgres.hosts import split_hosts
from retsu.entrypoints import settings as settings_module
from retsu.entrypoints.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
ENV_EXAMPLE = DEPLOY / ".env.example"
KUBERNETES = DEPLOY / "kubernetes"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
PGBOUNCER_INI = DEPLOY / "pgbouncer" / "pgbouncer.ini"
OTEL_CONFIG = DEPLOY / "otel-collector" / "config.yaml"
GRAFANA_PROVISIONING = DEPLOY / "grafana" / "provisioning"
DOCKERFILE = ROOT / "Dockerfile"

RETSU_IMAGE = f"retsu:{__version__}"
# The Kubernetes version whose schemas the manifests are validated against (strict: an
# unknown or misspelt field fails).
KUBERNETES_VERSION = "1.30.0"
# -- what the code says ------------------------------------------------------------------


@functools.cache
def setting_paths() -> frozenset[str]:
    """Every leaf setting's dotted path (``cache.distributed.url``), from the code.

    The one place that knows how the settings module lists its settings: adapt it here
    if that module changes shape.
    """
    return frozenset(settings_module.setting_paths())


def setting_of(variable: str) -> str:
    """``RETSU_CACHE__DISTRIBUTED__URL`` → ``cache.distributed.url``."""
    assert variable.startswith(settings_module.ENV_PREFIX), variable
    return ".".join(p.lower() for p in variable[len(settings_module.ENV_PREFIX) :].split("__"))


def assert_settings_load(environment: Mapping[str, str], where: str, tmp: Path) -> Any:
    """Every RETSU_ variable names a setting, and the values load with no warning."""
    retsu = {k: v for k, v in environment.items() if k.startswith("RETSU_")}
    known = setting_paths()
    unknown = sorted(k for k in retsu if setting_of(k) not in known)
    assert not unknown, f"{where}: {unknown} name no Retsu setting"
    loaded = settings_module.load_settings(env=retsu, cwd=tmp)
    assert not loaded.warnings, f"{where}: {loaded.warnings}"
    return loaded.settings


@functools.cache
def _defaults() -> Any:
    return settings_module.build_settings({"database": {"url": "postgresql://t@127.0.0.1/t"}})


def _paths(app: Litestar) -> frozenset[str]:
    # Litestar spells path parameters with their type ({queue_id:str}); routes compare
    # without it.
    return frozenset(re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path) for route in app.routes)


@functools.cache
def api_routes() -> frozenset[str]:
    """The routes the API role serves, from the API container the CLI wires."""
    from retsu.entrypoints.containers import ApiContainer

    return _paths(ApiContainer(settings=_defaults()).app())


@functools.cache
def management_routes() -> frozenset[str]:
    """The routes of a worker's management server, from the worker container."""
    from retsu.entrypoints.containers import WorkerContainer

    return _paths(WorkerContainer(settings=_defaults(), role="worker:test").management_app())


@functools.cache
def listed(*argv: str) -> tuple[str, ...]:
    """What the real `retsu` command prints, one name per line."""
    done = subprocess.run(
        [sys.executable, "-m", "retsu.entrypoints.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return tuple(done.stdout.split())


def worker_names() -> tuple[str, ...]:
    return tuple(
        name for module in listed("worker", "list") for name in listed("worker", "list", module)
    )


def role_of(argv: list[str]) -> str:
    """The role a `retsu` command line runs, checked by the real parser and catalogue:
    ``api``, ``migrate``, ``dev`` or ``worker:<name>``."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"`retsu {' '.join(argv)}` is not a command retsu accepts")
    if args.role != "worker":
        return str(args.role)
    assert args.worker_command == "run", argv
    assert args.name in listed("worker", "list", args.module), (
        f"`retsu {' '.join(argv)}`: {args.name!r} is not listed by `retsu worker list "
        f"{args.module}`"
    )
    return f"worker:{args.name}"


def listen_port(role: str, settings: Any) -> int:
    """The port a process of this role serves its health routes on."""
    port = settings.http.port if role == "api" else settings.worker.management.port
    return int(port)


def routes_of(role: str) -> frozenset[str]:
    return api_routes() if role == "api" else management_routes()


# -- compose -------------------------------------------------------------------------------


def env_example() -> dict[str, str]:
    """deploy/.env.example as compose reads a .env file (KEY=value, optional quotes)."""
    values = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}: compose's forms.
_INTERPOLATION = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(text: str, values: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name, operator, argument = match.groups()
        if name in values and (values[name] or not (operator or "").startswith(":")):
            return values[name]
        if operator and operator.endswith("-"):
            return argument
        pytest.fail(f"{name} is required by compose.yaml but not set in .env.example")

    return _INTERPOLATION.sub(one, text)


@functools.cache
def compose_raw() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def _interpolated(value: Any, values: Mapping[str, str]) -> Any:
    # Compose interpolates string values after parsing the YAML, not the file's text.
    if isinstance(value, str):
        return interpolate(value, values)
    if isinstance(value, list):
        return [_interpolated(item, values) for item in value]
    if isinstance(value, dict):
        return {key: _interpolated(item, values) for key, item in value.items()}
    return value


@functools.cache
def compose() -> dict[str, Any]:
    """compose.yaml as `docker compose` sees it with deploy/.env copied from the example."""
    data: dict[str, Any] = _interpolated(compose_raw(), env_example())
    return data


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def retsu_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services().items() if s.get("image", "").startswith("retsu:")}


def retsu_roles() -> dict[str, str]:
    return {name: role_of(s["command"]) for name, s in retsu_services().items()}


def service_environment(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment", {})
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {k: str(v) for k, v in environment.items()}


def container_port(service: dict[str, Any], published: int) -> int:
    for mapping in service.get("ports", []):
        parts = str(mapping).split(":")
        if int(parts[-2]) == published:
            return int(parts[-1])
    raise AssertionError(f"port {published} not published")


def test_compose_file_follows_the_compose_specification() -> None:
    schema = get_builtin_schema("vendor.compose-spec")
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(compose()), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_the_stack_runs_every_role_with_two_apis_two_collectors_and_two_schedulers() -> None:
    roles = sorted(retsu_roles().values())
    expected = sorted(
        ["api", "api", "migrate"]
        + [f"worker:{name}" for name in worker_names()]
        + ["worker:state-metrics-collector", "worker:scheduler"]
    )
    assert roles == expected
    assert {"postgres", "pgbouncer", "redis", "prometheus", "grafana", "otel-collector"} <= set(
        services()
    )


def test_images_are_pinned_and_retsu_is_built_from_the_dockerfile() -> None:
    for name, service in services().items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and tag and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest", f"{name}: {image} is not pinned"
    for name, service in retsu_services().items():
        assert service["image"] == RETSU_IMAGE, f"{name}: tag it with Retsu's version"
        build = service["build"]
        assert (COMPOSE.parent / build["context"]).resolve() == ROOT
        assert (ROOT / build["dockerfile"]) == DOCKERFILE and DOCKERFILE.exists()


def test_retsu_processes_wait_for_the_migration_and_run_unprivileged() -> None:
    for name, service in retsu_services().items():
        assert service["user"] == "65532:65532", name
        assert service["read_only"] is True and "/tmp" in service["tmpfs"], name
        if retsu_roles()[name] == "migrate":
            assert service["restart"] == "no"
            continue
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        for dependency in ("pgbouncer", "redis"):
            assert service["depends_on"][dependency]["condition"] == "service_healthy", name


def test_every_retsu_variable_in_compose_is_a_setting_that_loads(tmp_path: Path) -> None:
    for name, service in retsu_services().items():
        assert_settings_load(service_environment(service), f"compose service {name}", tmp_path)


def test_compose_health_checks_hit_real_routes_on_the_configured_ports(tmp_path: Path) -> None:
    for name, service in retsu_services().items():
        role = retsu_roles()[name]
        if role == "migrate":
            assert "healthcheck" not in service
            continue
        settings = assert_settings_load(service_environment(service), name, tmp_path)
        command = " ".join(service["healthcheck"]["test"])
        urls = re.findall(r"https?://[^\s'\"]+", command)
        assert len(urls) == 1, f"{name}: {command}"
        url = urlsplit(urls[0])
        assert url.hostname == "127.0.0.1", name
        assert url.port == listen_port(role, settings), f"{name}: {url.port}"
        assert url.path == "/health/ready" and url.path in routes_of(role), f"{name}: {url.path}"
        if role == "api":
            assert container_port_of_api(service) == settings.http.port, name


def container_port_of_api(service: dict[str, Any]) -> int:
    (mapping,) = service["ports"]
    return int(str(mapping).split(":")[-1])


def test_compose_gives_the_api_time_to_finish_before_it_is_killed(tmp_path: Path) -> None:
    for name, service in retsu_services().items():
        settings = assert_settings_load(service_environment(service), name, tmp_path)
        grace = int(service["stop_grace_period"].removesuffix("s"))
        assert grace > settings.worker.shutdown_timeout_seconds, name


# Every URL names both database nodes (or the pooler in front of each), primary first, and
# takes whichever is the primary: the stack rides out losing the primary (SPEC §10).
DIRECT_HOSTS = ["postgres:5432", "postgres-standby:5432"]
POOLED_HOSTS = ["pgbouncer:5432", "pgbouncer-standby:5432"]


def hosts_of(url: str) -> list[str]:
    """The hosts a database URL names, as Retsu reads it; it must ask for the primary."""
    assert parse_qs(urlsplit(url).query)["target_session_attrs"] == ["read-write"], url
    return [host.label for host in split_hosts(url)]


def test_what_needs_a_session_bypasses_the_transaction_pooler(tmp_path: Path) -> None:
    pooled = {
        "api",
        "worker:expired-message-cleaner",
        "worker:dead-letter-message-cleaner",
        "worker:scheduler",
    }
    for name, service in retsu_services().items():
        role = retsu_roles()[name]
        environment = service_environment(service)
        hosts = hosts_of(environment["RETSU_DATABASE__URL"])
        assert hosts == (POOLED_HOSTS if role in pooled else DIRECT_HOSTS), f"{name}: {hosts}"
        # Told what database.url leads to: no session setting, no cached statement there.
        settings = assert_settings_load(environment, name, tmp_path)
        assert settings.database.transaction_pooler is (role in pooled), name
        if role == "api":
            assert hosts_of(environment["RETSU_DATABASE__SESSION_URL"]) == DIRECT_HOSTS, name
    pooler = configparser.ConfigParser(inline_comment_prefixes=(";",))
    pooler.read_string(PGBOUNCER_INI.read_text())
    assert pooler["pgbouncer"]["pool_mode"] == "transaction"
    assert pooler["pgbouncer"]["listen_port"] == "5432"
    assert "host=postgres " in pooler["databases"]["retsu"] + " "
    mounts = services()["pgbouncer"]["volumes"]
    assert "./pgbouncer/pgbouncer.ini:/etc/pgbouncer/pgbouncer.ini:ro" in mounts


def test_the_standby_streams_from_the_primary_behind_a_pooler_of_its_own() -> None:
    standby = services()["postgres-standby"]
    assert standby["image"] == services()["postgres"]["image"]
    assert standby["depends_on"]["postgres"]["condition"] == "service_healthy"
    script = DEPLOY / "postgres" / "standby.sh"
    assert f"./postgres/{script.name}:/usr/local/bin/retsu-standby.sh:ro" in standby["volumes"]
    assert standby["command"] == ["bash", "/usr/local/bin/retsu-standby.sh"]
    assert "--host=postgres " in script.read_text()
    primary_init = "./postgres/primary-init.sh:/docker-entrypoint-initdb.d/retsu-replication.sh:ro"
    assert primary_init in services()["postgres"]["volumes"]
    # Synchronous: the migration (whose commits wait for the standby) waits for it.
    migrate = services()["migrate"]["depends_on"]
    assert migrate["postgres-standby"]["condition"] == "service_healthy"
    # Its pooler is the primary's but for the host it leads to.
    primary_ini = PGBOUNCER_INI.read_text()
    standby_ini = (DEPLOY / "pgbouncer" / "pgbouncer-standby.ini").read_text()

    def settings_of(text: str) -> str:
        return text[text.index("[databases]") :]

    assert settings_of(standby_ini) == settings_of(primary_ini).replace(
        "host=postgres ", "host=postgres-standby "
    )
    mounts = services()["pgbouncer-standby"]["volumes"]
    assert "./pgbouncer/pgbouncer-standby.ini:/etc/pgbouncer/pgbouncer.ini:ro" in mounts
    assert services()["pgbouncer-standby"]["depends_on"]["postgres-standby"]


def test_compose_secrets_come_from_the_env_file_with_placeholders() -> None:
    raw = compose_raw()
    text = COMPOSE.read_text()
    # No password written in the file: every URL's password is an interpolation.
    for url in re.findall(r"postgres(?:ql)?://[^\s\"']+", text):
        password = urlsplit(url.replace("${", "").replace("}", "")).password
        assert password is None or url.split("@")[0].split(":")[-1].startswith("${"), url
    for name, service in raw["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|TOKENS|SECRET", key):
                assert re.fullmatch(r"\$\{\w+:\?[^}]+\}", str(value)), f"{name}.{key}"
    example = env_example()
    assert example, ".env.example is empty"
    for key in ("POSTGRES_PASSWORD", "RETSU_AUTH_TOKENS", "GRAFANA_ADMIN_PASSWORD"):
        assert "change-me" in example[key], key
    assert ".env" in (DEPLOY / ".gitignore").read_text().split()
    # compose builds with the repository as context: deploy/.env must not be sent along.
    assert "deploy" in (ROOT / ".dockerignore").read_text().split()
    tokens = json.loads(example["RETSU_AUTH_TOKENS"])
    assert all(token["secret"].startswith("change-me") for token in tokens)


def test_every_file_compose_mounts_exists() -> None:
    for name, service in services().items():
        for volume in service.get("volumes", []):
            source = str(volume).split(":")[0]
            if source.startswith("."):
                assert (COMPOSE.parent / source).exists(), f"{name}: {source} is missing"
    assert not (DEPLOY / ".env").exists() or (DEPLOY / ".gitignore").exists()


def test_prometheus_scrapes_every_api_replica_and_worker_of_the_stack(tmp_path: Path) -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    scraped: dict[str, str] = {}
    for job in config["scrape_configs"]:
        for static in job["static_configs"]:
            for target in static["targets"]:
                scraped[target] = job["job_name"]
    expected = {}
    for name, service in retsu_services().items():
        role = retsu_roles()[name]
        if role == "migrate":
            continue
        settings = assert_settings_load(service_environment(service), name, tmp_path)
        job = "retsu-api" if role == "api" else "retsu-worker"
        expected[f"{name}:{listen_port(role, settings)}"] = job
    assert scraped == expected
    assert "/metrics" in api_routes() and "/metrics" in management_routes()
    mounts = services()["prometheus"]["volumes"]
    assert "./prometheus:/etc/prometheus:ro" in mounts
    assert "--config.file=/etc/prometheus/prometheus.yml" in services()["prometheus"]["command"]
    for rules in config["rule_files"]:
        assert (PROMETHEUS.parent / rules).exists()


def test_grafana_is_provisioned_with_the_dashboard_and_the_stacks_prometheus() -> None:
    grafana = services()["grafana"]
    mounts = {str(v).split(":")[0]: str(v).split(":")[1] for v in grafana["volumes"]}
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    providers = yaml.safe_load((GRAFANA_PROVISIONING / "dashboards" / "retsu.yaml").read_text())
    (provider,) = providers["providers"]
    dashboards_in_container = {
        target: source for source, target in mounts.items() if target.endswith(".json")
    }
    assert dashboards_in_container, "no dashboard is mounted"
    for target, source in dashboards_in_container.items():
        assert Path(target).parent == Path(provider["options"]["path"])
        assert (COMPOSE.parent / source).resolve() == DEPLOY / "grafana" / "retsu-dashboard.json"
    sources = yaml.safe_load((GRAFANA_PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    (source,) = sources["datasources"]
    url = urlsplit(source["url"])
    assert source["type"] == "prometheus" and url.hostname == "prometheus"
    assert url.port == container_port(services()["prometheus"], 9090)


def test_every_retsu_process_sends_traces_to_the_collector(tmp_path: Path) -> None:
    otel = yaml.safe_load(OTEL_CONFIG.read_text())
    grpc = otel["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert "otlp" in otel["service"]["pipelines"]["traces"]["receivers"]
    for name, service in retsu_services().items():
        settings = assert_settings_load(service_environment(service), name, tmp_path)
        traces = settings.telemetry.traces
        assert traces.enabled, name
        endpoint = urlsplit(str(traces.endpoint))
        assert endpoint.hostname == "otel-collector" and "otel-collector" in services()
        assert endpoint.port == int(grpc.rsplit(":", 1)[1]), name


# -- Kubernetes ------------------------------------------------------------------------------


@functools.cache
def manifests() -> tuple[tuple[str, dict[str, Any]], ...]:
    found = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                found.append((path.name, document))
    return tuple(found)


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in manifests() if doc["kind"] == kind]


def named(kind: str, name: str) -> dict[str, Any]:
    (found,) = [doc for doc in of_kind(kind) if doc["metadata"]["name"] == name]
    return found


def workloads() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, its pod spec) for every Deployment and Job."""
    for doc in of_kind("Deployment") + of_kind("Job"):
        yield doc, doc["spec"]["template"]["spec"]


def retsu_containers() -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    for workload, pod in workloads():
        for container in pod["containers"]:
            if container["image"].startswith("retsu:"):
                yield workload, pod, container


def container_environment(container: dict[str, Any]) -> dict[str, str]:
    """The container's variables with the ConfigMap and the example Secret filled in."""
    secret = named("Secret", "retsu")["stringData"]
    environment: dict[str, str] = {}
    for source in container.get("envFrom", []):
        environment.update(named("ConfigMap", source["configMapRef"]["name"])["data"])
    for variable in container.get("env", []):
        if "value" in variable:
            environment[variable["name"]] = variable["value"]
        else:
            reference = variable["valueFrom"]["secretKeyRef"]
            assert reference["name"] == "retsu"
            environment[variable["name"]] = secret[reference["key"]]
    return environment


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_every_manifest_is_a_kubernetes_object_listed_in_the_kustomization() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    files = {name for name, doc in manifests() if doc["kind"] != "Kustomization"}
    assert set(kustomization["resources"]) == files - {"secret.example.yaml"}
    for name, doc in manifests():
        if doc["kind"] == "Kustomization":
            continue
        assert doc["apiVersion"] and doc["kind"], name
        assert doc["metadata"]["name"], name
        assert doc["metadata"].get("namespace", "retsu") == "retsu", name


def test_built_in_objects_are_valid_for_kubernetes_strictly() -> None:
    for name, doc in manifests():
        if doc["apiVersion"].startswith(("monitoring.coreos.com/", "kustomize.config.k8s.io/")):
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{name} {doc['kind']}/{doc['metadata']['name']}: {error.message}")


def test_one_workload_per_role_two_api_replicas_two_collectors_two_schedulers() -> None:
    replicas: dict[str, int] = {}
    for workload, _, container in retsu_containers():
        role = role_of(container["args"])
        assert container["image"] == RETSU_IMAGE
        assert role not in replicas, f"two workloads run {role}"
        replicas[role] = 1 if workload["kind"] == "Job" else workload["spec"]["replicas"]
    expected = {"api": 2, "migrate": 1} | {f"worker:{n}": 1 for n in worker_names()}
    expected["worker:state-metrics-collector"] = 2
    expected["worker:scheduler"] = 2
    assert replicas == expected
    (job,) = of_kind("Job")
    assert job["metadata"]["name"].endswith(__version__), "a new release is a new Job"


def test_every_retsu_variable_in_the_manifests_is_a_setting_that_loads(tmp_path: Path) -> None:
    for workload, _, container in retsu_containers():
        assert_settings_load(
            container_environment(container), workload["metadata"]["name"], tmp_path
        )


def test_probes_hit_real_routes_on_the_configured_ports(tmp_path: Path) -> None:
    for workload, _, container in retsu_containers():
        role = role_of(container["args"])
        name = workload["metadata"]["name"]
        settings = assert_settings_load(container_environment(container), name, tmp_path)
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        if role == "migrate":
            assert not ports and "readinessProbe" not in container
            continue
        assert ports == {("http" if role == "api" else "management"): listen_port(role, settings)}
        for probe, path in (("readinessProbe", "/health/ready"), ("livenessProbe", "/health/live")):
            check = container[probe]["httpGet"]
            assert check["path"] == path and path in routes_of(role), f"{name} {probe}"
            assert check["port"] in ports, f"{name} {probe}: no port named {check['port']}"


def test_pods_stop_gracefully_unprivileged_and_within_their_resources(tmp_path: Path) -> None:
    for workload, pod, container in retsu_containers():
        name = workload["metadata"]["name"]
        settings = assert_settings_load(container_environment(container), name, tmp_path)
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 65532, name
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["allowPrivilegeEscalation"] is False, name
        assert security["capabilities"]["drop"] == ["ALL"], name
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]], f"{name}: /tmp must be writable"
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][kind]), f"{name} {kind}"
        if workload["kind"] == "Deployment":
            pause = 0
            pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec")
            if pre_stop is not None:
                assert pre_stop["command"][0] == "sleep", name
                pause = int(pre_stop["command"][1])
            grace = pod["terminationGracePeriodSeconds"]
            assert grace > pause + settings.worker.shutdown_timeout_seconds, name


def test_what_needs_a_session_bypasses_the_pooler_in_kubernetes(tmp_path: Path) -> None:
    pooler = named("Service", "retsu-pgbouncer")
    pooled = {
        "api",
        "worker:expired-message-cleaner",
        "worker:dead-letter-message-cleaner",
        "worker:scheduler",
    }
    for workload, _, container in retsu_containers():
        role = role_of(container["args"])
        environment = container_environment(container)
        host = urlsplit(environment["RETSU_DATABASE__URL"]).hostname
        name = workload["metadata"]["name"]
        settings = assert_settings_load(environment, name, tmp_path)
        assert settings.database.transaction_pooler is (role in pooled), name
        if role in pooled:
            assert host == pooler["metadata"]["name"], name
        else:
            assert host != pooler["metadata"]["name"], name
        if role == "api":
            session = urlsplit(environment["RETSU_DATABASE__SESSION_URL"]).hostname
            assert session != pooler["metadata"]["name"], name
    ini = configparser.ConfigParser(inline_comment_prefixes=(";",))
    ini.read_string(named("ConfigMap", "retsu-pgbouncer")["data"]["pgbouncer.ini"])
    assert ini["pgbouncer"]["pool_mode"] == "transaction"
    (deployment,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "retsu-pgbouncer"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(pooler["spec"]["selector"], pod_labels)
    port = {
        p["name"]: p["containerPort"]
        for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert port["postgres"] == int(ini["pgbouncer"]["listen_port"])


def test_services_disruption_budgets_and_service_monitors_select_real_pods() -> None:
    pods = [
        (w["metadata"]["name"], pod, w["spec"]["template"]["metadata"]["labels"])
        for w, pod in workloads()
        if w["kind"] == "Deployment"
    ]
    services = of_kind("Service")
    for service in services:
        matching = [p for p in pods if selects(service["spec"]["selector"], p[2])]
        assert matching, f"Service {service['metadata']['name']} selects no pod"
        for port in service["spec"]["ports"]:
            for _, pod, _ in matching:
                names = {p["name"] for c in pod["containers"] for p in c.get("ports", [])}
                assert port["targetPort"] in names, service["metadata"]["name"]
    for budget in of_kind("PodDisruptionBudget"):
        selector = budget["spec"]["selector"]["matchLabels"]
        (target,) = [
            w
            for w in of_kind("Deployment")
            if selects(selector, w["spec"]["template"]["metadata"]["labels"])
        ]
        assert budget["spec"]["minAvailable"] < target["spec"]["replicas"]
    assert any(
        selects(
            b["spec"]["selector"]["matchLabels"],
            {"app.kubernetes.io/name": "retsu", "app.kubernetes.io/component": "api"},
        )
        for b in of_kind("PodDisruptionBudget")
    ), "the API needs a PodDisruptionBudget"
    scraped: set[str] = set()
    for monitor in of_kind("ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        chosen = [s for s in services if selects(selector, s["metadata"].get("labels", {}))]
        assert chosen, f"ServiceMonitor {monitor['metadata']['name']} selects no Service"
        for endpoint in monitor["spec"]["endpoints"]:
            for service in chosen:
                assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
                for name, pod, labels in pods:
                    if selects(service["spec"]["selector"], labels):
                        role = role_of(pod["containers"][0]["args"])
                        assert endpoint["path"] in routes_of(role)
                        scraped.add(name)
    retsu = {w["metadata"]["name"] for w, _, _ in retsu_containers() if w["kind"] == "Deployment"}
    assert retsu <= scraped, f"not scraped: {sorted(retsu - scraped)}"


def test_the_example_secret_holds_placeholders_only() -> None:
    secret = named("Secret", "retsu")
    not_secret = {"pgbouncer-user"}
    for key, value in secret["stringData"].items():
        if key in not_secret:
            continue
        assert "change-me" in value, f"{key} must be a placeholder"
        if "://" in value:
            assert urlsplit(value).password == "change-me", key
    tokens = json.loads(secret["stringData"]["auth-tokens"])
    assert all(t["secret"].startswith("change-me") for t in tokens)
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    assert "secret.example.yaml" not in kustomization["resources"]


def test_every_image_in_the_manifests_is_pinned() -> None:
    for workload, pod in workloads():
        for container in pod["containers"]:
            repository, _, tag = container["image"].rpartition(":")
            assert repository and tag and tag != "latest", workload["metadata"]["name"]


# -- the image ---------------------------------------------------------------------------------


def test_the_dockerfile_builds_the_distribution_and_serves_the_default_ports() -> None:
    text = DOCKERFILE.read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    wheel = re.sub(r"[-_.]+", "_", project).lower()
    assert f"{wheel}-*.whl" in text, f"the Dockerfile must install the {project} wheel"
    exposed = {int(p) for line in re.findall(r"^EXPOSE (.+)$", text, re.M) for p in line.split()}
    defaults = _defaults()
    assert exposed == {defaults.http.port, defaults.worker.management.port}
    assert re.search(r"^USER 65532:65532$", text, re.M)
    assert re.search(r'^ENTRYPOINT \["retsu"\]$', text, re.M)
    command = json.loads(re.findall(r"^CMD (.+)$", text, re.M)[-1])
    assert role_of(command) == "api"


def test_the_cloudnative_pg_example_replicates_synchronously_and_retsu_loads_its_urls(
    tmp_path: Path,
) -> None:
    """deploy/kubernetes/ha: CloudNativePG objects (not built-in kinds: no schema here),
    checked for what Retsu relies on."""
    documents = list(yaml.safe_load_all((KUBERNETES / "ha" / "cloudnative-pg.yaml").read_text()))
    by_kind = {doc["kind"]: doc for doc in documents}
    assert set(by_kind) == {"Cluster", "Pooler", "Secret"}
    cluster = by_kind["Cluster"]
    assert cluster["spec"]["instances"] >= 2
    assert cluster["spec"]["postgresql"]["synchronous"]["number"] >= 1
    assert cluster["spec"]["postgresql"]["synchronous"]["dataDurability"] == "required"
    pooler = by_kind["Pooler"]
    assert pooler["spec"]["cluster"]["name"] == cluster["metadata"]["name"]
    assert pooler["spec"]["type"] == "rw"
    assert pooler["spec"]["pgbouncer"]["poolMode"] == "transaction"
    secret = by_kind["Secret"]["stringData"]
    assert set(secret) <= set(named("Secret", "retsu")["stringData"])
    settings = assert_settings_load(
        {
            "RETSU_DATABASE__URL": secret["database-url"],
            "RETSU_DATABASE__SESSION_URL": secret["database-session-url"],
        },
        "ha/cloudnative-pg.yaml",
        tmp_path,
    )
    assert settings.database.transaction_pooler
    rw = f"{cluster['metadata']['name']}-rw:5432"
    assert hosts_of(secret["database-session-url"]) == [rw]
    assert hosts_of(secret["database-url"]) == [f"{pooler['metadata']['name']}:5432"]
