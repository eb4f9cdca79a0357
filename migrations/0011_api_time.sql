-- A timestamp as the API writes it (`DateTime<Utc>` serialised: RFC 3339 in UTC with a `Z`, and a
-- fraction of 0, 3 or 6 digits, the fewest that are exact), as a JSON string; NULL stays NULL.
-- The statement that inserts a ticket writes its `ticket.created` event too, with the ticket as
-- JSON written by the database (`db::tickets::CREATED_EVENT_DATA`), so its times are written here.
-- One expression, not strict and only as volatile as `to_char`: the planner inlines it into the
-- statement instead of calling a function for every time.
CREATE FUNCTION api_time(t timestamptz) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_json(CASE
        WHEN date_part('microseconds', t)::bigint % 1000000 = 0
            THEN to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
        WHEN date_part('microseconds', t)::bigint % 1000 = 0
            THEN to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
        ELSE to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    END)
$$;
