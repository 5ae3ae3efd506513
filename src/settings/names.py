"""Kubernetes names a setting may hold: resource names, DNS subdomains, label keys.

The API server and the kubelet refuse a badly formed name only when the
plugin uses it (advertising a resource, patching a node label, publishing a
ResourceSlice), long after start-up; checked when the config is loaded, it
is a config error naming the flag or key instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from settings.checks import problem, value_problem, wrong_type
from settings.values import show

__all__ = ["dns_subdomain", "label_key", "resource_name"]

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_RESOURCE_PREFIX = "nvidia.com/"
_MAX_RESOURCE_NAME = 63
# The reference's text, pattern included.
_RFC1123_HINT = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    f"regex used for validation is '{_DNS_SUBDOMAIN.pattern}')"
)


def resource_name(value: Any, *, missing: str) -> str:
    """A resource name, returned fully qualified (``gpu`` -> ``nvidia.com/gpu``)."""
    if value is None:
        raise problem(missing)
    if not isinstance(value, str):
        raise wrong_type("a resource name", value)
    full = value if value.startswith(_RESOURCE_PREFIX) else _RESOURCE_PREFIX + value
    if len(full) > _MAX_RESOURCE_NAME:
        limit = _MAX_RESOURCE_NAME
        raise problem(f"fully-qualified resource name must be {limit} characters or less: {full}")
    _, _, local = full.partition("/")
    if not _DNS_SUBDOMAIN.fullmatch(local):
        raise problem(f"incorrect format for resource name '{full}': {_RFC1123_HINT}")
    return full


def dns_subdomain(flag: str) -> Callable[[Any], str]:
    """The check of a flag whose value is a DNS subdomain (``gpu.nvidia.com``)."""

    def check(value: Any) -> str:
        if isinstance(value, str) and len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value):
            return value
        raise value_problem(
            f"invalid --{flag} {show(value)}: expected a DNS subdomain (gpu.nvidia.com)"
        )

    return check


def _label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key (``[prefix/]name``), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return (
            "the prefix must be a DNS subdomain: lower case alphanumeric characters, "
            "'-' or '.', starting and ending with an alphanumeric character"
        )
    if not name or len(name) > 63:
        return "the name must be 1 to 63 characters"
    if not _LABEL_NAME.fullmatch(name):
        return (
            "the name must consist of alphanumeric characters, '-', '_' or '.', "
            "starting and ending with an alphanumeric character"
        )
    return None


def label_key(flag: str) -> Callable[[Any], str]:
    """The check of a flag whose value is a label key (``nvidia.com/device-plugin.config``)."""

    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise wrong_type("a string", value)
        if not value:
            raise value_problem(f"invalid <{flag}>: must not be empty string")
        why = _label_key_problem(value)
        if why is not None:
            raise value_problem(f"invalid <{flag}> {show(value)}: not a valid label key: {why}")
        return value

    return check
