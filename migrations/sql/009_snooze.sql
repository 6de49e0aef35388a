-- A running job may be snoozed by its holder: put back, due later, its
-- attempt not counted. The count bounds how often.
ALTER TABLE jobs ADD COLUMN snoozes int NOT NULL DEFAULT 0;
