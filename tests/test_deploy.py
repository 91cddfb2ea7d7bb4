"""The deployment works as written, as far as this machine can tell without a cluster:

- every Kubernetes object validates against the Kubernetes API models (the ``kubernetes`` client's
  generated models: unknown fields, wrong types and missing required fields fail);
- KubeRay objects validate against the ray.io/v1 RayCluster / RayJob fields transcribed below,
  their pod templates against the Kubernetes models;
- every ``ray`` command (the CronJob's ``ray job submit``, the cluster launcher's ``ray start``,
  each ``rayStartParams``) parses with the installed Ray CLI, and every ``adaptive-eval`` command
  with ours;
- the config and volumes are mounted where the job runs (the Ray head), the images are the ones
  the Dockerfile builds, on the Ray version installed here.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest
import ray
import yaml

from adaptive_eval.command_line.parser import build_parser
from adaptive_eval.config.schema import parse_config
from adaptive_eval.workflows.nightly import EXIT_ALERT

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
IMAGES = {f"adaptive-eval:{VERSION}-cpu", f"adaptive-eval:{VERSION}-gpu"}


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def manifests() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, doc)
        for path in sorted(K8S.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in documents(path)
    ]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in manifests() if doc["kind"] == kind]


# -- a strict validator over the Kubernetes client's generated models ---------------------------
def _k8s_models() -> Any:
    from kubernetes import client

    return client


def validate_model(value: Any, model: type, where: str) -> list[str]:
    """Errors of ``value`` against a Kubernetes client model (pydantic, extra fields forbidden):
    unknown fields, wrong types and missing required fields, each with its path."""
    from pydantic import BaseModel, ValidationError

    assert issubclass(model, BaseModel), "kubernetes>=37 (pydantic models) is needed"
    try:
        model.model_validate(value)
    except ValidationError as error:
        return [f"{where}.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()]
    return []


KIND_MODELS = {
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("batch/v1", "CronJob"): "V1CronJob",
    ("batch/v1", "Job"): "V1Job",
}

# ray.io/v1 (KubeRay 1.x) fields, transcribed from the RayCluster and RayJob CRDs. A value names
# a nested spec here, a Kubernetes model ("k8s:V1PodTemplateSpec"), or a JSON type.
KUBERAY: dict[str, dict[str, Any]] = {
    "RayClusterSpec": {
        "rayVersion": str,
        "enableInTreeAutoscaling": bool,
        "autoscalerOptions": dict,
        "headServiceAnnotations": dict,
        "headGroupSpec": "HeadGroupSpec",
        "workerGroupSpecs": ["WorkerGroupSpec"],
        "suspend": bool,
        "managedBy": str,
        "gcsFaultToleranceOptions": dict,
    },
    "HeadGroupSpec": {
        "template": "k8s:V1PodTemplateSpec",
        "rayStartParams": "params",
        "serviceType": str,
        "headService": "k8s:V1Service",
        "enableIngress": bool,
    },
    "WorkerGroupSpec": {
        "groupName": str,
        "replicas": int,
        "minReplicas": int,
        "maxReplicas": int,
        "idleTimeoutSeconds": int,
        "rayStartParams": "params",
        "template": "k8s:V1PodTemplateSpec",
        "scaleStrategy": dict,
        "numOfHosts": int,
        "suspend": bool,
    },
    "RayJobSpec": {
        "entrypoint": str,
        "metadata": dict,
        "runtimeEnvYAML": str,
        "jobId": str,
        "submissionMode": ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"),
        "entrypointResources": str,
        "entrypointNumCpus": (int, float),
        "entrypointNumGpus": (int, float),
        "ttlSecondsAfterFinished": int,
        "activeDeadlineSeconds": int,
        "backoffLimit": int,
        "rayClusterSpec": "RayClusterSpec",
        "clusterSelector": dict,
        "submitterPodTemplate": "k8s:V1PodTemplateSpec",
        "submitterConfig": dict,
        "shutdownAfterJobFinishes": bool,
        "suspend": bool,
        "managedBy": str,
        "deletionStrategy": dict,
    },
}
REQUIRED = {"HeadGroupSpec": {"template"}, "WorkerGroupSpec": {"groupName", "template"}}


def validate_kuberay(value: Any, spec: str, where: str) -> list[str]:
    fields = KUBERAY[spec]
    if not isinstance(value, dict):
        return [f"{where}: expected a {spec} mapping"]
    errors = [f"{where}.{k}: unknown field of {spec}" for k in value if k not in fields]
    errors += [f"{where}: missing {k}" for k in sorted(REQUIRED.get(spec, set()) - set(value))]
    for key, item in value.items():
        kind = fields.get(key)
        at = f"{where}.{key}"
        if isinstance(kind, list):
            if not isinstance(item, list):
                errors.append(f"{at}: expected a list")
            else:
                errors += [
                    e
                    for i, v in enumerate(item)
                    for e in validate_kuberay(v, kind[0], f"{at}[{i}]")
                ]
        elif kind == "params":  # KubeRay: map[string]string, turned into `ray start --k=v`
            if not isinstance(item, dict) or not all(isinstance(v, str) for v in item.values()):
                errors.append(f"{at}: rayStartParams values must be strings")
        elif isinstance(kind, str) and kind.startswith("k8s:"):
            errors += validate_model(item, getattr(_k8s_models(), kind[4:]), at)
        elif isinstance(kind, str):
            errors += validate_kuberay(item, kind, at)
        elif isinstance(kind, tuple) and all(isinstance(k, str) for k in kind):
            if item not in kind:
                errors.append(f"{at}: {item!r} is not one of {kind}")
        elif kind is not None and (
            not isinstance(item, kind) or isinstance(item, bool) != (kind is bool)
        ):
            errors.append(f"{at}: expected {kind}, got {item!r}")
    return errors


#: The spec of KubeRay's RayCronJob CRD (its openAPIV3Schema, vendored with its source noted;
#: the RayClusterSpec and pod template inside are checked by the validators above).
RAYCRONJOB_SCHEMA = ROOT / "tests" / "data" / "kuberay" / "raycronjob.schema.json"


def _strict(schema: Any) -> Any:
    """An openAPIV3 schema with unknown fields refused where it names properties (as
    ``kubectl apply --validate=strict`` refuses them; a structural schema would drop them)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def validate_raycronjob_spec(spec: Any) -> list[str]:
    import json

    import jsonschema

    schema = _strict(json.loads(RAYCRONJOB_SCHEMA.read_text()))
    validator = jsonschema.Draft7Validator(schema)
    errors = [
        f"RayCronJob.spec.{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(spec)
    ]
    template = spec.get("jobTemplate") if isinstance(spec, dict) else None
    if isinstance(template, dict):
        where = "RayCronJob.spec.jobTemplate"
        if "rayClusterSpec" in template:
            errors += validate_kuberay(
                template["rayClusterSpec"], "RayClusterSpec", f"{where}.rayClusterSpec"
            )
        if "submitterPodTemplate" in template:
            errors += validate_model(
                template["submitterPodTemplate"],
                _k8s_models().V1PodTemplateSpec,
                f"{where}.submitterPodTemplate",
            )
    return errors


def validate_manifest(doc: dict[str, Any]) -> list[str]:
    kind = doc.get("kind")
    api = doc.get("apiVersion")
    if api == "ray.io/v1" and kind == "RayCronJob":
        meta = validate_model(doc.get("metadata"), _k8s_models().V1ObjectMeta, f"{kind}.metadata")
        extra = [
            f"{kind}.{k}: unknown field"
            for k in doc
            if k not in {"apiVersion", "kind", "metadata", "spec"}
        ]
        return meta + extra + validate_raycronjob_spec(doc.get("spec"))
    if (api, kind) in KIND_MODELS:
        return validate_model(doc, getattr(_k8s_models(), KIND_MODELS[(api, kind)]), kind)
    if api == "ray.io/v1" and kind in ("RayCluster", "RayJob"):
        meta = validate_model(doc.get("metadata"), _k8s_models().V1ObjectMeta, f"{kind}.metadata")
        extra = [
            f"{kind}.{k}: unknown field"
            for k in doc
            if k not in {"apiVersion", "kind", "metadata", "spec"}
        ]
        spec = "RayClusterSpec" if kind == "RayCluster" else "RayJobSpec"
        return meta + extra + validate_kuberay(doc.get("spec"), spec, f"{kind}.spec")
    return [f"unexpected object {api}/{kind}"]


def test_every_manifest_validates_against_the_schemas() -> None:
    found = {doc["kind"] for _, doc in manifests()}
    assert {
        "RayCluster",
        "RayJob",
        "RayCronJob",
        "CronJob",
        "ConfigMap",
        "PersistentVolumeClaim",
    } <= found
    errors = [f"{name}: {e}" for name, doc in manifests() for e in validate_manifest(doc)]
    assert errors == []


def test_the_validator_catches_mistakes() -> None:
    (cron,) = by_kind("CronJob")
    bad = yaml.safe_load(yaml.safe_dump(cron))
    spec = bad["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    spec["containers"][0]["volumeMount"] = []  # a typo
    spec["restartPolicy"] = 3
    del spec["containers"][0]["name"]
    errors = validate_manifest(bad)
    assert any("volumeMount: Extra inputs are not permitted" in e for e in errors)
    assert any("restartPolicy: Input should be a valid string" in e for e in errors)
    assert any("containers.0.name: Field required" in e for e in errors)
    (cluster,) = by_kind("RayCluster")
    bad = yaml.safe_load(yaml.safe_dump(cluster))
    bad["spec"]["workerGroupSpecs"][0]["replica"] = 2
    bad["spec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] = 0
    errors = validate_manifest(bad)
    assert any("replica: unknown field of WorkerGroupSpec" in e for e in errors)
    assert any("rayStartParams values must be strings" in e for e in errors)
    (volumes, _) = [d for _, d in manifests() if d["kind"] == "PersistentVolumeClaim"]
    bad = yaml.safe_load(yaml.safe_dump(volumes))
    del bad["spec"]["accessModes"]
    bad["spec"]["resources"]["request"] = {}
    assert validate_manifest(bad)


# -- commands against the installed CLIs ---------------------------------------------------------
def ray_cli() -> click.Group:
    from ray.scripts.scripts import cli

    return cli


def check_ray_command(words: list[str]) -> None:
    """Parse ``ray ...`` with the installed Ray CLI (click): unknown flags or bad values raise."""
    assert words[0] == "ray"
    command: click.Command = ray_cli()
    rest = words[1:]
    while isinstance(command, click.Group):
        name, rest = rest[0], rest[1:]
        sub = command.get_command(click.Context(command), name)
        assert sub is not None, f"ray has no command {name!r}"
        command = sub
    command.make_context(command.name, list(rest), resilient_parsing=False)


def check_adaptive_eval(words: list[str]) -> None:
    assert words[0] == "adaptive-eval"
    build_parser().parse_args(words[1:])


def shell_commands(text: str) -> list[list[str]]:
    """Simple commands of a shell line (split on ;, &&, ||), with $(...) taken as one word."""
    text = re.sub(r"\$\([^)]*\)", "SUBST", text)
    return [shlex.split(part) for part in re.split(r"&&|\|\||;", text) if part.strip()]


def test_the_nightly_cronjob_runs_the_nightly_workflow_on_the_head() -> None:
    (cron,) = by_kind("CronJob")
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/bash", "-c"]
    (line,) = container["args"]
    commands = shell_commands(line)
    (submit,) = [words for words in commands if words[0] == "ray"]
    assert submit[:3] == ["ray", "job", "submit"]
    assert "--no-wait" not in submit  # waits for the job
    split = submit.index("--")
    check_ray_command(submit)  # the entrypoint after -- is its argument
    entrypoint = submit[split + 1 :]
    check_adaptive_eval(entrypoint)
    # The nightly workflow: trial library, history and alerts, not a bare run.
    assert entrypoint[:2] == ["adaptive-eval", "nightly"] and "--history" in entrypoint
    address = submit[submit.index("--address") + 1]
    (cluster,) = by_kind("RayCluster")
    assert address == f"http://{cluster['metadata']['name']}-head-svc:8265"
    # The pod exits with the nightly's own code (ray job submit says 1 for any failure).
    job_id = submit[submit.index("--submission-id") + 1]
    assert commands[-1] == ["python", "-m", "adaptive_eval.command_line.ray_job", address, job_id]
    # The entrypoint runs on the head: the config and the history must be mounted there.
    assert_mounted_on_head(cluster["spec"], entrypoint)


def test_the_raycronjob_runs_the_nightly_on_the_long_running_cluster() -> None:
    """deploy/kubernetes/nightly-raycronjob.yaml (issue 29): KubeRay's RayCronJob."""
    (cron,) = by_kind("RayCronJob")
    assert validate_manifest(cron) == []
    template = cron["spec"]["jobTemplate"]
    entrypoint = shlex.split(template["entrypoint"])
    check_adaptive_eval(entrypoint)
    assert entrypoint[:2] == ["adaptive-eval", "nightly"] and "--history" in entrypoint
    # On the long-running cluster, whose head mounts the config and the history.
    (cluster,) = by_kind("RayCluster")
    assert template["clusterSelector"] == {"ray.io/cluster": cluster["metadata"]["name"]}
    assert "rayClusterSpec" not in template
    assert_mounted_on_head(cluster["spec"], entrypoint)
    # KubeRay cannot tell an alert (exit 3) from a failure: an alert is never re-run.
    assert template["backoffLimit"] == 0
    # The same schedule as the CronJob, in UTC (the nightly's default night is the UTC date).
    (plain,) = by_kind("CronJob")
    assert cron["spec"]["schedule"] == plain["spec"]["schedule"]
    assert cron["spec"]["timeZone"] == "Etc/UTC"
    # An alternative to the CronJob, applied on its own (its CRD is feature-gated).
    (kustomization,) = documents(K8S / "kustomization.yaml")
    assert "nightly-raycronjob.yaml" not in kustomization["resources"]


def test_the_raycronjob_validator_catches_mistakes() -> None:
    (cron,) = by_kind("RayCronJob")
    bad = yaml.safe_load(yaml.safe_dump(cron))
    del bad["spec"]["schedule"]
    bad["spec"]["jobTemplate"]["entrypointNumCpu"] = 1  # a typo
    bad["spec"]["jobTemplate"]["backoffLimit"] = "0"
    bad["spec"]["jobTemplate"]["submitterPodTemplate"]["spec"]["restartPolicy"] = 3
    errors = validate_manifest(bad)
    assert any("'schedule' is a required property" in e for e in errors), errors
    assert any("'entrypointNumCpu' was unexpected" in e for e in errors), errors
    assert any("backoffLimit: '0' is not of type 'integer'" in e for e in errors), errors
    assert any("restartPolicy: Input should be a valid string" in e for e in errors), errors


def test_an_alert_is_not_retried_by_the_jobs_backoff() -> None:
    (cron,) = by_kind("CronJob")
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["template"]["spec"]["restartPolicy"] == "Never"  # podFailurePolicy needs it
    container = job["template"]["spec"]["containers"][0]["name"]
    fail_job = [r for r in job["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
    codes = {
        code
        for rule in fail_job
        if rule["onExitCodes"]["operator"] == "In"
        and rule["onExitCodes"].get("containerName") in (None, container)
        for code in rule["onExitCodes"]["values"]
    }
    assert EXIT_ALERT in codes and 1 not in codes  # failures are still retried
    assert job["backoffLimit"] >= 1


def test_the_job_exit_code_is_the_entrypoints() -> None:
    from types import SimpleNamespace

    from adaptive_eval.command_line.ray_job import job_exit_code

    assert job_exit_code(SimpleNamespace(driver_exit_code=3, status="FAILED")) == EXIT_ALERT
    assert job_exit_code(SimpleNamespace(driver_exit_code=0, status="SUCCEEDED")) == 0
    assert job_exit_code(SimpleNamespace(driver_exit_code=None, status="SUCCEEDED")) == 0
    assert job_exit_code(SimpleNamespace(driver_exit_code=None, status="STOPPED")) == 1


def test_a_wrong_flag_is_caught() -> None:
    with pytest.raises(click.UsageError):
        check_ray_command(["ray", "job", "submit", "--no-wait=false", "--", "true"])
    with pytest.raises(click.UsageError):
        check_ray_command(["ray", "start", "--num-gpu=0"])
    with pytest.raises(SystemExit):
        check_adaptive_eval(["adaptive-eval", "run", "c.yaml"])  # --out missing


def assert_mounted_on_head(cluster_spec: dict[str, Any], entrypoint: list[str]) -> None:
    head = cluster_spec["headGroupSpec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in head["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in head["volumes"]}
    command = "nightly" if "nightly" in entrypoint else "run"
    config_path = entrypoint[entrypoint.index(command) + 1]
    out = entrypoint[entrypoint.index("--history" if command == "nightly" else "--out") + 1]
    config_dir, key = config_path.rsplit("/", 1)
    config_volume = volumes[mounts[config_dir]]
    (configmap,) = by_kind("ConfigMap")
    assert config_volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert key in configmap["data"]
    runs_root = "/" + out.strip("/").split("/")[0]
    claim = volumes[mounts[runs_root]]["persistentVolumeClaim"]["claimName"]
    claims = {d["metadata"]["name"] for d in by_kind("PersistentVolumeClaim")}
    assert claim in claims
    # The model weights the campaign names are mounted on the head and on every worker.
    campaign = yaml.safe_load(configmap["data"][key])
    roots = {"/" + e["path"].strip("/").split("/")[0] for e in campaign["models"] if e.get("path")}
    groups = [cluster_spec["headGroupSpec"], *cluster_spec["workerGroupSpecs"]]
    for group in groups:
        pod = group["template"]["spec"]
        paths = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert roots <= paths and config_dir in paths
        for volume in pod["volumes"]:
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims


def test_the_rayjob_runs_its_entrypoint_where_the_config_is() -> None:
    (job,) = by_kind("RayJob")
    words = shlex.split(job["spec"]["entrypoint"])
    check_adaptive_eval(words)
    assert_mounted_on_head(job["spec"]["rayClusterSpec"], words)


def test_every_ray_start_parameter_is_a_flag_of_ray_start() -> None:
    specs = [d["spec"] for d in by_kind("RayCluster")]
    specs += [d["spec"]["rayClusterSpec"] for d in by_kind("RayJob")]
    checked = 0
    for spec in specs:
        head = spec["headGroupSpec"]["rayStartParams"]
        check_ray_command(["ray", "start", "--head", *(f"--{k}={v}" for k, v in head.items())])
        for group in spec["workerGroupSpecs"]:
            params = [f"--{k}={v}" for k, v in group["rayStartParams"].items()]
            check_ray_command(["ray", "start", "--address=head:6379", *params])
            checked += 1
    assert checked >= 2


def test_cluster_launcher_commands_parse() -> None:
    (config,) = documents(DEPLOY / "ray" / "cluster.yaml")
    assert config["provider"]["type"] == "local"
    commands = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    for line in commands:
        for words in shell_commands(line):
            check_ray_command(words)
    assert any("--num-gpus=0" in c for c in config["head_start_ray_commands"])
    assert config["docker"]["image"] in IMAGES


def test_the_cluster_launchers_documented_command_runs_a_command_on_the_head() -> None:
    header = [
        line.lstrip("# ")
        for line in (DEPLOY / "ray" / "cluster.yaml").read_text().splitlines()
        if line.startswith("#")
    ]
    text = " ".join(header)
    (documented,) = re.findall(r"(ray exec \S+ '[^']+')", text)
    words = shlex.split(documented)
    check_ray_command(words)  # `ray exec CLUSTER_CONFIG CMD`
    check_adaptive_eval(shlex.split(words[3]))
    assert "ray submit deploy" not in text  # ray submit runs a script file, not a command


# -- images and versions ------------------------------------------------------------------------
def images(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["image"]] if isinstance(node.get("image"), str) else []
        return own + [i for k, v in node.items() if k != "image" for i in images(v)]
    if isinstance(node, list):
        return [i for v in node for i in images(v)]
    return []


def test_images_are_the_ones_the_dockerfile_builds_on_the_installed_ray() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    stages = dict(re.findall(r"^FROM (\S+) AS (\w+)$", dockerfile, re.M))
    assert set(stages.values()) == {"cpu", "gpu"}
    built = set(re.findall(r"--target (\w+) -t (\S+) \.", dockerfile))
    assert built == {
        ("cpu", f"adaptive-eval:{VERSION}-cpu"),
        ("gpu", f"adaptive-eval:{VERSION}-gpu"),
    }
    (ray_version,) = re.findall(r"^ARG RAY_VERSION=(\S+)$", dockerfile, re.M)
    assert ray_version == ray.__version__
    extras = PYPROJECT["project"]["optional-dependencies"]
    for spec in re.findall(r'pip install --no-cache-dir "\.\[([^\]]*)\]"', dockerfile):
        assert set(spec.split(",")) <= set(extras)
    for source in re.findall(r"^COPY --chown=\S+ (.+) \S+$", dockerfile, re.M):
        for part in source.split():
            assert (ROOT / part).exists(), part
    used = {image for _, doc in manifests() for image in images(doc)}
    assert used and used <= IMAGES
    for doc in by_kind("RayCluster") + [d["spec"]["rayClusterSpec"] for d in by_kind("RayJob")]:
        spec = doc.get("spec", doc)
        assert spec["rayVersion"] == ray.__version__


def test_every_image_runs_ray_workers_at_normal_priority() -> None:
    """Every node of every manifest runs one of the two images; each sets
    RAY_worker_niceness=0 so that `ray start` does not nice the engine workers to 15."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    assert len(stages) == 2
    for stage in stages:
        env = " ".join(re.findall(r"^ENV (.+)$", stage, re.M)).split()
        assert "RAY_worker_niceness=0" in env, stage.splitlines()[0]


def test_kustomization_lists_existing_manifests() -> None:
    (kustomization,) = documents(K8S / "kustomization.yaml")
    for resource in kustomization["resources"]:
        assert (K8S / resource).exists()
    assert [i["name"] for i in kustomization["images"]] == ["adaptive-eval"]


def test_campaign_in_the_configmap_validates() -> None:
    (configmap,) = by_kind("ConfigMap")
    campaign = yaml.safe_load(configmap["data"]["campaign.yaml"])
    config = parse_config(campaign, source="deploy/kubernetes/campaign-configmap.yaml")
    assert config.execution.ray_address == "auto"
    assert {entry.backend for entry in config.models} == {"vllm"}
