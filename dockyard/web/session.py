"""Who a browser is: the console's sign-in, kept in one cookie and one row.

The cookie holds the signed-in access key's id (or "operator"), a CSRF token, an
expiry and the id of its session, sealed with the data dir's master key (Fernet:
encrypted and authenticated), so it cannot be read or forged without that key. It is
HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it), scoped
to /console, and Secure when the browser came over https
(`ConsoleBase._cookie_options`). A sealed cookie cannot be taken back by itself, so the
session it names is also a row in the database (`services.console_sessions`): the
cookie works only while that row exists. Signing out removes the row (a copy of the
cookie is then worth nothing, on every server, across restarts), and so does disabling
or deleting the key (enabling it again does not bring its sessions back). The key is
looked up again on every request, and the secret is never kept. An operator's session
also holds a digest of the operator key it signed in with: once `operator.key` is
replaced, its sessions no longer open an operator's page. Every form that changes
something carries the CSRF token, which must match the cookie's, and a request whose
Origin is another site's is refused - the sign-in too, or another site could sign a
browser in to its own account.
"""

from __future__ import annotations

import hashlib
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
    # Its row in the database (services.console_sessions): the cookie works while it is.
    session_id: str
    # For an operator's session, `operator_digest` of the key it signed in with.
    operator_key: str = ""

    @property
    def operator(self) -> bool:
        return self.principal == OPERATOR

    def holds_operator_key(self, operator_token: str) -> bool:
        """Whether this operator's session was signed in with the operator key in use."""
        return self.operator and same_secret(self.operator_key, operator_digest(operator_token))


def operator_digest(operator_token: str) -> str:
    """What an operator's cookie keeps of the operator key: enough to tell that the key
    was replaced, nothing to sign in with."""
    return hashlib.sha256(b"dockyard console operator key\0" + operator_token.encode()).hexdigest()


def new(
    principal: str, region: str, now: float, session_id: str, operator_token: str = ""
) -> Session:
    digest = operator_digest(operator_token) if principal == OPERATOR else ""
    return Session(
        principal, region, secrets.token_urlsafe(24), now + SESSION_SECONDS, session_id, digest
    )


def seal(box: SecretBox, session: Session) -> str:
    return box.encrypt(
        json.dumps(
            {
                "p": session.principal,
                "r": session.region,
                "c": session.csrf,
                "e": session.expires,
                "s": session.session_id,
                "k": session.operator_key,
            }
        )
    )


def unseal(box: SecretBox, cookie: str | None, now: float) -> Session | None:
    """The session a cookie holds; None if there is none, it was tampered with, it has
    expired, or it names no session (sealed before sessions were kept)."""
    if not cookie or len(cookie) > 4096:
        return None
    try:
        data = json.loads(box.decrypt(cookie))
        session = Session(
            str(data["p"]),
            str(data["r"]),
            str(data["c"]),
            float(data["e"]),
            str(data["s"]),
            str(data.get("k", "")),
        )
    except (RuntimeError, ValueError, KeyError, TypeError):  # tampered, or not ours
        return None
    return session if session.expires > now and session.session_id else None


def csrf_ok(session: Session, presented: str | None) -> bool:
    return bool(presented) and same_secret(str(presented), session.csrf)
