//! Large tool outputs: stored whole, shown to the model as a stub with a preview.

/// An output larger than this is stored and replaced by a stub.
pub const MAX_OUTPUT_BYTES: usize = 50 * 1024;
/// A step's outputs together may not exceed this; the largest are stubbed first.
pub const MAX_STEP_OUTPUT_BYTES: usize = 200 * 1024;
/// The preview in a stub, cut at a line end.
pub const PREVIEW_BYTES: usize = 2 * 1024;

/// Indices of the outputs to store and stub: every one over the per-output limit, then the
/// largest of the rest until the step's total fits.
pub fn select_offloads(sizes: &[usize]) -> Vec<usize> {
    let mut chosen: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] > MAX_OUTPUT_BYTES).collect();
    let mut total: usize = sizes
        .iter()
        .enumerate()
        .filter(|(i, _)| !chosen.contains(i))
        .map(|(_, s)| s)
        .sum();
    let mut rest: Vec<usize> = (0..sizes.len()).filter(|i| !chosen.contains(i)).collect();
    rest.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    for i in rest {
        if total <= MAX_STEP_OUTPUT_BYTES {
            break;
        }
        total -= sizes[i];
        chosen.push(i);
    }
    chosen.sort_unstable();
    chosen
}

/// What the model sees instead of a large output.
pub fn stub(ticket_key: &str, call_id: &str, output: &str) -> String {
    format!(
        "<persisted-output>\nThis output was too large to show ({} bytes). It is stored whole at \
         GET /v1/tickets/{ticket_key}/outputs/{call_id}.\nPreview:\n{}\n</persisted-output>",
        output.len(),
        preview(output)
    )
}

/// At most PREVIEW_BYTES, ending at a line end when there is one.
fn preview(output: &str) -> &str {
    if output.len() <= PREVIEW_BYTES {
        return output;
    }
    let mut end = PREVIEW_BYTES;
    while !output.is_char_boundary(end) {
        end -= 1;
    }
    match output[..end].rfind('\n') {
        Some(line_end) if line_end > 0 => &output[..line_end],
        _ => &output[..end],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_outputs_and_then_the_largest_are_offloaded() {
        assert_eq!(select_offloads(&[10, 60_000, 20]), vec![1]);
        assert_eq!(select_offloads(&[50_000, 50_000, 50_000, 50_000, 40_000]), vec![0]);
        assert!(select_offloads(&[100, 200]).is_empty());
    }

    #[test]
    fn the_preview_is_cut_at_a_line_end() {
        let output = "line\n".repeat(1_000);
        let s = stub("TICKET-1", "call_1", &output);
        assert!(s.contains("5000 bytes"));
        assert!(s.contains("/v1/tickets/TICKET-1/outputs/call_1"));
        let p = preview(&output);
        assert!(p.len() <= PREVIEW_BYTES && p.ends_with("line"));
    }
}
