"""The journal's schema, one text for SQLite and PostgreSQL.

Both back ends run the same statements (``?`` placeholders are rewritten to
``%s`` for psycopg; the few dialect differences are attributes of the back end,
see ``_backends``), so the two stores cannot drift apart.  Times are wall-clock
seconds since the epoch (floats), read from the store's injected clock.

``SCHEMA_VERSION`` is written in ``meta`` when a journal is created.  A journal
written by a newer rlm is refused, never altered; an older one is migrated
forward by the ``MIGRATIONS`` steps after its version, inside one transaction.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA", "SCHEMA_VERSION", "TABLES"]

SCHEMA_VERSION = 7

#: The tables an rlm journal has; a database holding other tables but not
#: ``meta`` is somebody else's and is refused.
TABLES = (
    "meta", "volleys", "tasks", "responses", "journal_log", "workers", "volley_context",
    "batches",
)

SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # settings: JSON of where and how to send (provider, base URL, model, limits);
    # never an API key.  spent_*: what every attempt so far cost, so budgets hold
    # across resumes.
    """CREATE TABLE volleys (
        volley_id TEXT PRIMARY KEY,
        created_at DOUBLE PRECISION NOT NULL,
        settings TEXT NOT NULL,
        context_digest TEXT,
        spent_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
        spent_calls BIGINT NOT NULL DEFAULT 0,
        spent_tokens BIGINT NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE tasks (
        volley_id TEXT NOT NULL REFERENCES volleys (volley_id),
        idx INTEGER NOT NULL,
        spec TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('open', 'in_progress', 'done', 'failed')),
        started_at DOUBLE PRECISION,
        finished_at DOUBLE PRECISION,
        heartbeat_at DOUBLE PRECISION,
        claimed_host TEXT,
        claimed_pid INTEGER,
        claimed_worker TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        output TEXT,
        usage TEXT,
        cost DOUBLE PRECISION,
        error TEXT,
        PRIMARY KEY (volley_id, idx)
    )""",
    "CREATE INDEX tasks_by_status ON tasks (volley_id, status, idx)",
    "CREATE INDEX tasks_by_worker ON tasks (claimed_worker) WHERE status = 'in_progress'",
    # The response cache: one completion per request digest.
    """CREATE TABLE responses (
        digest TEXT PRIMARY KEY,
        created_at DOUBLE PRECISION NOT NULL,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        completion TEXT NOT NULL
    )""",
    # Things a person may ask about later: stale recoveries, who reopened what.
    """CREATE TABLE journal_log (
        at DOUBLE PRECISION NOT NULL,
        kind TEXT NOT NULL,
        volley_id TEXT,
        idx INTEGER,
        detail TEXT NOT NULL
    )""",
)

#: Steps from version N-1 to N.  A new journal runs SCHEMA (version 1), then every step.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    # Live workers of a volley, so per-journal limits are divided among them.
    2: (
        # Input and output apart, as the budget ledger counts them (spent_tokens: their sum).
        "ALTER TABLE volleys ADD COLUMN spent_input BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE volleys ADD COLUMN spent_output BIGINT NOT NULL DEFAULT 0",
        """CREATE TABLE workers (
            worker TEXT PRIMARY KEY,
            volley_id TEXT NOT NULL,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started_at DOUBLE PRECISION NOT NULL,
            heartbeat_at DOUBLE PRECISION NOT NULL
        )""",
        # A volley's shared context, so `rlm volley work` on any machine runs it as created.
        """CREATE TABLE volley_context (
            volley_id TEXT NOT NULL REFERENCES volleys (volley_id),
            position INTEGER NOT NULL,
            text TEXT NOT NULL,
            PRIMARY KEY (volley_id, position)
        )""",
    ),
    # Only open tasks are indexed by status: a claim finds the lowest open ones through
    # it, and a verdict (in_progress -> done) then touches no index at all.  The two
    # indexes it replaces cost every claim and every verdict an index entry moved (most
    # of a fast volley's journal cost); the lookups they served (a worker's held tasks,
    # stale claims) scan one volley's rows by primary key, a few times a minute.
    3: (
        "DROP INDEX IF EXISTS tasks_by_status",
        "DROP INDEX IF EXISTS tasks_by_worker",
        "CREATE INDEX open_tasks ON tasks (volley_id, idx) WHERE status = 'open'",
    ),
    # The last verdict group of a worker whose spend the volley has: a group retried
    # after a commit whose outcome the worker could not learn (a lost connection)
    # writes no rows again, and must not add its spend again either
    # (JournalStore.finish_rows).
    4: ("ALTER TABLE workers ADD COLUMN last_group BIGINT NOT NULL DEFAULT 0",),
    # When a worker's process started (clock ticks since boot, /proc/PID/stat), so a
    # pid of this host reused by another process is not taken for the worker: its
    # claims are reopened at once (pid_alive).  NULL where unknown (no /proc, or a
    # worker registered before version 5): the pid alone decides, as before.
    5: ("ALTER TABLE workers ADD COLUMN pid_start BIGINT",),
    # A volley's claimed tasks by holder: finding a worker's claims (whether a dead one
    # holds any, its heartbeat, stale and dead holders' claims, claims held elsewhere)
    # read only the volley's tasks in progress, not all its rows (or, in PostgreSQL's
    # plan for NOT EXISTS, the whole table).  Only tasks in progress: a claim adds
    # an entry and a verdict removes it, an index entry per task each way, where
    # version 3 had two indexes moving on both.
    6: (
        "CREATE INDEX claimed_tasks ON tasks (volley_id, claimed_worker) "
        "WHERE status = 'in_progress'",
    ),
    # A volley sent through a provider's batch service (``--batch-api``): one row per
    # provider batch, written before each step at the provider, so a resume after any
    # stop finds what the provider has (rlm.journal.batches).  ``label`` names the batch
    # at the provider (the upload's file name); ``tasks`` is a JSON list of the task
    # numbers it holds, which are in progress under its claim meanwhile.
    7: (
        """CREATE TABLE batches (
            volley_id TEXT NOT NULL REFERENCES volleys (volley_id),
            number INTEGER NOT NULL,
            label TEXT NOT NULL,
            provider TEXT NOT NULL,
            stage TEXT NOT NULL CHECK (stage IN
                ('planned', 'uploaded', 'creating', 'submitted', 'ended', 'collected')),
            tasks TEXT NOT NULL,
            size INTEGER NOT NULL,
            file_id TEXT,
            batch_id TEXT,
            provider_status TEXT,
            counts TEXT,
            output TEXT,
            error TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            creating_at DOUBLE PRECISION,
            updated_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (volley_id, number)
        )""",
    ),
}
