"""Kubernetes API errors as the API server reports them (``Status`` objects)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ApiError", "FieldError", "status_object"]


class FieldError(tuple[str, str, str]):
    """(field path, reason type, message), e.g. ("spec.devices[3].name", "FieldValueInvalid", ...)."""

    __slots__ = ()

    def __new__(cls, field: str, message: str, reason: str = "FieldValueInvalid") -> FieldError:
        return super().__new__(cls, (field, reason, message))

    @property
    def field(self) -> str:
        return self[0]

    @property
    def reason(self) -> str:
        return self[1]

    @property
    def message(self) -> str:
        return self[2]

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def status_object(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        out["details"] = details
    return out


class ApiError(Exception):
    """An API failure with its HTTP code and Kubernetes reason (NotFound, Conflict, Invalid...)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        kind: str = "",
        name: str = "",
        group: str = "",
        causes: Sequence[FieldError] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.kind = kind
        self.name = name
        self.group = group
        self.causes = tuple(causes)

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [{"reason": c.reason, "message": c.message, "field": c.field} for c in self.causes]
        return status_object(self.code, self.reason, self.message, details or None)

    @classmethod
    def from_status(cls, status: dict[str, Any]) -> ApiError:
        details = status.get("details") or {}
        causes = [
            FieldError(c.get("field", ""), c.get("message", ""), c.get("reason", ""))
            for c in details.get("causes", []) or []
        ]
        return cls(
            int(status.get("code", 500)),
            str(status.get("reason", "")),
            str(status.get("message", "")),
            kind=str(details.get("kind", "")),
            name=str(details.get("name", "")),
            group=str(details.get("group", "")),
            causes=causes,
        )

    @classmethod
    def not_found(cls, kind: str, name: str, group: str = "") -> ApiError:
        what = f"{kind}.{group}" if group else kind
        return cls(404, "NotFound", f'{what} "{name}" not found', kind=kind, name=name, group=group)

    @classmethod
    def already_exists(cls, kind: str, name: str, group: str = "") -> ApiError:
        what = f"{kind}.{group}" if group else kind
        return cls(409, "AlreadyExists", f'{what} "{name}" already exists', kind=kind, name=name, group=group)

    @classmethod
    def conflict(cls, kind: str, name: str, why: str, group: str = "") -> ApiError:
        what = f"{kind}.{group}" if group else kind
        return cls(409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": {why}', kind=kind, name=name, group=group)

    @classmethod
    def invalid(cls, kind_name: str, name: str, causes: Sequence[FieldError], *, kind: str, group: str = "") -> ApiError:
        """As apimachinery's ``NewInvalid``: ``Kind.group "name" is invalid: ...``, one error as it
        is, several as an aggregate ``[e1, e2]``."""
        what = f"{kind_name}.{group}" if group and "." not in kind_name else kind_name
        text = str(causes[0]) if len(causes) == 1 else "[" + ", ".join(str(c) for c in causes) + "]"
        return cls(422, "Invalid", f'{what} "{name}" is invalid: {text}', kind=kind, name=name, group=group, causes=causes)

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, "BadRequest", message)

    @property
    def is_not_found(self) -> bool:
        return self.code == 404

    @property
    def is_conflict(self) -> bool:
        return self.code == 409
