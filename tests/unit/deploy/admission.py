"""Run a rendered ValidatingAdmissionPolicy's CEL the way the API server does.

The chart's admission policies are executed with a real CEL implementation
(cel-python): match conditions first (a request they do not match is not the
policy's business), then the variables in order, then every validation, each
of which must be true for the request to be admitted. A request is the
operation, the requester (`request.userInfo`, whose bound service-account
token carries the node its pod runs on), the object as written (`object`,
null on DELETE) and as stored (`oldObject`, null on CREATE).

cel-python does not type-check against the objects' schemas as the API server
does; it checks what the expressions decide.
"""

from __future__ import annotations

from typing import Any

import celpy

ALLOWED = "allowed"
NOT_MATCHED = "not matched"


class Policy:
    """A rendered ValidatingAdmissionPolicy's spec, compiled once."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.env = celpy.Environment()
        self.conditions = [self._compile(c["expression"]) for c in spec["matchConditions"]]
        self.variables = [
            (v["name"], self._compile(v["expression"])) for v in spec.get("variables", [])
        ]
        self.validations = [
            (self._compile(v["expression"]), v["message"]) for v in spec["validations"]
        ]

    def _compile(self, expression: str) -> Any:
        return self.env.program(self.env.compile(expression))

    def decide(
        self,
        *,
        user: dict[str, Any],
        old: dict[str, Any] | None,
        new: dict[str, Any] | None,
        operation: str = "UPDATE",
    ) -> str:
        """ALLOWED, NOT_MATCHED or the message of the first failed validation."""
        activation: dict[str, Any] = {
            "object": celpy.json_to_cel(new),
            "oldObject": celpy.json_to_cel(old),
            "request": celpy.json_to_cel({"operation": operation, "userInfo": user}),
        }
        if not all(bool(c.evaluate(activation)) for c in self.conditions):
            return NOT_MATCHED
        variables: dict[str, Any] = {}
        for name, program in self.variables:
            value = program.evaluate({**activation, "variables": _cel_map(variables)})
            if isinstance(value, celpy.CELEvalError):
                raise AssertionError(f"variable {name}: evaluation error: {value}")
            variables[name] = value
        activation["variables"] = _cel_map(variables)
        for program, message in self.validations:
            result = program.evaluate(activation)
            if isinstance(result, celpy.CELEvalError):
                raise AssertionError(f"evaluation error: {result}")
            if not bool(result):
                return str(message)
        return ALLOWED


def _cel_map(values: dict[str, Any]) -> Any:
    return celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in values.items()})
