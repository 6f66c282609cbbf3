"""The web page's locks: who may see it (``--auth``), a CSRF token on every form, and the
response headers that keep a page of Redis data from running anything."""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from dataclasses import dataclass

from flask import Request, Response, session

from ...errors import ConfigurationError

__all__ = ["CSRF_FIELD", "Auth", "csrf_token", "harden", "parse_auth", "valid_csrf"]

#: The form field every POST carries its CSRF token in.
CSRF_FIELD = "csrf_token"

# No script at all, nothing from elsewhere: escaping keeps Redis data text, this keeps the
# browser from running any that slipped through. Styles are inline (one page, no static files).
_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


@dataclass(frozen=True)
class Auth:
    """HTTP Basic credentials (``user:password``), or a token (``Authorization: Bearer <token>``,
    or as the password of Basic with any user name, which a browser can prompt for)."""

    user: str | None
    secret: str

    def allows(self, request: Request) -> bool:
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and self.user is None:
            return _same(value.strip(), self.secret)
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user_ok = self.user is None or _same(user, self.user)
        return _same(password, self.secret) and user_ok

    def challenge(self) -> Response:
        return Response(
            "Authentication required\n",
            401,
            {"WWW-Authenticate": 'Basic realm="celery_redislock", charset="UTF-8"'},
            mimetype="text/plain",
        )


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def parse_auth(spec: str | None, source: str = "--auth") -> Auth | None:
    """``user:password`` or a token (no ``:``); None or "" for no authentication."""
    if not spec:
        return None
    user, colon, password = spec.partition(":")
    if colon and (not user or not password):
        raise ConfigurationError(f"{source}: give user:password (both non-empty) or a token, got {spec!r}")
    return Auth(user, password) if colon else Auth(None, spec)


def csrf_token() -> str:
    """This browser session's CSRF token (made on first use, kept in the signed session cookie)."""
    token = session.get(CSRF_FIELD)
    if not isinstance(token, str):
        token = session[CSRF_FIELD] = secrets.token_urlsafe(32)
    return token


def valid_csrf(request: Request) -> bool:
    expected = session.get(CSRF_FIELD)
    given = request.form.get(CSRF_FIELD, "")
    return isinstance(expected, str) and bool(given) and _same(given, expected)


def harden(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", _POLICY)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("Cache-Control", "no-store")
    return response
