"""Audit log and auth (SPEC §3.5) through the client — against the fake and a real server
(both run with auth on: tokens `admin` and `messages`)."""

from __future__ import annotations

import pytest

from client_support import Target, unique
from retsu_client import AuditEntry, Forbidden, QueueNotFound, Unauthorized
from retsu_client.errors import InvalidAction


def test_every_operator_action_is_audited_with_the_token_name(target: Target) -> None:
    retsu = target.client()
    name = unique("audited")
    queue = retsu.create_queue(name)
    retsu.update_queue(name, max_delivery_attempts=3)
    retsu.pause_queue(name)
    retsu.resume_queue(name)
    retsu.purge_queue(name)
    retsu.redrive_dead_letters(name, limit=5)
    retsu.delete_queue(name)

    entries = list(retsu.iter_audit_log(queue=queue.id, page_size=2))

    assert [e.action for e in entries] == [
        "queue.deleted",
        "dead_letter.redriven",
        "queue.purged",
        "queue.resumed",
        "queue.paused",
        "queue.updated",
        "queue.created",
    ]
    assert all(isinstance(e, AuditEntry) for e in entries)
    assert {e.actor for e in entries} == {"admin"}
    assert {e.target_id for e in entries} == {queue.id}
    assert entries[-1].details["name"] == name
    assert entries[-2].details == {"changes": {"max_delivery_attempts": 3}}
    assert entries[1].details == {"limit": 5, "redriven": 0, "new_message_ids": {}}
    assert all(e.request_id for e in entries)


def test_the_audit_log_filters_by_queue_name_and_action(target: Target) -> None:
    retsu = target.client()
    name = unique("audited")
    retsu.create_queue(name)
    retsu.pause_queue(name)
    retsu.pause_queue(name)

    paused = retsu.list_audit_log(queue=name, action="queue.paused")

    assert [e.action for e in paused.items] == ["queue.paused", "queue.paused"]
    with pytest.raises(InvalidAction):
        retsu.list_audit_log(action="queue.renamed")


def test_a_queue_filter_by_an_unknown_name_is_queue_not_found(target: Target) -> None:
    """A deleted queue's trail is read by its id (see above); a name must name a queue."""
    with pytest.raises(QueueNotFound):
        target.client().list_audit_log(queue=unique("never-created"))


def test_no_token_or_a_wrong_token_is_unauthorized(target: Target) -> None:
    with pytest.raises(Unauthorized) as error:
        target.client(token=None).list_queues()
    assert (error.value.status, error.value.code) == (401, "unauthorized")

    from retsu_client import Client

    wrong = Client(target.url, token="not-a-real-token", transport=target.transport())
    with pytest.raises(Unauthorized):
        wrong.list_queues()
    wrong.close()


def test_a_messages_token_consumes_but_cannot_operate(target: Target) -> None:
    admin, consumer = target.client(), target.client(token="messages")
    name = unique("scoped")
    admin.create_queue(name)

    consumer.enqueue(name, "by name, resolved with the messages scope")
    message = consumer.dequeue(name)
    assert message is not None
    consumer.acknowledge(name, message)
    assert consumer.get_queue(name).stats.ready == 0

    for call in (
        lambda: consumer.create_queue(unique()),
        lambda: consumer.pause_queue(name),
        lambda: consumer.purge_queue(name),
        lambda: consumer.list_dead_letters(name),
        lambda: consumer.list_audit_log(),
    ):
        with pytest.raises(Forbidden) as error:
            call()
        assert (error.value.status, error.value.code) == (403, "forbidden")
