"""The run's report: fault windows, client errors by kind, accounting, invariants."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from bench.chaos.checks import STATE_FIELDS, StatsCheck
from bench.chaos.load import Ledger, Outcome

OPERATIONS = ("enqueue", "dequeue", "acknowledge")


@dataclass
class FaultRecord:
    name: str
    started: float  # seconds since the load started
    ended: float | None = None  # when the fault was over (server back, process restarted)
    detail: str = ""
    # After the fault ended: seconds until /health/ready answered 200, per process probed
    # at once (None: not within the timeout, or the process had exited).
    ready_after: dict[str, float | None] = field(default_factory=dict)
    # The processes left unprobed for `unprobed_seconds`: seconds from their first probe.
    ready_after_unprobed: dict[str, float | None] = field(default_factory=dict)
    unprobed_seconds: float = 0.0


@dataclass
class ProcessExit:
    name: str
    at: float
    code: int | None
    last_line: str


@dataclass
class Window:
    label: str
    start: float
    end: float
    fault: FaultRecord | None = None
    # Client errors after this moment count against the run (a fault's end + grace).
    errors_allowed_until: float | None = None


def windows(faults: list[FaultRecord], load_end: float, recovery: float) -> list[Window]:
    """Before the first fault; then, per fault, while it lasts and after it until the next."""
    if not faults:
        return [Window("no fault", 0.0, load_end)]
    found = [Window("before any fault", 0.0, faults[0].started)]
    for index, fault in enumerate(faults):
        ended = fault.ended if fault.ended is not None else load_end
        next_start = faults[index + 1].started if index + 1 < len(faults) else load_end
        # Redis down is never an error for a client (SPEC §4: fall back to PostgreSQL).
        allowed = fault.started if fault.name == "redis-stop" else ended + recovery
        found.append(Window(f"{fault.name}: during", fault.started, ended, fault, allowed))
        found.append(Window(f"{fault.name}: after", ended, next_start, fault, allowed))
    return found


def _in(outcomes: Iterable[Outcome], start: float, end: float) -> list[Outcome]:
    return [o for o in outcomes if start <= o.at < end]


@dataclass
class Verdict:
    failures: list[str] = field(default_factory=list)

    def require(self, ok: bool, message: str) -> str:
        if not ok:
            self.failures.append(message)
        return "ok" if ok else "FAILED"


def render(
    *,
    header: list[str],
    ledger: Ledger,
    faults: list[FaultRecord],
    load_end: float,
    recovery: float,
    ready_target: float,
    exits: list[ProcessExit],
    checks: list[StatsCheck],
    undelivered_stored: int,
    drain_seconds: float | None,
) -> tuple[str, Verdict]:
    verdict = Verdict()
    out: list[str] = [*header, ""] if header else []

    # -- faults -----------------------------------------------------------------------
    out.append("Faults")
    for fault in faults:
        ended = f"{fault.ended:7.1f} s" if fault.ended is not None else "   never"
        out.append(f"  {fault.name:<17} at {fault.started:6.1f} s, over at {ended}: {fault.detail}")
        for name, seconds in fault.ready_after.items():
            shown = f"{seconds:.2f} s" if seconds is not None else "never (or exited)"
            status = verdict.require(
                seconds is not None and seconds <= ready_target,
                f"{name} not ready within {ready_target:g} s after {fault.name}",
            )
            out.append(
                f"      /health/ready 200 on {name}, probed every 100 ms: {shown} after the "
                f"database returned  [{status}, target <= {ready_target:g} s]"
            )
        if fault.ready_after_unprobed:
            out.append(
                f"      left unprobed for {fault.unprobed_seconds:g} s (only the hot path and "
                "their own cycles could repair them), then probed:"
            )
        for name, seconds in fault.ready_after_unprobed.items():
            shown = f"{seconds:.2f} s" if seconds is not None else "never (or exited)"
            status = verdict.require(
                seconds is not None and seconds <= ready_target,
                f"{name} not ready within {ready_target:g} s of its first probe after {fault.name}",
            )
            out.append(f"        {name:<30} ready {shown} after its first probe  [{status}]")
    out.append("")

    # -- client errors by window ------------------------------------------------------
    out.append("Client requests by window (ok / failed), and the failures by kind")
    for window in windows(faults, load_end, recovery):
        chunk = _in(ledger.outcomes, window.start, window.end)
        counts = "   ".join(
            f"{op} {sum(o.ok for o in chunk if o.op == op)}/"
            f"{sum(not o.ok for o in chunk if o.op == op)}"
            for op in OPERATIONS
        )
        out.append(f"  {window.label:<28} {window.start:6.1f}-{window.end:6.1f} s   {counts}")
        kinds = Counter((o.op, o.kind, o.api) for o in chunk if not o.ok)
        for (op, kind, api), n in sorted(kinds.items(), key=lambda item: -item[1]):
            out.append(f"      {n:6d} x {op:<11} {kind}  (via {api})")
        if window.errors_allowed_until is not None:
            late = [o for o in chunk if not o.ok and o.at >= window.errors_allowed_until]
            if late:
                first, last = late[0].at, late[-1].at
                allowed = (
                    "at all during a Redis outage"
                    if window.fault is not None and window.fault.name == "redis-stop"
                    else f"more than {recovery:g} s after the fault ended"
                )
                verdict.require(
                    False,
                    f"{len(late)} client errors {allowed} ({window.label}, "
                    f"{first:.1f}-{last:.1f} s)",
                )
                out.append(
                    f"      !! {len(late)} of these failed {allowed} "
                    f"(from {first:.1f} s to {last:.1f} s)"
                )
    out.append("")

    # -- processes ----------------------------------------------------------------------
    out.append("Retsu processes that exited on their own (none expected)")
    for gone in exits:
        out.append(f"  {gone.name}: exit {gone.code} at {gone.at:.1f} s: {gone.last_line}")
    if not exits:
        out.append("  none")
    verdict.require(not exits, f"{len(exits)} Retsu processes exited on their own")
    out.append("")

    # -- accounting ---------------------------------------------------------------------
    acknowledged = len(ledger.acknowledged_enqueues)
    per_message = Counter(d.message_id for d in ledger.deliveries)
    lost = ledger.lost()
    truly_lost = len(lost) - undelivered_stored
    out.append("Accounting")
    out.append(
        f"  acknowledged enqueues                  {acknowledged:8d}"
        f"   (of which replays answered 200: {ledger.replays})"
    )
    out.append(f"  enqueues given up (never acknowledged) {len(ledger.given_up):8d}")
    out.append(
        f"  messages delivered                     {len(ledger.deliveries):8d}"
        f"   ({len(per_message)} distinct messages)"
    )
    out.append(
        f"  redelivered before an acknowledgement  {ledger.redelivered_before_ack():8d}"
        "   (allowed: the acknowledgement was never confirmed)"
    )
    status = verdict.require(
        truly_lost == 0, f"{truly_lost} acknowledged messages lost (never delivered, not stored)"
    )
    out.append(f"  messages lost                          {truly_lost:8d}   [{status}, must be 0]")
    status = verdict.require(
        undelivered_stored == 0,
        f"{undelivered_stored} acknowledged messages still undelivered after the drain",
    )
    drained = (
        f"drain took {drain_seconds:.1f} s" if drain_seconds is not None else "drain timed out"
    )
    out.append(
        f"  undelivered, still stored at the end   {undelivered_stored:8d}   [{status}, {drained}]"
    )
    status = verdict.require(
        not ledger.delivered_after_ack,
        f"{len(ledger.delivered_after_ack)} acknowledged messages delivered again",
    )
    out.append(
        f"  acknowledged messages delivered again  {len(ledger.delivered_after_ack):8d}"
        f"   [{status}, must be 0]"
    )
    status = verdict.require(
        not ledger.stored_twice, f"{len(ledger.stored_twice)} numbers stored twice"
    )
    out.append(
        f"  enqueues stored twice                  {len(ledger.stored_twice):8d}"
        f"   [{status}, must be 0]"
    )
    if ledger.foreign_payloads:
        out.append(f"  deliveries of unknown payloads         {ledger.foreign_payloads:8d}")
    out.append("")

    # -- exact stats ----------------------------------------------------------------------
    out.append("Exact stats against count(*)")
    for check in checks:
        totals = check.truth_totals()
        out.append(f"  {check.label}")
        out.append(f"    count(*)                 {_fields(totals)}")
        api_status = verdict.require(
            check.api_matches, f"GET /v1/queues/{{id}} stats differ from count(*) ({check.label})"
        )
        api = _fields(check.api) if check.api is not None else f"unavailable ({check.api_error})"
        out.append(f"    GET /v1/queues/{{id}}      {api}  [{api_status}]")
        gauge_status = verdict.require(
            check.gauges_match,
            f"the collector's gauges differ from count(*) ({check.label})",
        )
        if check.gauges is None:
            out.append(
                "    collector gauges         no leader exported a fresh snapshot"
                f"  [{gauge_status}]"
            )
        else:
            shown = ", ".join(
                f"{p} {g.get('ready')}/{g.get('in_flight')} (count {check.truth[p]['ready']}/"
                f"{check.truth[p]['in_flight']})"
                for p, g in sorted(check.gauges.items())
            )
            out.append(
                f"    collector gauges         ready/in flight by priority: {shown}"
                f"  via {check.gauges_source}  [{gauge_status}]"
            )
    out.append("")

    out.append("Invariants")
    if verdict.failures:
        out.extend(f"  FAILED: {failure}" for failure in verdict.failures)
    else:
        out.append("  all held")
    return "\n".join(out), verdict


def _fields(values: dict[str, int]) -> str:
    return ", ".join(f"{f} {values.get(f)}" for f in STATE_FIELDS)
