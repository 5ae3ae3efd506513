"""Which XIDs count as health events: `DP_DISABLE_HEALTHCHECKS` / `DP_ENABLE_HEALTHCHECKS`.

The reference plugin reads two environment variables and combines them with
a built-in list of application-error XIDs into one table, and operators have
tuned their nodes against that table for years, so it is reproduced exactly,
quirks included:

- each value is lower-cased and split on `,`; each token is trimmed; empty
  tokens are skipped; `all` or `xids` means every XID; a token of decimal
  digits that fits in 64 bits is one XID; anything else (a negative number,
  `0x4f`, a word) is rejected and reported, never fatal;
- the table starts from the disabled set (`{0: disabled}` for all; key 0
  stands for "every XID"), always adds the application errors 13, 31, 43,
  45, 68 and 109 as disabled, then marks every enabled entry not disabled
  (enable-all sets key 0 to "not disabled");
- "everything disabled" means key 0 is present and disabled: health checking
  does not start at all. So `DP_DISABLE_HEALTHCHECKS=all` with
  `DP_ENABLE_HEALTHCHECKS=79` still disables everything; only
  `DP_ENABLE_HEALTHCHECKS=all` turns checking back on;
- an XID is skipped when key 0 is not "not disabled" and either its own entry
  says disabled or (without an entry) everything is disabled. Enable-all
  therefore re-enables even the built-in application errors.

The module is pure: callers pass the values (from the environment or the
config file) and log `rejected` and `describe()` themselves.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# Graphics engine exception, GPU memory page fault, GPU stopped processing,
# preemptive cleanup, video processor exception, context switch timeout:
# errors of one application, not of the GPU.
APPLICATION_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})

ALL = 0  # the table key that stands for every XID
_EVERYTHING = frozenset({"all", "xids"})
_DIGITS = re.compile(r"[0-9]+")
_UINT64_MAX = (1 << 64) - 1

XidValue = str | Iterable[str | int] | None


@dataclass(frozen=True)
class ParsedXids:
    """One variable's value: every XID, or a set of XIDs, plus the tokens that made no sense."""

    everything: bool = False
    xids: frozenset[int] = frozenset()
    rejected: tuple[str, ...] = ()


def parse_xids(value: XidValue) -> ParsedXids:
    """Parse one variable's value (a comma list, or a list from the config file)."""
    if value is None:
        return ParsedXids()
    tokens = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    xids: set[int] = set()
    rejected: list[str] = []
    for raw in tokens:
        token = raw.strip().lower()
        if not token:
            continue
        if token in _EVERYTHING:
            return ParsedXids(everything=True)
        if _DIGITS.fullmatch(token) and int(token) <= _UINT64_MAX:
            xids.add(int(token))
        else:
            rejected.append(raw.strip())
    return ParsedXids(xids=frozenset(xids), rejected=tuple(rejected))


@dataclass(frozen=True)
class XidPolicy:
    """The effective table: XID -> disabled?, key 0 meaning every XID."""

    table: Mapping[int, bool] = field(
        default_factory=lambda: dict.fromkeys(sorted(APPLICATION_XIDS), True)
    )
    rejected: tuple[str, ...] = ()  # tokens that were not XIDs, for one warning at start

    @property
    def all_disabled(self) -> bool:
        """True when health checking should not start at all."""
        return self.table.get(ALL) is True

    def is_disabled(self, xid: int) -> bool:
        """Whether an XID event is skipped before it reaches the health machine."""
        if self.table.get(ALL) is False:
            return False
        return self.table.get(xid, self.all_disabled)

    def describe(self) -> str:
        """The startup line the reference logs (`Ignoring the following XIDs ...`)."""
        if self.all_disabled:
            return "Ignoring the following XIDs for health checks: all"
        if self.table.get(ALL) is False:
            return "Ignoring the following XIDs for health checks: none (all enabled)"
        disabled = sorted(x for x, off in self.table.items() if off and x != ALL)
        listed = ", ".join(str(x) for x in disabled) or "none"
        return f"Ignoring the following XIDs for health checks: {listed}"


def xid_policy(*, disable: XidValue = None, enable: XidValue = None) -> XidPolicy:
    """Combine the two values the way the reference does (see the module docstring)."""
    disabled = parse_xids(disable)
    enabled = parse_xids(enable)
    table: dict[int, bool] = {}
    if disabled.everything:
        table[ALL] = True
    else:
        table.update(dict.fromkeys(disabled.xids, True))
    table.update(dict.fromkeys(APPLICATION_XIDS, True))
    if enabled.everything:
        table[ALL] = False
    else:
        table.update(dict.fromkeys(enabled.xids, False))
    return XidPolicy(
        table=dict(sorted(table.items())), rejected=disabled.rejected + enabled.rejected
    )

