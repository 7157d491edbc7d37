//! TODO(helper): junit rendering of the report.

use super::model::Report;

/// Renders the report.
pub fn render(report: &Report) -> String {
    let _ = report;
    String::new()
}
