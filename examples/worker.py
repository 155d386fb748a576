#!/usr/bin/env python3
"""A spindle queue consumer: long-poll, process, acknowledge, retry.

    python3 examples/worker.py --dsn 'dbname=app' --queue orders

The worker leases a batch of events with spindle.read(), processes them one
by one and acknowledges each with spindle.ack() in the same transaction as
its processing, so an event's effect commits exactly once even though
delivery is at least once:

  * read() hides the events it returns from every other consumer for
    --visibility-timeout seconds (a lease); nothing is written to the table.
  * Processing an event and acknowledging it commit together.  If the
    worker dies before the commit, the lease expires and the event is
    delivered again (read_count + 1) to this worker or another one.
  * If ack() returns false, somebody else already acknowledged the event
    (our lease had expired and it was delivered again): the transaction is
    rolled back, so its effect is not applied twice.
  * A failing event is handed back with spindle.set_visibility() after an
    exponential backoff (--retry-base * 2^(read_count - 1), at most
    --retry-max seconds).  A queue created with max_reads moves an event
    read too many times to its dead-letter queue (done by the server).

When nothing is ready, read(..., wait => ...) sleeps in the server until an
enqueue commits, a delayed event becomes due or a lease expires: there is
no polling loop and no sleep here.

The worker stops after --idle-exit consecutive polls that returned nothing
(0: never), or on SIGTERM / SIGINT: a poll in progress is cancelled, the
event being processed is finished, and the rest of the batch is handed back
at once so other consumers need not wait for the leases to expire.

Processing here is a stand-in: with --results-table the event is inserted
into that table (created if missing: msg_id, read_count, payload,
processed_at), else it is printed as one JSON line on stdout.  A payload
with "fail": k fails its first k deliveries, to show the retries.

Needs psycopg 3 (Debian: python3-psycopg).
"""

import argparse
import datetime
import json
import logging
import signal
import sys

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

log = logging.getLogger("spindle-worker")


class TransientError(Exception):
    """Processing failed; the event is retried after a backoff."""


class AlreadyAcknowledged(Exception):
    """ack() returned false: another consumer acknowledged the event."""


def seconds(value):
    """A timedelta, which psycopg sends as an interval."""
    return datetime.timedelta(seconds=value)


class Worker:
    def __init__(self, args):
        self.args = args
        self.conn = None
        self.stopping = False
        self.polling = False
        self.processed = 0
        self.retried = 0

    # ---- signals ------------------------------------------------------------

    def stop(self, signum, frame):
        """SIGTERM / SIGINT: finish the current event, then exit."""
        log.info("signal %d: stopping", signum)
        self.stopping = True
        if self.polling and self.conn is not None:
            # The poll may sleep for --wait seconds in the server: cancel it.
            # Cancelling is safe: read() only leases events it returns, and
            # a cancelled read() returns none.
            self.conn.cancel()

    # ---- the queue ------------------------------------------------------------

    def poll(self):
        """Lease up to --batch events, waiting up to --wait for the first."""
        self.polling = True
        try:
            if self.stopping:
                return []
            return self.conn.execute(
                "SELECT msg_id, read_count, payload"
                "  FROM spindle.read(%s, %s, %s, wait => %s)",
                (self.args.queue, self.args.batch,
                 seconds(self.args.visibility_timeout),
                 seconds(self.args.wait)),
            ).fetchall()
        except psycopg.errors.QueryCanceled:
            if self.stopping:
                return []
            raise
        finally:
            self.polling = False

    def hand_back(self, msg_id, after):
        """End our lease of msg_id in `after` seconds (0: at once)."""
        self.conn.execute(
            "SELECT spindle.set_visibility(%s, %s, %s)",
            (self.args.queue, msg_id, seconds(after)),
        )

    # ---- processing -------------------------------------------------------------

    def process(self, msg_id, read_count, payload):
        """Do the work of one event, inside the caller's transaction."""
        fail = payload.get("fail", 0) if isinstance(payload, dict) else 0
        if isinstance(fail, int) and read_count <= fail:
            raise TransientError(f"simulated failure {read_count} of {fail}")
        if self.args.results_table:
            self.conn.execute(
                sql.SQL("INSERT INTO {} (msg_id, read_count, payload)"
                        " VALUES (%s, %s, %s)").format(self.results_table()),
                (msg_id, read_count, Jsonb(payload)),
            )
        else:
            print(json.dumps({"msg_id": msg_id, "read_count": read_count,
                              "payload": payload}), flush=True)

    def handle(self, msg_id, read_count, payload):
        """Process and acknowledge one event in one transaction."""
        try:
            with self.conn.transaction():
                self.process(msg_id, read_count, payload)
                acked = self.conn.execute(
                    "SELECT spindle.ack(%s, %s)", (self.args.queue, msg_id)
                ).fetchone()[0]
                if not acked:
                    # rolls the processing back: its effect is already there
                    raise AlreadyAcknowledged()
            self.processed += 1
        except AlreadyAcknowledged:
            log.warning("event %d was acknowledged by another consumer "
                        "(lease expired?); its processing is rolled back",
                        msg_id)
        except TransientError as e:
            backoff = min(self.args.retry_base * 2 ** (read_count - 1),
                          self.args.retry_max)
            log.info("event %d failed (%s): retry in %.2f s",
                     msg_id, e, backoff)
            self.retried += 1
            self.hand_back(msg_id, backoff)

    def results_table(self):
        return sql.Identifier(*self.args.results_table.split("."))

    # ---- the loop -------------------------------------------------------------

    def run(self):
        self.conn = psycopg.connect(self.args.dsn, autocommit=True,
                                    application_name="spindle-example-worker")
        with self.conn:
            if self.args.results_table:
                self.conn.execute(
                    sql.SQL("CREATE TABLE IF NOT EXISTS {} (msg_id bigint,"
                            " read_count int, payload jsonb,"
                            " processed_at timestamptz DEFAULT now())"
                            ).format(self.results_table()))
            idle = 0
            while not self.stopping:
                batch = self.poll()
                if not batch:
                    if self.stopping:
                        break
                    idle += 1
                    log.debug("idle poll %d", idle)
                    if self.args.idle_exit and idle >= self.args.idle_exit:
                        log.info("%d idle polls: exiting", idle)
                        break
                    continue
                idle = 0
                for i, (msg_id, read_count, payload) in enumerate(batch):
                    if self.stopping:
                        # let other consumers have the rest now
                        for rest_id, _, _ in batch[i:]:
                            self.hand_back(rest_id, 0)
                        break
                    self.handle(msg_id, read_count, payload)
        log.info("processed %d events, %d retries", self.processed,
                 self.retried)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn", required=True,
                   help="libpq connection string, e.g. 'dbname=app'")
    p.add_argument("--queue", required=True, help="queue name")
    p.add_argument("--batch", type=int, default=10,
                   help="events leased per poll (default 10)")
    p.add_argument("--visibility-timeout", type=float, default=30,
                   help="lease length in seconds; longer than processing "
                        "a batch takes (default 30)")
    p.add_argument("--wait", type=float, default=5,
                   help="seconds a poll waits for an event (default 5)")
    p.add_argument("--idle-exit", type=int, default=0,
                   help="exit after this many polls in a row that got "
                        "nothing (default 0: never)")
    p.add_argument("--results-table",
                   help="insert processed events into this table "
                        "(default: print them)")
    p.add_argument("--retry-base", type=float, default=1.0,
                   help="first retry delay in seconds, doubled per "
                        "delivery (default 1)")
    p.add_argument("--retry-max", type=float, default=60,
                   help="longest retry delay in seconds (default 60)")
    p.add_argument("-v", "--verbose", action="count", default=0)
    args = p.parse_args(argv)
    if args.batch <= 0 or args.visibility_timeout <= 0 or args.wait < 0:
        p.error("--batch and --visibility-timeout must be positive, "
                "--wait not negative")

    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    worker = Worker(args)
    signal.signal(signal.SIGTERM, worker.stop)
    signal.signal(signal.SIGINT, worker.stop)
    try:
        worker.run()
    except psycopg.Error as e:
        log.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
