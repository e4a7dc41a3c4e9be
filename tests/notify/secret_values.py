"""Recognisable secret values, and the check that no piece of one reached a text (an event, an error, a
log record, the CLI's output). Shared by the notification and CLI tests."""

from __future__ import annotations

MARK = "Zq7XWv9KJp2MQr5TXy8L"
"""No 4 characters in a row of it appear in anything gpuctl writes by itself."""
HOST = f"{MARK[:8].lower()}.zz"
SHARED = "https://"
"""Pieces a value may share with gpuctl's own words (its fixes say ``https://...``)."""


def leaks(text: str, value: str) -> list[str]:
    """Every piece of 4 characters of ``value`` found in ``text`` (those of :data:`SHARED` aside)."""
    return sorted(
        {value[i : i + 4] for i in range(len(value) - 3) if value[i : i + 4] in text}
        - {SHARED[i : i + 4] for i in range(len(SHARED) - 3)}
    )


WEBHOOK_VALUES: dict[str, str] = {
    "not a URL": f"{MARK[:8]} {MARK[8:]}",
    "multi-line": f"{MARK[:10]}\n{MARK[10:]}",
    "'=' and ':'": f"{MARK[:5]}={MARK[5:9]}:{MARK[9:]}::=",
    "no scheme": f"{HOST}/{MARK[8:]}",
    "ftp": f"ftp://{MARK[:4]}:{MARK[4:8]}@{MARK[8:12].lower()}.zz/{MARK[12:]}",
    "user and password": f"https://{MARK[:4]}:{MARK[4:8]}@{MARK[8:12].lower()}.zz/{MARK[12:]}",
    "bad port": f"https://{HOST}:{MARK[8:12]}/{MARK[12:]}",
    "bad IPv6": f"https://[{MARK[:8]}/{MARK[8:]}",
    "no host": f"https:///{MARK}",
    "too long": f"https://{HOST}/" + MARK * 150,
    "not ASCII": f"https://{HOST}/{MARK[8:]}\u00e9",
    "escape": f"https://{HOST}/{MARK[8:]}\x1b]8;;{MARK}\x07",
    "metadata literal": f"http://[::ffff:169.254.169.254]/{MARK}",
    "NAT64 literal": f"http://[64:ff9b::a9fe:a9fe]/{MARK}",
}
"""Webhook URLs (from a secret) that cannot be used, each for another reason."""

SECRETS_FILES: dict[str, str | bytes] = {
    "value where the key goes": f"other: x\n{MARK}:\n",
    "value alone": f"{MARK}\n",
    "value as the only key": f"{MARK}: url\n",
    "value with ': ' in it": f"url: {MARK[:6]}: {MARK[6:]}\n",
    "unclosed bracket": f"url: [{MARK}\n",
    "key given twice": f"url: {MARK}\nurl: {MARK[::-1]}\n",
    "a list": f"url:\n  - {MARK}\n",
    "a complex key": f"? [{MARK}]\n: x\n",
    "an anchor": f"a: &{MARK} x\nurl: *{MARK}\n",
    "not UTF-8": b"url: " + MARK.encode() + b"\xff\xfe\n",
    "a tab": f"url:\t{MARK}\n\t{MARK}: x\n",
}
"""Secrets files (of a private mode) that cannot be read, each holding the value somewhere."""
