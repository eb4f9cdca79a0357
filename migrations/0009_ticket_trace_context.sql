-- The W3C `traceparent` of the request that created a ticket (NULL without one), so that the
-- ticket's spans continue the caller's trace in whichever process claims it.
ALTER TABLE tickets ADD COLUMN trace_context text;
