//! Placeholder substitution for follow-up tickets created by `handover_ticket`.

const PARENT_KEY: &str = "{parent_key}";
const PARENT_RESULT: &str = "{parent_result}";

/// Substitutes every `{parent_key}` and `{parent_result}` in `task` in a single left-to-right pass: a substituted value is never expanded again (so a result containing "{parent_key}" stays literal), unknown placeholders like `{foo}` stay as they are.
pub fn substitute_parent(task: &str, parent_key: &str, parent_result: &str) -> String {
    // A single pass over the template (never over the output) is what keeps
    // model-written results from injecting placeholders into the child task.
    let mut out = String::with_capacity(task.len() + parent_result.len());
    let mut rest = task;
    while let Some(pos) = rest.find('{') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix(PARENT_KEY) {
            out.push_str(parent_key);
            rest = after;
        } else if let Some(after) = tail.strip_prefix(PARENT_RESULT) {
            out.push_str(parent_result);
            rest = after;
        } else {
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_both_placeholders() {
        assert_eq!(
            substitute_parent("Review {parent_key}: {parent_result}", "T-1", "done"),
            "Review T-1: done"
        );
    }

    #[test]
    fn no_placeholders_is_identity() {
        assert_eq!(substitute_parent("plain task", "T-1", "r"), "plain task");
        assert_eq!(substitute_parent("", "T-1", "r"), "");
    }

    #[test]
    fn repeated_placeholders_are_all_replaced() {
        assert_eq!(
            substitute_parent("{parent_key}/{parent_key} {parent_result}{parent_result}", "K", "R"),
            "K/K RR"
        );
    }

    #[test]
    fn substituted_value_is_not_expanded_again() {
        assert_eq!(
            substitute_parent("see {parent_result}", "T-9", "literal {parent_key} and {parent_result}"),
            "see literal {parent_key} and {parent_result}"
        );
        assert_eq!(
            substitute_parent("{parent_key} {parent_result}", "{parent_result}", "x"),
            "{parent_result} x"
        );
    }

    #[test]
    fn unknown_placeholders_stay_literal() {
        assert_eq!(
            substitute_parent("{foo} {parent} {parent_key} {{parent_key}}", "K", "R"),
            "{foo} {parent} K {K}"
        );
    }

    #[test]
    fn unterminated_and_non_ascii_text_is_kept() {
        assert_eq!(substitute_parent("é {parent_ke", "K", "R"), "é {parent_ke");
        assert_eq!(substitute_parent("{parent_key}é{", "ключ", "R"), "ключé{");
    }
}
