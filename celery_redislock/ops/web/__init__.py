"""The web page of an app's locks (``celery redislock web``, or ``create_app`` mounted in a WSGI
app); needs the ``web`` extra (Flask and waitress)."""

from .app import WebState, create_app
from .guard import Auth, parse_auth

__all__ = ["Auth", "WebState", "create_app", "parse_auth"]
