"""The loopback receivers (tests/notify/receivers.py) as fixtures of these tests."""

from tests.notify.receivers import down_url, smtp, webhook

__all__ = ["down_url", "smtp", "webhook"]
