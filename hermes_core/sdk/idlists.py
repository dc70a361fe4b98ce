"""IdRule: how a platform reads the entries of its access lists (docs/behaviour.md §9).

An `allowed_users` / `admin_users` / `allowed_chats` / `allowed_roles` entry is compared with the
ids the platform sends, as they are: an entry written in another form (`"@alice"` where Telegram
sends `"123456789"`, `"+1 555 123 4567"` where Signal sends `"+15551234567"`) matches nobody, and
the person it names is refused with nothing to tell the operator why. A platform plugin therefore
gives its settings model an `IdRule` per kind of id (`PlatformSettings.user_id_rule`,
`chat_id_rule`, `role_id_rule`; `IdRule.no_roles` for a platform without roles): the rule turns an
entry that means exactly one id into that id, and an entry that can never be one is refused when
the configuration is loaded, with an error naming the key, the entry and the forms that work
(`hermes-gateway doctor` shows it as a row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, TypeVar

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class IdRule:
    """One platform's rule for one kind of id in its access lists.

    Attributes:
        read: `entry -> id`: the entry (already stripped of surrounding blanks) in the form the
            platform sends it (`"u0123abcd"` → `"U0123ABCD"`), or None when no id the platform
            sends can ever equal it. Must not raise.
        never: who such an entry would never match, for the error (`"a Telegram user"`).
        accepted: the forms that work, with an example each, for the error
            (`"a numeric user id (123456789)"`).
    """

    read: Callable[[str], str | None]
    never: str
    accepted: str

    @classmethod
    def no_roles(cls, platform: str) -> IdRule:
        """The `allowed_roles` rule of a platform without roles (docs/behaviour.md §9): no adapter
        of it sets `role_authorized`, so every entry would admit nobody and is refused.

        Args:
            platform: the platform's label, for the error (`"Telegram"`).

        Returns:
            A rule refusing every entry: `platforms.telegram.allowed_roles: 'admins' can never
            match a Telegram sender (Telegram has no roles): write the users in allowed_users or
            the chats in allowed_chats instead`.
        """
        return cls(read=lambda _entry: None, never=f"a {platform} sender ({platform} has no roles)",
                   accepted="the users in allowed_users or the chats in allowed_chats instead")

    def entries(self, values: Iterable[str], name: str) -> list[str]:
        """Every entry of one list, read by the rule.

        Args:
            values: the list as validated (strings; TOML integers are strings by now).
            name: the key, for the error (`"platforms.telegram.allowed_users"`).

        Returns:
            The entries in the form the platform sends, in order.

        Raises:
            ValueError: an entry can never match; the message names `name`, the entry and
                `accepted` (`platforms.telegram.allowed_users: '@alice' can never match a
                Telegram user: write a numeric user id (123456789)`).
        """
        out = []
        for entry in values:
            value = self.read(entry.strip())
            if value is None:
                raise ValueError(f"{name}: {entry!r} can never match {self.never}: write {self.accepted}")
            out.append(value)
        return out

    def keys(self, table: Mapping[str, V], name: str) -> dict[str, V]:
        """The keys of a per-chat (per-user…) table read by the rule, as `entries` reads a list:
        the adapter looks the table up by the id the platform sends, so a key in another form
        would never apply (Slack's `channels`, Telegram's `topic_names`).

        Args:
            table: the table as validated, `{key as written: value}`.
            name: the key of the table, for the error (`"platforms.slack.channels"`).

        Returns:
            `{id as the platform sends it: value}`, in the table's order.

        Raises:
            ValueError: a key can never match (the `entries` error), or two keys are one id
                (`platforms.slack.channels: 'C0GENERAL1' and 'c0general1' are the same Slack
                conversation (C0GENERAL1): keep one table`): which table applies would be a
                matter of order.
        """
        what = self.never.removeprefix("an ").removeprefix("a ")
        out: dict[str, V] = {}
        written: dict[str, str] = {}
        for key, read in zip(table, self.entries(table, name)):
            if read in out:
                raise ValueError(f"{name}: {written[read]!r} and {key!r} are the same {what} ({read}): keep one table")
            out[read], written[read] = table[key], key
        return out
