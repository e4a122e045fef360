"""Who a browser is: the console's sign-in, kept in one cookie.

The cookie holds the signed-in access key's id (or "operator"), a CSRF token and an
expiry, sealed with the data dir's master key (Fernet: encrypted and authenticated),
so it cannot be read or forged without that key. It is HttpOnly (no script reads it),
SameSite=Strict (no other site's page sends it), scoped to /console, and Secure when
the browser came over https (`ConsoleBase._cookie_options`). The key is looked up
again on every request, so a disabled or deleted key signs its sessions out; the
secret is never kept. Every form that changes something carries the CSRF token, which
must match the cookie's, and a request whose Origin is another site's is refused - the
sign-in too, or another site could sign a browser in to its own account.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from dockyard.api.untrusted import same_secret
from dockyard.secretbox import SecretBox

COOKIE = "dockyard_console"
PATH = "/console"
SESSION_SECONDS = 12 * 3600
OPERATOR = "operator"


@dataclass(frozen=True)
class Session:
    # An access key id, or OPERATOR (signed in with the operator key of the data dir).
    principal: str
    region: str
    csrf: str
    expires: float

    @property
    def operator(self) -> bool:
        return self.principal == OPERATOR


def new(principal: str, region: str, now: float) -> Session:
    return Session(principal, region, secrets.token_urlsafe(24), now + SESSION_SECONDS)


def seal(box: SecretBox, session: Session) -> str:
    return box.encrypt(
        json.dumps(
            {"p": session.principal, "r": session.region, "c": session.csrf, "e": session.expires}
        )
    )


def unseal(box: SecretBox, cookie: str | None, now: float) -> Session | None:
    """The session a cookie holds; None if there is none, it was tampered with, or it
    has expired."""
    if not cookie or len(cookie) > 4096:
        return None
    try:
        data = json.loads(box.decrypt(cookie))
        session = Session(str(data["p"]), str(data["r"]), str(data["c"]), float(data["e"]))
    except (RuntimeError, ValueError, KeyError, TypeError):  # tampered, or not ours
        return None
    return session if session.expires > now else None


def csrf_ok(session: Session, presented: str | None) -> bool:
    return bool(presented) and same_secret(str(presented), session.csrf)
