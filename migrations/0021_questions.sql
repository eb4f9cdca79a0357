-- Questions (`ask_human`): how long an agent's question waits for a person (null: for ever) and
-- what the desk does then (`fail` or `continue`). A waiting question is kept with the step's
-- other calls that wait for a person, in the ticket's `approvals`, so its deadline is the
-- ticket's `approval_deadline_at` like an approval's.
ALTER TABLE agents ADD COLUMN question_timeout_secs integer, ADD COLUMN on_question_timeout text;
