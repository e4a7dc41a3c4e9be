"""Notifications: tell people about a job's events by webhook (Slack-compatible or JSON) and email.

The hosts of the engine turn a tick's events into :class:`Notification` s
(:func:`~orchestrator.notify.messages.notifications_for`) and add them to an outbox in the same
transaction as the tick's state (:mod:`orchestrator.notify.outbox`); a background
:class:`~orchestrator.notify.worker.DeliveryWorker` sends them with retries, so a tick never waits on
the network. See docs/notifications.md.
"""

from orchestrator.notify.config import NotifyConfig, load_notify_config, parse_notify_config
from orchestrator.notify.messages import JobRef, Notification, addressed, notifications_for
from orchestrator.notify.outbox import Outbox, Pending, enqueue
from orchestrator.notify.senders import DeliveryError, Sender
from orchestrator.notify.worker import DeliveryWorker, RetryPolicy

__all__ = [
    "DeliveryError",
    "DeliveryWorker",
    "JobRef",
    "Notification",
    "NotifyConfig",
    "Outbox",
    "Pending",
    "RetryPolicy",
    "Sender",
    "addressed",
    "enqueue",
    "load_notify_config",
    "notifications_for",
    "parse_notify_config",
]
