"""The checks the kubelet applies to a RegisterRequest before it dials the plugin.

Kept pure (strings in, an error message or None out) so the rules can be tested
table-driven without a server. The version and resource-name rules follow the
kubelet's device manager: only `v1beta1` is accepted, and the resource must be an
*extended* resource name — it has a `/`, is not in the `kubernetes.io` namespace,
does not start with `requests.`, and `requests.<name>` is a qualified name. The
endpoint must be a plain file name because the kubelet joins it to its own
device-plugin directory.
"""

from __future__ import annotations

import re

SUPPORTED_VERSIONS = ("v1beta1",)

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_REQUESTS_PREFIX = "requests."


def version_error(version: str) -> str | None:
    if version in SUPPORTED_VERSIONS:
        return None
    supported = ", ".join(f'"{v}"' for v in SUPPORTED_VERSIONS)
    return (
        f'requested API version "{version}" is not supported by kubelet. '
        f"Supported versions are [{supported}]"
    )


def is_extended_resource_name(name: str) -> bool:
    if "/" not in name or "kubernetes.io/" in name or name.startswith(_REQUESTS_PREFIX):
        return False
    prefix, _, short = (_REQUESTS_PREFIX + name).partition("/")
    return (
        "/" not in short
        and len(prefix) <= 253
        and _DNS_SUBDOMAIN.match(prefix) is not None
        and len(short) <= 63
        and _QUALIFIED_NAME.match(short) is not None
    )


def resource_name_error(name: str) -> str | None:
    if is_extended_resource_name(name):
        return None
    return f'the ResourceName "{name}" is invalid'


def endpoint_error(endpoint: str) -> str | None:
    if endpoint and endpoint not in (".", "..") and "/" not in endpoint and "\0" not in endpoint:
        return None
    return f'invalid endpoint "{endpoint}": must be a socket file name in the device-plugin dir'


def registration_error(*, version: str, resource_name: str, endpoint: str) -> str | None:
    """First reason the kubelet would refuse this registration, or None to accept it."""
    return version_error(version) or resource_name_error(resource_name) or endpoint_error(endpoint)
