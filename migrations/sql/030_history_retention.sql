-- The retention each namespace's history follows. A job's period is
-- chosen when it moves, from its namespace's retention then; when that
-- retention changes (NAMESPACE.CONFIG, or the server's AGQ_RETAIN_*), the
-- leader records the new one here with cursor '' and walks the
-- namespace's history in id order, moving each job whose period changes
-- into its new one; cursor is the last id done, NULL once the walk is
-- over. No period is dropped while a walk is under way, so a retention
-- made longer reaches every job before its old period's end.
CREATE TABLE history_retention (
    namespace text PRIMARY KEY REFERENCES namespaces (name) ON DELETE CASCADE,
    completed interval NOT NULL,
    failed    interval NOT NULL,
    cursor    text
);
