//! Experiments: a set of tickets replayed by several arms (an agent, a version, a provider, a
//! model), compared by their own figures and, optionally, by a blind judge.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;
use uuid::Uuid;

use super::ticket::{ReplayTools, Status};
use super::Usd;

/// The most arms an experiment compares, and the most original tickets it replays.
pub const MAX_ARMS: usize = 10;
pub const MAX_TICKETS: usize = 100;
/// Replays and judges run below ordinary work, so an experiment never starves live tickets.
pub const EXPERIMENT_PRIORITY: i32 = -1000;

/// One way of running the tickets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Arm {
    /// Unique in the experiment: the results are shown under it.
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
    /// Default: each ticket's own agent.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 64)]
    pub agent: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1)]
    pub agent_version: Option<i32>,
    #[serde(default)]
    #[schema(min_length = 1, max_length = 64)]
    pub provider: Option<String>,
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200)]
    pub model: Option<String>,
}

/// The judge: an agent that gets the task and the arms' results in random order, without the
/// arms' names, and answers through `judge_schema`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JudgeSpec {
    #[schema(min_length = 1, max_length = 64)]
    pub agent: String,
    /// What makes a result better; default: correct, complete and clear.
    #[serde(default)]
    #[schema(max_length = 4000)]
    pub criteria: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExperimentStatus {
    Running,
    Done,
    Cancelled,
}

impl ExperimentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ExperimentStatus::Running => "running",
            ExperimentStatus::Done => "done",
            ExperimentStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<ExperimentStatus> {
        match s {
            "running" => Some(ExperimentStatus::Running),
            "done" => Some(ExperimentStatus::Done),
            "cancelled" => Some(ExperimentStatus::Cancelled),
            _ => None,
        }
    }
}

/// An experiment as the API shows it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Experiment {
    pub id: Uuid,
    pub name: String,
    pub status: ExperimentStatus,
    /// Every replay's and judge's cost so far, in US dollars.
    pub cost_usd: Usd,
    pub tools: ReplayTools,
    pub arms: Vec<ArmFigures>,
    pub judge: Option<JudgeSpec>,
    /// Each original ticket, with each arm's replay of it.
    pub tickets: Vec<ExperimentTicket>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// An arm's settings and figures, read from its replays.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct ArmFigures {
    pub name: String,
    pub agent: Option<String>,
    pub agent_version: Option<i32>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub done: i64,
    pub failed: i64,
    pub waiting: i64,
    pub cost_usd: Usd,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// From claim to finish, over the finished replays; null before any.
    pub duration_ms: Percentiles,
    /// The share (0 to 1) of finished replays whose result matches the ticket's schema (a ticket
    /// without one: any result); null before any finished.
    #[schema(minimum = 0, maximum = 1)]
    pub schema_valid: Option<f64>,
    /// Null without a judge.
    pub judge: Option<JudgeFigures>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Percentiles {
    pub p50: Option<i64>,
    pub p95: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JudgeFigures {
    pub wins: i64,
    pub losses: i64,
    pub ties: i64,
    /// The mean of the judge's scores (0 to 10); null before any verdict.
    pub mean_score: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ExperimentTicket {
    /// The original's key.
    pub ticket: String,
    /// By arm name.
    pub results: BTreeMap<String, ArmResult>,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ArmResult {
    /// The replay's key.
    pub key: String,
    pub status: Status,
    #[schema(value_type = Option<Value>)]
    pub result: Option<Value>,
}

/// The letters the judge sees the results under, in the order shown.
pub fn letters(n: usize) -> Vec<String> {
    (0..n).map(|i| char::from(b'A' + i as u8).to_string()).collect()
}

/// The result schema of a judge shown `n` results.
pub fn judge_schema(n: usize) -> Value {
    let letters = letters(n);
    let mut winners: Vec<Value> = letters.iter().map(|l| json!(l)).collect();
    winners.push(json!("tie"));
    let scores: serde_json::Map<String, Value> = letters
        .iter()
        .map(|l| (l.clone(), json!({"type": "number", "minimum": 0, "maximum": 10})))
        .collect();
    json!({
        "type": "object",
        "required": ["winner", "scores"],
        "additionalProperties": false,
        "properties": {
            "winner": {"enum": winners},
            "scores": {"type": "object", "required": letters, "additionalProperties": false, "properties": scores}
        }
    })
}

/// What the judge is asked: the task, the criteria and the results under their letters.
pub fn judge_task(task: &str, criteria: Option<&str>, results: &[String]) -> String {
    let criteria = criteria.unwrap_or("Which result does the task best: correct, complete and clear.");
    let mut text = format!(
        "Several attempts were made at the same task. Compare their results and judge which is best.\n\n\
         Task:\n{task}\n\nCriteria:\n{criteria}\n"
    );
    for (letter, result) in letters(results.len()).iter().zip(results) {
        text.push_str(&format!("\nResult {letter}:\n{result}\n"));
    }
    text.push_str(
        "\nClose the ticket with {\"winner\": the best result's letter, or \"tie\", \"scores\": a score \
         from 0 to 10 for each letter}.",
    );
    text
}

/// A judge's verdict on one original: the arms it was shown (by letter) and its result.
pub struct Verdict<'a> {
    pub shown: &'a BTreeMap<String, String>,
    pub result: &'a Value,
}

/// Wins, losses, ties and mean scores per arm, from the verdicts alone (so anyone can recount
/// them from the judge tickets).
pub fn tally(arms: &[String], verdicts: &[Verdict<'_>]) -> BTreeMap<String, JudgeFigures> {
    let mut figures: BTreeMap<String, JudgeFigures> =
        arms.iter().map(|a| (a.clone(), JudgeFigures::default())).collect();
    let mut scores: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for verdict in verdicts {
        let Some(winner) = verdict.result.get("winner").and_then(Value::as_str) else {
            continue;
        };
        for (letter, arm) in verdict.shown {
            let Some(f) = figures.get_mut(arm) else { continue };
            if winner == "tie" {
                f.ties += 1;
            } else if winner == letter {
                f.wins += 1;
            } else {
                f.losses += 1;
            }
            if let Some(score) = verdict.result["scores"].get(letter).and_then(Value::as_f64) {
                scores.entry(arm.clone()).or_default().push(score);
            }
        }
    }
    for (arm, list) in scores {
        if let Some(f) = figures.get_mut(&arm) {
            f.mean_score = Some(list.iter().sum::<f64>() / list.len() as f64);
        }
    }
    figures
}

/// The p50 and p95 of durations (nearest rank).
pub fn percentiles(mut values: Vec<i64>) -> Percentiles {
    if values.is_empty() {
        return Percentiles::default();
    }
    values.sort_unstable();
    let rank = |p: f64| values[((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
    Percentiles {
        p50: Some(rank(0.5)),
        p95: Some(rank(0.95)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_counts_each_verdict_for_the_arms_shown() {
        let one: BTreeMap<String, String> = [("A".into(), "new".into()), ("B".into(), "old".into())].into();
        let two: BTreeMap<String, String> = [("A".into(), "old".into()), ("B".into(), "new".into())].into();
        let first = json!({"winner": "A", "scores": {"A": 9, "B": 5}});
        let second = json!({"winner": "tie", "scores": {"A": 6, "B": 6}});
        let verdicts = [
            Verdict {
                shown: &one,
                result: &first,
            },
            Verdict {
                shown: &two,
                result: &second,
            },
        ];
        let figures = tally(&["new".into(), "old".into()], &verdicts);
        assert_eq!(
            figures["new"],
            JudgeFigures {
                wins: 1,
                losses: 0,
                ties: 1,
                mean_score: Some(7.5)
            }
        );
        assert_eq!((figures["old"].losses, figures["old"].mean_score), (1, Some(5.5)));
        assert_eq!(
            percentiles(vec![30, 10, 20]),
            Percentiles {
                p50: Some(20),
                p95: Some(30)
            }
        );
        assert_eq!(
            judge_schema(2)["properties"]["winner"]["enum"],
            json!(["A", "B", "tie"])
        );
    }
}
