"""Multi-node launch files: the Kubernetes manifests validate against the Kubernetes API schemas
(``kubernetes-validate``, offline) and the LeaderWorkerSet CRD's own OpenAPI schema (a fixture),
the per-node compose files against the compose spec; ``up --launcher ray|k8s`` writes them from the
same launch description as every other format, and the Ray files it writes bring up a two-node
loopback cluster."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from club3090 import cli
from club3090.compose import k8s
from club3090.compose.cluster import ClusterNet, ClusterShape, cluster_launch, ray_files
from tests.llama_server import free_port
from tests.test_compose import validate_compose
from tests.test_ray_cluster import bring_up, derived_launch
from tests.test_up import DERIVED, env, upstream  # noqa: F401 - fixtures

FIXTURES = Path(__file__).parent / "fixtures" / "k8s"
LWS_SCHEMA = json.loads((FIXTURES / "leaderworkerset-v1.schema.json").read_text(encoding="utf-8"))
K8S_VERSION = "1.30"


def validate_core(obj: dict[str, Any]) -> None:
    for version in (K8S_VERSION, kubernetes_validate.latest_version()):   # an older cluster and the newest schemas
        kubernetes_validate.validate(obj, version, strict=True)


def validate_lws(obj: dict[str, Any]) -> None:
    jsonschema.validate(obj, LWS_SCHEMA, cls=jsonschema.Draft4Validator)
    for role in ("leaderTemplate", "workerTemplate"):          # the pod templates, as Pods, strictly
        template = obj["spec"]["leaderWorkerTemplate"][role]
        validate_core({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": f"{obj['metadata']['name']}-{role.lower()}", **template["metadata"]}
                       if "metadata" in template else {"name": "pod"}, "spec": template["spec"]})


def validate_manifest(text: str) -> dict[str, Any]:
    obj = yaml.safe_load(text)
    if obj["kind"] == "LeaderWorkerSet":
        validate_lws(obj)
    else:
        validate_core(obj)
    return obj


def two_nodes(**net: Any) -> Any:
    return cluster_launch(derived_launch(), ClusterShape(nodes=2, gpus_per_node=8, tp=8, pp=2),
                          ClusterNet(**net), name="org-big")


@pytest.mark.parametrize("cache", k8s.CACHE_MODES)
def test_manifests_validate(cache):
    files = k8s.k8s_files(two_nodes(), cache=cache, cache_size_gib=900)
    kinds = {name: validate_manifest(text)["kind"] for name, text in files.items()}
    expected = {"k8s/configmap.yaml": "ConfigMap", "k8s/leaderworkerset.yaml": "LeaderWorkerSet",
                "k8s/service.yaml": "Service"}
    if cache == "pvc":
        expected["k8s/model-cache-pvc.yaml"] = "PersistentVolumeClaim"
    assert kinds == expected
    lws = yaml.safe_load(files["k8s/leaderworkerset.yaml"])
    group = lws["spec"]["leaderWorkerTemplate"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and group["size"] == 2
    leader, worker = (group[t]["spec"] for t in ("leaderTemplate", "workerTemplate"))
    for pod in (leader, worker):
        c = pod["containers"][0]
        assert c["image"] == "vllm/vllm-openai:v0.22.0"
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8" == c["resources"]["requests"]["nvidia.com/gpu"]
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
        cache_vol = next(v for v in pod["volumes"] if v["name"] == "model-cache")
        assert ("persistentVolumeClaim" in cache_vol) == (cache == "pvc") and ("hostPath" in cache_vol) != (cache == "pvc")
        assert not any(e.get("value") for e in c["env"] if e["name"] == "HF_TOKEN")   # a Secret ref, never a value
    assert leader["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/health"
    assert leader["containers"][0]["command"] == ["/bin/sh", "/club3090/head.sh"]
    assert worker["containers"][0]["command"] == ["/bin/sh", "/club3090/worker.sh"]
    svc = yaml.safe_load(files["k8s/service.yaml"])
    assert svc["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": "org-big", "role": "leader"}
    # the ConfigMap ships the Ray launcher's own scripts: one launch description for both
    data = yaml.safe_load(files["k8s/configmap.yaml"])["data"]
    ray = ray_files(two_nodes())
    assert data == {"head.sh": ray["head.sh"], "worker.sh": ray["worker.sh"], "cluster.env": ray["cluster.env"]}
    assert "--pipeline-parallel-size 2" in data["head.sh"] and "--distributed-executor-backend ray" in data["head.sh"]


@pytest.mark.parametrize("breakage", ["size-not-int", "unknown-restart-policy", "no-leader-worker-template"])
def test_the_lws_schema_catches_a_broken_object(breakage):
    """The fixture schema is not vacuous: a broken LeaderWorkerSet fails it."""
    lws = k8s.leader_worker_set(two_nodes())
    broken = copy.deepcopy(lws)
    group = broken["spec"]["leaderWorkerTemplate"]
    if breakage == "size-not-int":
        group["size"] = "two"
    elif breakage == "unknown-restart-policy":
        group["restartPolicy"] = "Sometimes"
    else:
        del broken["spec"]["leaderWorkerTemplate"]
        broken["spec"]["replicas"] = "one"
    validate_lws(lws)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, LWS_SCHEMA, cls=jsonschema.Draft4Validator)


def test_core_validation_is_strict():
    svc = k8s.service(two_nodes())
    svc["spec"]["prots"] = svc["spec"].pop("ports")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_core(svc)


def test_per_node_compose_files_validate():
    files = ray_files(two_nodes(head_ip="10.0.0.1", ifname="eth0"))
    for role in ("head", "worker"):
        resolved = validate_compose(files[f"compose.{role}.yml"])
        svc = resolved["services"][f"ray-{role}"]
        assert svc["network_mode"] == "host" and svc["image"] == "vllm/vllm-openai:v0.22.0"
        assert svc["entrypoint"] == ["/bin/sh", f"/club3090/{role}.sh"]
        assert svc["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 8
        assert any(v.endswith(":/root/.cache/huggingface/hub") for v in svc["volumes"])
    shared = files["cluster.env"]
    for line in ("HEAD_IP=10.0.0.1", "CLUSTER_NODES=2", "NCCL_SOCKET_IFNAME=eth0", "GLOO_SOCKET_IFNAME=eth0",
                 "HF_HUB_OFFLINE=1"):
        assert line in shared.splitlines()
    assert "NVIDIA_VISIBLE_DEVICES" not in shared


@pytest.mark.parametrize(("net", "shape", "message"), [
    ({"head_ip": "10.0.0.1; rm -rf /"}, None, "--head-ip"),
    ({"ifname": "eth0 x"}, None, "--network-interface"),
    ({}, ClusterShape(nodes=3, gpus_per_node=8, tp=8, pp=2), "leaves a node without work"),
    ({}, ClusterShape(nodes=2, gpus_per_node=4, tp=8, pp=2), "needs 16 GPUs"),
])
def test_unsafe_or_impossible_values_are_named(net, shape, message):
    from club3090.compose.cluster import net_problems

    problems = net_problems(ClusterNet(**net)) + (shape.problems() if shape else ())
    assert problems and message in problems[0]


@pytest.mark.parametrize(("model", "label"), [("01-AI/Yi-34B", "m-01-ai-yi-34b"), ("Org/Model_V3.1", "org-model-v3-1"),
                                             ("x" * 80, "x" * 40), ("///", "m")])
def test_names_are_dns_labels(model, label):
    from club3090.compose.cluster import dns_label

    assert dns_label(model) == label


# --------------------------------------------------------------------------------------------
# `club3090 up --launcher ray|k8s` end to end (the loopback fake Hub; nothing is started)
# --------------------------------------------------------------------------------------------

@pytest.fixture
def up_env(request: pytest.FixtureRequest) -> dict[str, Any]:
    """``test_up``'s environment: the fake Hub, the payload server, an empty HF cache."""
    return request.getfixturevalue("env")


def up(where: dict[str, Any], *argv: str) -> int:
    return cli.main(["up", *argv], provider=where["provider"])


def test_up_k8s_writes_manifests_that_validate(up_env, capsys):
    out_dir = up_env["tmp"] / "out"
    code = up(up_env, DERIVED, "--gpus", "1x3090", "--nodes", "2", "--profile-like", "vllm/minimal", "--yes",
              "--launcher", "k8s", "--head-ip", "10.0.0.1", "--dir", str(out_dir))
    cap = capsys.readouterr()
    assert code == 0, cap.out + cap.err
    assert "[up] note: --head-ip does not apply to --launcher k8s" in cap.out
    assert "2-node launch (k8s): TP 1 × PP 2" in cap.out and "nothing started" in cap.out
    names = sorted(str(p.relative_to(out_dir)) for p in (out_dir / "k8s").iterdir())
    assert names == ["k8s/configmap.yaml", "k8s/leaderworkerset.yaml", "k8s/model-cache-pvc.yaml",
                     "k8s/service.yaml"]
    for name in names:
        validate_manifest((out_dir / name).read_text(encoding="utf-8"))
    head = yaml.safe_load((out_dir / "k8s/configmap.yaml").read_text(encoding="utf-8"))["data"]["head.sh"]
    assert DERIVED in head and "--revision" in head
    state = json.loads((out_dir / "state.json").read_text(encoding="utf-8"))
    assert state["launcher"] == "k8s" and state["state"] == "written" and (state["tp"], state["pp"]) == (1, 2)
    assert [c["line"].split(":")[0] for c in state["preflight"]] == ["kubectl"]
    assert "kubectl apply -f k8s/" in (out_dir / "RUNBOOK.md").read_text(encoding="utf-8")
    assert not list((up_env["tmp"] / "hf").rglob("*.safetensors"))          # written only: no weights fetched
    assert cli.main(["status", str(out_dir)]) == 64
    assert "RUNBOOK.md" in capsys.readouterr().err


def test_cluster_files_do_not_need_local_disk_for_the_weights(up_env, capsys):
    from club3090.edges.provider import LiveProvider

    def small_disk(settings: Any) -> LiveProvider:
        return LiveProvider(settings, free_disk=lambda _p: 0, load=lambda: up_env["catalog"])
    common = [DERIVED, "--gpus", "1x3090", "--nodes", "2", "--profile-like", "vllm/minimal", "--yes"]
    out_dir = up_env["tmp"] / "k8s-small-disk"
    code = cli.main(["up", *common, "--launcher", "k8s", "--dir", str(out_dir)], provider=small_disk)
    cap = capsys.readouterr()
    assert code == 0, cap.out + cap.err
    assert (out_dir / "k8s" / "leaderworkerset.yaml").is_file()
    # the same short disk still stops a launch that downloads here
    one = up_env["tmp"] / "one-node"
    code = cli.main(["up", DERIVED, "--gpus", "1x3090", "--profile-like", "vllm/minimal", "--yes", "--no-start",
                     "--dir", str(one)], provider=small_disk)
    assert code == 2 and "Not enough free disk space" in capsys.readouterr().out and not one.exists()


def test_up_k8s_on_the_automatic_shape_across_nodes(up_env, capsys):
    # no --profile-like: the gate's automatic shape (TP 8 inside a node x PP 2 across two) priced per
    # rank on the rig's 16 GPUs, and the weights (600+ GiB) never counted against this machine's disk
    from tests.fakehub import add_deepseek_v3_layout

    add_deepseek_v3_layout(up_env["hub"])
    out_dir = up_env["tmp"] / "dsv3"
    code = up(up_env, "deepseek-ai/DeepSeek-V3", "--gpus", "2x(8xH100)", "--launcher", "k8s", "--yes",
              "--trust-remote-code", "--dir", str(out_dir))
    cap = capsys.readouterr()
    assert code == 0, cap.out + cap.err
    assert "(TP 8 x PP 2)" in cap.out and "2-node launch (k8s): TP 8 × PP 2" in cap.out
    validate_manifest((out_dir / "k8s" / "leaderworkerset.yaml").read_text(encoding="utf-8"))
    head = yaml.safe_load((out_dir / "k8s/configmap.yaml").read_text(encoding="utf-8"))["data"]["head.sh"]
    assert "--tensor-parallel-size 8" in head and "--pipeline-parallel-size 2" in head


def test_up_ray_files_bring_up_a_loopback_cluster(up_env, capsys, tmp_path):
    out_dir = up_env["tmp"] / "ray"
    ray_port, serve_port = free_port(), free_port()
    code = up(up_env, DERIVED, "--gpus", "1x3090", "--nodes", "2", "--profile-like", "vllm/minimal", "--yes",
              "--launcher", "ray", "--head-ip", "127.0.0.1", "--network-interface", "lo",
              "--ray-port", str(ray_port), "--port", str(serve_port), "--dir", str(out_dir))
    cap = capsys.readouterr()
    assert code == 0, cap.out + cap.err
    for name in ("head.sh", "worker.sh", "cluster.env", "compose.head.yml", "compose.worker.yml", "RUNBOOK.md",
                 "launch.json", "state.json"):
        assert (out_dir / name).is_file(), name
    assert "preflight ok: 127.0.0.1 is an address of this machine" in cap.out
    assert f"preflight ok: Ray's port {ray_port} on 127.0.0.1 is free" in cap.out
    for role in ("head", "worker"):
        validate_compose((out_dir / f"compose.{role}.yml").read_text(encoding="utf-8"))
    description = json.loads((out_dir / "launch.json").read_text(encoding="utf-8"))
    assert description["cluster"]["serve_argv"][:3] == ["vllm", "serve", DERIVED]
    seen = bring_up(out_dir, tmp_path)
    assert seen["nodes"] == 2 and seen["gpus"] == 2 and seen["gpus_per_node"] == [1, 1]
    argv = seen["argv"]
    assert argv[1] == DERIVED and argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert argv[argv.index("--revision") + 1] == description["up"]["commit"]


@pytest.mark.parametrize("rig", [("--gpus", "1x3090", "--nodes", "2"), ("--gpus", "2x(1x3090)")])
def test_up_refuses_several_nodes_on_a_single_node_launcher(up_env, capsys, rig):
    code = up(up_env, DERIVED, *rig, "--profile-like", "vllm/minimal", "--yes",
              "--launcher", "native", "--dir", str(up_env["tmp"] / "x"))
    assert code == 64 and "--launcher ray or --launcher k8s" in capsys.readouterr().err
    assert not (up_env["tmp"] / "x").exists()


def test_up_ray_refuses_an_unsafe_address_before_writing(up_env, capsys):
    out_dir = up_env["tmp"] / "bad"
    code = up(up_env, DERIVED, "--gpus", "1x3090", "--nodes", "2", "--profile-like", "vllm/minimal", "--yes",
              "--launcher", "ray", "--head-ip", "$(reboot)", "--dir", str(out_dir))
    assert code == 64 and "--head-ip" in capsys.readouterr().err
    assert not out_dir.exists()
