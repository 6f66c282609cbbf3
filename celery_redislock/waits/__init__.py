"""Calls that must run later: the one way a call is put off (``put_off``), the countdown the
broker can carry (``broker_delay``) and the copy tokens that tell a put-off call's copies apart
(``copies``)."""
