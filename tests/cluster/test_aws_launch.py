"""`ray up` on AWS launches its GPU workers: the head's role may resolve their image and launch them, and the EFA
opt-in leaves worker <-> head traffic open.

Ray's own bootstrap code decides both (ray/autoscaler/_private/aws/config.py). It imports boto3, which only the
cluster's head venv has, so the functions that matter are compiled here from the installed source and run on our
config with the AWS calls stubbed: the launch template's data comes from cluster/aws/efa-launch-template.json, and the
security groups Ray would create are recorded instead of created."""

from __future__ import annotations

import ast
import copy
import importlib.util
import itertools
import json
import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.test_manifests import CLUSTER, load, provider_files, with_efa

AWS = CLUSTER / "aws"
RAY_AWS = Path(importlib.util.find_spec("ray.autoscaler").submodule_search_locations[0]) / "_private" / "aws"


def ray_aws_functions(*names: str, **stubs: Any) -> dict[str, Any]:
    """The named functions of Ray's aws/config.py, compiled from its source into a namespace where every other name
    they call is a stub given here (a call to anything not given fails the test with a NameError)."""
    tree = ast.parse((RAY_AWS / "config.py").read_text())
    found = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names}
    assert set(found) == set(names), f"Ray's aws/config.py no longer defines {set(names) - set(found)}"
    namespace = {"copy": copy, "itertools": itertools, "Dict": dict, "Any": Any, "List": list, **stubs}
    for node in found.values():
        node.decorator_list = []
        exec(compile(ast.Module(body=[node], type_ignores=[]), str(RAY_AWS / "config.py"), "exec"), namespace)
    return namespace


def allows(policy: dict, action: str, resource: str) -> bool:
    """Whether an Allow statement of the IAM policy covers action on resource (IAM's `*` and `?` wildcards; the
    policy has no Deny and no conditions: asserted)."""
    for s in policy["Statement"]:
        assert s["Effect"] == "Allow" and "Condition" not in s and "NotAction" not in s, s
        actions = [s["Action"]] if isinstance(s["Action"], str) else s["Action"]
        resources = [s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"]
        if any(fnmatchcase(action.lower(), a.lower()) for a in actions) and \
                any(fnmatchcase(resource, r) for r in resources):
            return True
    return False


def parameter_arn(region: str, image_id: str) -> str:
    """The ARN of the SSM parameter a `resolve:ssm:` ImageId names (AWS's public parameters: no account field)."""
    return f"arn:aws:ssm:{region}::parameter{image_id.removeprefix('resolve:ssm:')}"


def node_provider_actions() -> set[str]:
    """The EC2 API actions Ray's AWS node provider calls (aws/node_provider.py), read from its source: the calls the
    autoscaler makes with the head's role."""
    source = (RAY_AWS / "node_provider.py").read_text()
    camel = {m: "".join(w.title() for w in m.split("_")) for m in re.findall(r"meta\.client\.(\w+)", source)}
    camel.update({m: "".join(w.title() for w in m.split("_")) for m in re.findall(r"\bec2\.(describe_\w+)\(", source)})
    actions = set(camel.values())
    resource_calls = {r"create_instances\(": "RunInstances", r"\.instances\.filter\(": "DescribeInstances",
                      r"node\.terminate\(\)": "TerminateInstances", r"node\.stop\(\)": "StopInstances"}
    for pattern, action in resource_calls.items():
        assert re.search(pattern, source), f"Ray's node provider no longer calls {pattern}: re-read it"
        actions.add(action)
    assert {"RunInstances", "CreateTags", "TerminateInstances"} <= actions, actions
    return {f"ec2:{a}" for a in actions}


def test_a_resolve_ssm_image_meets_a_head_role_that_may_read_it_and_launch_workers():
    """On bd00958 both node types booted a `resolve:ssm:` ImageId and the head named no instance profile: Ray gave
    it ray-autoscaler-v1 (AmazonEC2FullAccess + AmazonS3FullAccess, no ssm action), and EC2 resolves the parameter
    only for a caller allowed ssm:GetParameters, so every worker launch by the autoscaler failed."""
    policy = json.loads((AWS / "head-role-policy.json").read_text())
    trust = json.loads((AWS / "head-role-trust.json").read_text())
    assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}  # an instance profile's role
    docs = (CLUSTER.parent / "docs" / "cluster.md").read_text()
    for name in provider_files():
        c = load(name)
        head = c["head_node_type"]
        ssm = {n["node_config"]["ImageId"] for n in c["available_node_types"].values()
               if n["node_config"]["ImageId"].startswith("resolve:ssm:")}
        if not ssm:
            continue  # pinned ami-... ids need no parameter read
        profile = c["available_node_types"][head]["node_config"].get("IamInstanceProfile")
        assert profile, f"{name}: a resolve:ssm: ImageId and no IamInstanceProfile on the head node type {head!r}: " \
                        "Ray's default head role may not ssm:GetParameters, so no worker launches"

        def default_role(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("Ray would make its default role ray-autoscaler-v1 (no ssm action)")

        ns = ray_aws_functions("_configure_iam_role", _set_config_info=lambda **kw: None,
                               cwh=type("cwh", (), {"resolve_instance_profile_name": default_role}))
        bootstrapped = ns["_configure_iam_role"]({**copy.deepcopy(c), "head_node": {}})
        assert bootstrapped["available_node_types"][head]["node_config"]["IamInstanceProfile"] == profile
        assert "IamInstanceProfile" not in bootstrapped["head_node"]  # Ray keeps ours, adds none
        # the profile is the one docs/cluster.md creates, from the policy shipped here
        assert f"--instance-profile-name {profile['Name']}" in docs and "cluster/aws/head-role-policy.json" in docs
        for image in ssm:
            arn = parameter_arn(c["provider"]["region"], image)
            assert allows(policy, "ssm:GetParameters", arn), f"the head's policy may not resolve {arn}"
        missing = {a for a in node_provider_actions() if not allows(policy, a, "*")}
        assert not missing, f"the head's policy lacks what Ray's autoscaler calls: {sorted(missing)}"
        # a worker launched with an instance profile would also need iam:PassRole on its role: ours get none
        template = json.loads((AWS / "efa-launch-template.json").read_text())
        workers = [n for k, n in with_efa(name)["available_node_types"].items() if k != head]
        assert not [w for w in workers if "IamInstanceProfile" in w["node_config"]]
        assert "IamInstanceProfile" not in template and not allows(policy, "iam:PassRole", "*")


class FakeGroup:
    """A security group Ray would create (aws/config.py _create_security_group), recording the rules Ray adds."""

    def __init__(self, group_id: str):
        self.id, self.ip_permissions = group_id, []

    def authorize_ingress(self, IpPermissions: list[dict]) -> None:  # noqa: N803 (boto3's keyword)
        self.ip_permissions += IpPermissions


def bootstrap_groups(c: dict, template: dict) -> tuple[dict, dict[str, FakeGroup]]:
    """Ray's bootstrap steps that give each node type its security groups (aws/config.py bootstrap_aws: launch
    template, network interfaces, security groups), on config `c` with `template` as the launch template's data."""
    created: dict[str, FakeGroup] = {}

    class EC2:
        def describe_launch_template_versions(self, **kwargs: Any) -> dict:
            assert kwargs["LaunchTemplateName"] == "orchestra-p5-efa", kwargs
            return {"LaunchTemplateVersions": [{"LaunchTemplateData": copy.deepcopy(template)}]}

    def create_groups(conf: dict, node_types: list[str]) -> dict[str, FakeGroup]:
        group = created.setdefault("ray-autoscaler-orchestra", FakeGroup("sg-ray-autoscaler-orchestra"))
        return {node_type: group for node_type in node_types}  # one VPC: one group, as Ray makes it

    ns = ray_aws_functions(
        "_configure_from_launch_template", "_configure_node_type_from_launch_template",
        "_configure_node_cfg_from_launch_template", "_configure_from_network_interfaces",
        "_configure_node_type_from_network_interface", "_configure_subnets_and_groups_from_network_interfaces",
        "_subnets_in_network_config", "_security_groups_in_network_config", "_configure_security_group",
        "_upsert_security_groups", "_upsert_security_group_rules", "_update_inbound_rules",
        "_create_default_inbound_rules", "_create_default_intracluster_inbound_rules",
        "_create_default_ssh_inbound_rules",
        _client=lambda name, config: EC2(), _set_config_info=lambda **kw: None,
        _get_or_create_vpc_security_groups=create_groups)
    c = ns["_configure_from_launch_template"](copy.deepcopy(c))
    c = ns["_configure_from_network_interfaces"](c)
    return ns["_configure_security_group"](c), created


def admits(rules: list[dict], sources: set[str]) -> bool:
    """Whether inbound `rules` admit all traffic (every protocol and port) from a member of any group in sources."""
    return any(r["IpProtocol"] == "-1" and {p["GroupId"] for p in r.get("UserIdGroupPairs", [])} & sources
               for r in rules)


def test_efa_opt_in_keeps_worker_and_head_traffic_open():
    """On bd00958 the opted-in h100 type took the launch template's security group while the head got Ray's own,
    whose rule admits only the node types' top-level SecurityGroupIds (aws/config.py _upsert_security_group_rules):
    worker -> head (GCS, Ray's ports) and head -> worker SSH were dropped. The user's group is as docs/cluster.md
    has them create it: all traffic from itself."""
    template = json.loads((AWS / "efa-launch-template.json").read_text())
    (group,) = {g for ni in template["NetworkInterfaces"] for g in ni["Groups"]}
    (subnet,) = {ni["SubnetId"] for ni in template["NetworkInterfaces"]}
    assert {ni["InterfaceType"] for ni in template["NetworkInterfaces"]} == {"interface", "efa-only"}
    assert sum(ni["InterfaceType"] == "efa-only" for ni in template["NetworkInterfaces"]) == 32  # rayjob's efa: 32
    c = with_efa("ray-cluster.yaml")  # the opt-in as the docs tell: sed 's/#efa //'
    bootstrapped, created = bootstrap_groups(c, template)
    rules = {group: [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}]}  # docs: admits itself
    rules.update({g.id: g.ip_permissions for g in created.values()})
    groups = {k: set(n["node_config"]["SecurityGroupIds"]) for k, n in bootstrapped["available_node_types"].items()}
    head = c["head_node_type"]
    for a, b in itertools.permutations(groups, 2):
        assert any(admits(rules.get(g, []), groups[a]) for g in groups[b]), \
            f"{b}'s groups {groups[b]} drop traffic from {a}'s {groups[a]}"
    # the head in the template's subnet; a p5 with many interfaces gets no public IP, so that subnet is private and
    # Ray accepts it only with use_internal_ips (aws/config.py _usable_subnet_ids)
    assert c["available_node_types"][head]["node_config"]["SubnetIds"] == [subnet]
    assert c["provider"]["use_internal_ips"] is True
    docs = (CLUSTER.parent / "docs" / "cluster.md").read_text()
    assert "cluster/aws/efa-launch-template.json" in docs and "use_internal_ips" in docs
    assert f"--source-group {group}" in docs.replace("$SG", group)  # the group admits itself, as modelled


@pytest.mark.parametrize("name", ["ray-cluster.yaml"])
def test_efa_opt_in_off_by_default_keeps_rays_own_groups(name):
    """Without the opt-in Ray makes one group for both node types, admitting itself: nothing of EFA's wiring."""
    bootstrapped, created = bootstrap_groups(load(name), template={})
    (group,) = created.values()
    assert admits(group.ip_permissions, {group.id})
    assert {tuple(n["node_config"]["SecurityGroupIds"]) for n in bootstrapped["available_node_types"].values()} \
        == {(group.id,)}
    assert not load(name)["provider"].get("use_internal_ips")
