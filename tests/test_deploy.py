"""Deployment manifests stay in step with the code: they parse, and the campaign they carry
validates against the current config schema."""

from __future__ import annotations

from pathlib import Path

import yaml

from adaptive_eval.config import parse_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def documents(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc]


def test_raycluster_puts_engines_on_gpu_workers_and_the_controller_on_the_head() -> None:
    cluster = next(d for d in documents("kubernetes/raycluster.yaml") if d["kind"] == "RayCluster")
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    for group in cluster["spec"]["workerGroupSpecs"]:
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert int(limits["nvidia.com/gpu"]) >= 1


def test_campaign_in_the_configmap_validates() -> None:
    (configmap,) = documents("kubernetes/campaign-configmap.yaml")
    campaign = yaml.safe_load(configmap["data"]["campaign.yaml"])
    config = parse_config(campaign, source="deploy/kubernetes/campaign-configmap.yaml")
    assert config.execution.ray_address == "auto"
    assert {entry.backend for entry in config.models} == {"vllm"}


def test_nightly_job_runs_the_cli_on_the_mounted_config() -> None:
    (cron,) = documents("kubernetes/nightly-rayjob.yaml")
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    command = " ".join(container["args"])
    assert "adaptive-eval run /config/campaign.yaml --out /runs/nightly-" in command


def test_ray_cluster_launcher_config_parses() -> None:
    (config,) = documents("ray/cluster.yaml")
    assert config["provider"]["type"] == "local"
    assert any("--num-gpus=0" in c for c in config["head_start_ray_commands"])
