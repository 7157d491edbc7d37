//! What a worker's runtime log says: the first error ONNX Runtime logged, added to a failure
//! whose own message is generic.

use std::path::Path;

/// Some EPs fail with a generic message ("Failed to load provider") and log the real reason
/// ("Device NPU is not available"): appends the first logged error to `error` unless it already
/// says the same.
pub fn add_logged_reason(error: &mut String, log: &Path) {
    if let Some(logged) = first_logged_error(log) {
        let head: String = logged.chars().take(60).collect();
        if !error.contains(&head) {
            error.push_str(&format!("; the runtime logged: {logged}"));
        }
    }
}

/// The message of the first error-level line ONNX Runtime wrote to a worker's log.
pub fn first_logged_error(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().find(|l| l.contains(" [E:")).map(|l| {
        let message = l.split_once("] ").map(|(_, m)| m).unwrap_or(l);
        message.replace("\u{1b}[m", "").trim().to_string()
    })
}
