"""When a model's annotation run stops early: the budget (each request's worst case reserved before it is sent,
settled with its real cost) and the early-stop rules per model (an endpoint that never answers or stopped
answering, or almost every reply failing)."""

from __future__ import annotations

__all__ = ["CONNECT_FAILURES", "EARLY_STOP", "FAIL_MIN_ITEMS", "FAIL_SHARE", "Breaker", "Budget", "BudgetStop"]


class BudgetStop(Exception):
    """A request the budget has no room left for."""


# Early stop (docs/annotate.md, "A real course"). A model is stopped, instead of spending its
# retries on every remaining item, when
#  * its endpoint never answered: CONNECT_FAILURES attempts failed to connect or timed out, a retry among
#    them, and no HTTP reply came back in this run (connection refused, DNS, a dead host);
#  * its endpoint stopped answering: CONNECT_FAILURES attempts in a row failed to connect since its last
#    reply and one request spent all its retries that way;
#  * almost every reply fails: of the first FAIL_MIN_ITEMS or more items sent in this run (cache hits
#    not counted), at least FAIL_SHARE failed.
EARLY_STOP = "stopped early"  # how an early stop's reason starts (after "model <m>: ")
CONNECT_FAILURES = 3
FAIL_MIN_ITEMS = 20
FAIL_SHARE = 0.9


class Breaker:
    """Per model: what the early-stop rules above need to know."""

    def __init__(self) -> None:
        self.replied = False  # an HTTP reply (any status) came back in this run
        self.connect_failures = 0  # attempts in a row without an HTTP reply
        self.retried = False  # one of them was a retry
        self.gave_up = False  # a request spent all its attempts without an HTTP reply
        self.sent = 0  # items that sent a request in this run
        self.sent_failed = 0
        self.last_error = ""

    def reply(self) -> None:
        self.replied, self.connect_failures, self.retried, self.gave_up = True, 0, False, False

    def no_reply(self, attempt: int, error: str) -> None:
        self.connect_failures += 1
        self.retried = self.retried or attempt > 0
        self.last_error = error

    def verdict(self) -> str | None:
        """Why to stop now, or None."""
        if self.connect_failures >= CONNECT_FAILURES and (self.gave_up or (not self.replied and self.retried)):
            what = "stopped answering" if self.replied else "is unreachable"
            return (f"its endpoint {what}: {self.connect_failures} attempts in a row got no reply "
                    f"(last: {self.last_error})")
        if self.sent >= FAIL_MIN_ITEMS and self.sent_failed >= FAIL_SHARE * self.sent:
            return (f"almost every reply fails: {self.sent_failed} of the {self.sent} items sent failed "
                    f"(last: {self.last_error})")
        return None


class Budget:
    """Reserve each request's worst case (prompt + max_tokens) before sending; settle with the real cost."""

    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        self.spent = 0.0
        self.reserved = 0.0
        self.stopped = False

    def reserve(self, amount: float) -> None:
        if self.limit is None:
            return
        if self.stopped or self.spent + self.reserved + amount > self.limit:
            self.stopped = True
            raise BudgetStop()
        self.reserved += amount

    def settle(self, reserved: float, actual: float) -> None:
        if self.limit is not None:
            self.reserved -= reserved
        self.spent += actual
