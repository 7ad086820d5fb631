"""Where a console form sends the browser afterwards, and the short notice it shows there.

A form answers with a ``303`` to the page that shows the result (post/redirect/get); the
notice travels in the address as a key (never as text: an address cannot make a page say
anything but these sentences) with at most a count, the count confirmed beforehand, and a
queue name, each checked before it is shown.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlencode
from uuid import UUID

from retsu.adapters.http.console.gate import ROOT
from retsu.domain.queue import is_valid_queue_name

NOTICES: Final = {
    "paused": "Queue paused: consumers get nothing until it is resumed.",
    "resumed": "Queue resumed.",
    "purged": "Purged {n} message{s}.",
    "saved": "Settings saved.",
    "unchanged": "Nothing to save: every setting already has that value.",
    "created": "Queue {name} created.",
    "queue_deleted": "Queue {name} deleted, with its messages, dead letters and schedules.",
    "redriven": "Dead letter redriven: it is back on the queue as a new message.",
    "redriven_many": "Redrove {n} dead letter{s}, oldest first.",
    "dead_letter_deleted": "Dead letter deleted.",
    "dead_letters_deleted": "Deleted {n} dead letter{s} matching the filter.",
    "message_deleted": "Message deleted.",
    "messages_deleted": "Deleted {n} message{s} matching the filter.",
    "signed_out": "Signed out.",
}
# Said after a bulk notice when it did fewer than were counted when the operator confirmed.
FEWER: Final = " {of} were counted when you confirmed; the others had gone by then."


def _count(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() and len(text) < 10 else None


def notice_text(
    notice: str | None, n: str | None = None, *, of: str | None = None, name: str | None = None
) -> str | None:
    template = NOTICES.get(notice or "")
    if template is None:
        return None
    count = _count(n) or 0
    shown_name = name if name is not None and is_valid_queue_name(name) else "(unnamed)"
    text = template.format(n=f"{count:,}", s="" if count == 1 else "s", name=shown_name)
    counted = _count(of)
    if counted is not None and counted > count:
        text += FEWER.format(of=f"{counted:,}")
    return text


def queue_path(queue_id: UUID, tail: str = "", **query: object) -> str:
    """A page of one queue, with its query (None values left out)."""
    path = f"{ROOT}/queues/{queue_id}{tail}"
    params = {k: str(v) for k, v in query.items() if v is not None}
    return path + ("?" + urlencode(params) if params else "")
