"""The turn workflow's type is one setting, and the agent may start the workflow it runs in."""

from __future__ import annotations

import json
import re
from typing import Any

from hermes_gateway.resources import TURN_STATE_MACHINE
from hermes_gateway.settings import load_settings
from tests.infra.conftest import Synthesized


def _agent_policies(synthesized: Synthesized) -> list[dict[str, Any]]:
    agent_roles = {
        r["Properties"]["Role"]["Fn::GetAtt"][0]
        for r in synthesized.of_type("AWS::Lambda::Function").values()
        if TURN_STATE_MACHINE.env_var in (r["Properties"].get("Environment") or {}).get("Variables", {})
        and "Turn tasks" in r["Properties"].get("Description", "")
    }
    assert len(agent_roles) == 1
    return [
        statement
        for policy in synthesized.of_type("AWS::IAM::Policy").values()
        if any(role.get("Ref") in agent_roles for role in policy["Properties"]["Roles"])
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_agent_may_start_its_own_workflow_by_name_without_a_reference_cycle(synthesized: Synthesized) -> None:
    # The machine has a fixed name, and the agent's grant names it without referring to the machine
    (machine,) = synthesized.of_type("AWS::StepFunctions::StateMachine").values()
    name = machine["Properties"]["StateMachineName"]
    assert name.endswith(f"-{TURN_STATE_MACHINE.name}")
    starts = [s for s in _agent_policies(synthesized) if s["Action"] == "states:StartExecution"]
    assert len(starts) == 1
    resource = json.dumps(starts[0]["Resource"])
    assert name in resource
    assert set(re.findall(r'"Ref": "([^"]+)"', resource)) <= {"AWS::Partition", "AWS::Region", "AWS::AccountId"}


def test_the_workflow_type_is_one_setting_with_the_same_definition() -> None:
    from aws_cdk.assertions import Template

    from infra.app import SKIP_BUNDLING, build_app

    _app, stack = build_app(load_settings(env={"GATEWAY_WORKFLOW_TYPE": "standard"}, config={}), context=SKIP_BUNDLING)
    (machine,) = Template.from_stack(stack).find_resources("AWS::StepFunctions::StateMachine").values()
    assert machine["Properties"]["StateMachineType"] == "STANDARD"
    definition = json.loads(machine["Properties"]["DefinitionString"])
    assert definition["StartAt"] == "Begin" and "Paused" in definition["States"]
