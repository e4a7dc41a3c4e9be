"""The loopback receivers (tests/notify/receivers.py) as fixtures of these tests."""

from tests.notify.receivers import (
    down_url_fixture,
    http_trickler_fixture,
    smtp_fixture,
    smtp_trickler_fixture,
    webhook_fixture,
)

__all__ = [
    "down_url_fixture",
    "http_trickler_fixture",
    "smtp_fixture",
    "smtp_trickler_fixture",
    "webhook_fixture",
]
