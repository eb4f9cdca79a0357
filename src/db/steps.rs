//! A step's result, stored in one statement: usage, comments, events and the outcome, fenced by
//! the claim. Many loops' results share statements through `StepWriter` (see `group`).

use chrono::{DateTime, Timelike, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::claims::Finish;
use super::fence::Fence;
use super::group_commit::{GroupWrite, GroupWriter};
use crate::domain::{Author, Comment, ContentBlock, NewEvent, TicketUsage};

/// A comment made whole before it is stored: its id and time are chosen here (so the events that
/// carry it can be written in the same statement), its `seq` by the ticket's row. The time is this
/// process's clock, to the microsecond Postgres keeps.
pub fn new_comment(ticket_id: Uuid, author: Author, agent: Option<&str>, content: Vec<ContentBlock>) -> Comment {
    let now = Utc::now();
    Comment {
        id: Uuid::now_v7(),
        ticket_id,
        seq: 0,
        author,
        agent: agent.map(str::to_owned),
        content,
        created_at: now.with_nanosecond(now.nanosecond() / 1000 * 1000).unwrap_or(now),
    }
}

/// What a step stores at its end, all in one statement.
#[derive(Clone, Debug)]
pub struct StepResult {
    /// Added to the ticket's counters.
    pub usage: TicketUsage,
    /// Appended in order; their `seq` is assigned here.
    pub comments: Vec<Comment>,
    /// Appended in order after the comments. An event whose data is `{"comment": …}` of one of
    /// `comments` names it in `carries` (its index) and gets the comment's `seq` spliced in.
    pub events: Vec<NewEvent>,
    pub carries: Vec<Option<usize>>,
    /// Ends the claim (its final event goes last) or, when None, leaves it running.
    pub outcome: Option<Finish>,
}

/// One claim's step result, for `store_steps`.
#[derive(Clone, Debug)]
pub struct StepWrite {
    pub fence: Fence,
    /// The agent that ends the claim, named in the outcome's event.
    pub agent: String,
    pub step: StepResult,
}

impl GroupWrite for StepWrite {
    /// Whether the claim held (else nothing was written).
    type Reply = bool;

    async fn write_group(conn: &mut PgConnection, writes: &[StepWrite]) -> Result<Vec<bool>, sqlx::Error> {
        let written = store_steps(conn, writes).await?;
        Ok(super::group_commit::held(writes.iter().map(|w| w.fence), written))
    }
}

/// Group-commits the agent loops' step results.
pub type StepWriter = GroupWriter<StepWrite>;

impl StepWriter {
    /// The most step results one statement takes.
    const MAX_GROUP: usize = 64;

    /// Starts `writers` writers: a step result carries comments and several events, so a group
    /// takes a while to commit, and the next one starts beside it.
    pub fn start(pool: PgPool, writers: usize) -> StepWriter {
        GroupWriter::spawn(pool, "steps", Self::MAX_GROUP, writers)
    }

    /// Stores the step if the claim still holds; false (nothing written) when it was lost.
    pub async fn store(&self, write: StepWrite) -> Result<bool, sqlx::Error> {
        self.write(write).await
    }
}

/// Stores a step's result: checks the claim, adds the usage, appends the comments and the events
/// and applies the outcome, in one statement. Outside a transaction that is one round trip and
/// one commit; inside the caller's, it rolls back with it. False, writing nothing, when the
/// claim was lost.
pub async fn store_step(conn: &mut PgConnection, write: &StepWrite) -> Result<bool, sqlx::Error> {
    Ok(!store_steps(conn, std::slice::from_ref(write)).await?.is_empty())
}

/// `store_step` for the claims of several tickets in one statement: returns the tickets whose
/// claim held, and only theirs are written. At most one write per ticket (a ticket's loop waits
/// for its store before it goes on). Locking several rows is safe for the reason given at
/// `events::append_fenced_many`.
pub async fn store_steps(conn: &mut PgConnection, writes: &[StepWrite]) -> Result<Vec<Uuid>, sqlx::Error> {
    // Each outcome's columns and its final event, which goes after the step's own.
    let outcomes: Vec<_> = writes
        .iter()
        .map(|w| w.step.outcome.as_ref().map(|o| o.columns(&w.agent)))
        .collect();
    let steps = StepColumns::of(writes, &outcomes);
    let comments = &steps.comments;
    let events = super::events::EventColumns::of(steps.events.iter().copied());
    let [input, output, cache_read, cache_creation, requests, tool_calls] = &steps.usage;
    sqlx::query_scalar(STORE_STEPS)
        .bind(&steps.ids)
        .bind(&steps.generations)
        .bind(input)
        .bind(output)
        .bind(cache_read)
        .bind(cache_creation)
        .bind(requests)
        .bind(tool_calls)
        .bind(&steps.comment_counts)
        .bind(&steps.event_counts)
        .bind(&steps.statuses)
        .bind(&steps.results)
        .bind(&steps.errors)
        .bind(&comments.ticket)
        .bind(&comments.generation)
        .bind(&comments.id)
        .bind(&comments.author)
        .bind(&comments.agent)
        .bind(&comments.content)
        .bind(&comments.time)
        .bind(&steps.event_tickets)
        .bind(&steps.event_generations)
        .bind(&events.kinds)
        .bind(&events.agents)
        .bind(&events.data)
        .bind(&steps.event_carries)
        .bind(&steps.estimated)
        .bind(&steps.costs)
        .bind(&steps.unpriced)
        .fetch_all(conn)
        .await
}

/// What an outcome writes: its status, result, error and final event (`Finish::columns`).
type OutcomeColumns = (&'static str, Option<Value>, Option<Value>, NewEvent);

/// The writes as the arrays `STORE_STEPS` unnests: one entry per write, per comment and per event,
/// each comment and event naming its claim.
struct StepColumns<'a> {
    ids: Vec<Uuid>,
    generations: Vec<i64>,
    /// Input, output, cache read and cache creation tokens, requests and tool calls.
    usage: [Vec<i64>; 6],
    estimated: Vec<bool>,
    /// The cost in dollars, as text for `numeric`.
    costs: Vec<String>,
    unpriced: Vec<bool>,
    comment_counts: Vec<i64>,
    event_counts: Vec<i64>,
    statuses: Vec<Option<&'static str>>,
    results: Vec<Option<&'a Value>>,
    errors: Vec<Option<&'a Value>>,
    comments: CommentColumns<'a>,
    event_tickets: Vec<Uuid>,
    event_generations: Vec<i64>,
    events: Vec<&'a NewEvent>,
    /// For an event carrying one of the write's comments: the comment's place among them, from 1.
    event_carries: Vec<Option<i64>>,
}

#[derive(Default)]
struct CommentColumns<'a> {
    ticket: Vec<Uuid>,
    generation: Vec<i64>,
    id: Vec<Uuid>,
    author: Vec<&'a str>,
    agent: Vec<Option<&'a str>>,
    content: Vec<Value>,
    time: Vec<DateTime<Utc>>,
}

impl<'a> StepColumns<'a> {
    fn of(writes: &'a [StepWrite], outcomes: &'a [Option<OutcomeColumns>]) -> StepColumns<'a> {
        let n = writes.len();
        let mut columns = StepColumns {
            ids: Vec::with_capacity(n),
            generations: Vec::with_capacity(n),
            usage: Default::default(),
            estimated: Vec::with_capacity(n),
            costs: Vec::with_capacity(n),
            unpriced: Vec::with_capacity(n),
            comment_counts: Vec::with_capacity(n),
            event_counts: Vec::with_capacity(n),
            statuses: Vec::with_capacity(n),
            results: Vec::with_capacity(n),
            errors: Vec::with_capacity(n),
            comments: CommentColumns::default(),
            event_tickets: vec![],
            event_generations: vec![],
            events: vec![],
            event_carries: vec![],
        };
        for (write, outcome) in writes.iter().zip(outcomes) {
            columns.push(write, outcome.as_ref());
        }
        columns
    }

    fn push(&mut self, StepWrite { fence, step, .. }: &'a StepWrite, outcome: Option<&'a OutcomeColumns>) {
        debug_assert_eq!(step.carries.len(), step.events.len(), "one `carries` entry per event");
        self.ids.push(fence.ticket_id);
        self.generations.push(fence.generation);
        let u = &step.usage;
        let counters = [
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.cache_creation_tokens,
            u.requests,
            u.tool_calls,
        ];
        for (column, value) in self.usage.iter_mut().zip(counters) {
            column.push(value);
        }
        self.estimated.push(u.estimated);
        self.costs.push(u.cost.to_string());
        self.unpriced.push(u.unpriced);
        let final_event = outcome.map(|(_, _, _, event)| event);
        self.comment_counts.push(step.comments.len() as i64);
        self.event_counts
            .push((step.events.len() + usize::from(final_event.is_some())) as i64);
        self.statuses.push(outcome.map(|(status, ..)| *status));
        self.results.push(outcome.and_then(|(_, result, ..)| result.as_ref()));
        self.errors.push(outcome.and_then(|(_, _, error, _)| error.as_ref()));
        for c in &step.comments {
            let comments = &mut self.comments;
            comments.ticket.push(fence.ticket_id);
            comments.generation.push(fence.generation);
            comments.id.push(c.id);
            comments.author.push(c.author.as_str());
            comments.agent.push(c.agent.as_deref());
            comments.content.push(super::comments::content_json(&c.content));
            comments.time.push(c.created_at);
        }
        let carries = step.carries.iter().copied().chain(final_event.map(|_| None));
        for (event, carries) in step.events.iter().chain(final_event).zip(carries) {
            self.event_tickets.push(fence.ticket_id);
            self.event_generations.push(fence.generation);
            // The comment's seq is the ticket's comment base plus its place among the write's comments.
            self.event_carries.push(carries.map(|i| i as i64 + 1));
            self.events.push(event);
        }
    }
}

/// `store_steps`' one statement: the claims that hold get their counters, status and sequence
/// numbers (`t`), then their comments (`c`) and events (`logged`), numbered from the bases `t`
/// returns; a write whose claim was lost joins nothing and writes nothing.
const STORE_STEPS: &str = "WITH v AS (
            SELECT * FROM unnest($1::uuid[], $2::int8[], $3::int8[], $4::int8[], $5::int8[], $6::int8[],
                                 $7::int8[], $8::int8[], $9::int8[], $10::int8[], $11::text[], $12::jsonb[], $13::jsonb[],
                                 $27::bool[], $28::numeric[], $29::bool[])
                AS v(id, generation, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens,
                     requests, tool_calls, comments, events, status, result, error, estimated, cost_usd, unpriced)),
         t AS (
            UPDATE tickets t SET updated_at = now(),
                input_tokens = t.input_tokens + v.input_tokens, output_tokens = t.output_tokens + v.output_tokens,
                cache_read_tokens = t.cache_read_tokens + v.cache_read_tokens,
                cache_creation_tokens = t.cache_creation_tokens + v.cache_creation_tokens,
                requests = t.requests + v.requests, tool_calls = t.tool_calls + v.tool_calls,
                usage_estimated = t.usage_estimated OR v.estimated,
                cost_usd = t.cost_usd + v.cost_usd, unpriced = t.unpriced OR v.unpriced,
                last_comment_seq = t.last_comment_seq + v.comments,
                last_event_seq = t.last_event_seq + v.events,
                status = COALESCE(v.status, t.status),
                result = CASE WHEN v.status IS NULL THEN t.result ELSE COALESCE(v.result, t.result) END,
                error = CASE WHEN v.status IS NULL THEN t.error ELSE v.error END,
                lease_expires_at = CASE WHEN v.status IS NULL THEN t.lease_expires_at END,
                worker_id = CASE WHEN v.status IS NULL THEN t.worker_id END,
                work_ms = t.work_ms + CASE WHEN v.status IS NULL THEN 0
                    ELSE COALESCE((extract(epoch FROM now() - t.claimed_at) * 1000)::bigint, 0) END,
                claimed_at = CASE WHEN v.status IS NULL THEN t.claimed_at END,
                finished_at = CASE WHEN v.status IS NULL THEN t.finished_at ELSE now() END
            FROM v
            -- By key through the primary index, whatever the statistics say of the status (as
            -- `events::append_fenced_many`).
            WHERE t.id = ANY(ARRAY(SELECT id FROM v))
              AND t.id = v.id AND t.generation = v.generation AND t.status = 'in_progress'
            RETURNING t.id, t.project_id, t.generation, t.key, t.last_comment_seq - v.comments AS comment_base,
                      t.last_event_seq - v.events AS event_base),
         c AS (
            INSERT INTO comments (id, ticket_id, seq, author, agent, content, created_at)
            SELECT c.id, t.id, t.comment_base + row_number() OVER (PARTITION BY t.id ORDER BY c.ord),
                   c.author, c.agent, c.content, c.created_at
            FROM unnest($14::uuid[], $15::int8[], $16::uuid[], $17::text[], $18::text[], $19::jsonb[],
                        $20::timestamptz[])
                WITH ORDINALITY AS c(ticket_id, generation, id, author, agent, content, created_at, ord)
            JOIN t ON t.id = c.ticket_id AND t.generation = c.generation
            RETURNING 1),
         logged AS (
            INSERT INTO events (ticket_id, project_id, ticket_key, seq, kind, agent, data)
            SELECT t.id, t.project_id, t.key, t.event_base + row_number() OVER (PARTITION BY t.id ORDER BY e.ord), e.kind, e.agent,
                   CASE WHEN e.carries IS NULL THEN e.data::json
                        ELSE jsonb_set(e.data::jsonb, '{comment,seq}', to_jsonb(t.comment_base + e.carries))::json END
            FROM unnest($21::uuid[], $22::int8[], $23::text[], $24::text[], $25::text[], $26::int8[])
                WITH ORDINALITY AS e(ticket_id, generation, kind, agent, data, carries, ord)
            JOIN t ON t.id = e.ticket_id AND t.generation = e.generation
            RETURNING 1)
         SELECT id FROM t";
