-- An event's data is written once and read whole, never looked into by a query. Kept as the JSON
-- text it was written as (`json`), it is only checked on insert, not converted to jsonb's binary
-- form, and every read of the log sends the stored text instead of printing jsonb back as text.
ALTER TABLE events
    ALTER COLUMN data DROP DEFAULT,
    ALTER COLUMN data TYPE json USING data::json,
    ALTER COLUMN data SET DEFAULT '{}'::json;
