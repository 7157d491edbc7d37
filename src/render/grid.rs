//! The terminal's building blocks, shared by every terminal rendering: bold text and tables
//! fitted to the terminal's width. ANSI styles are stripped by `anstream` when stdout is not a
//! terminal or `NO_COLOR` is set.

use anstyle::Style;
use tabled::builder::Builder;
use tabled::settings::object::Rows;
use tabled::settings::{Alignment, Modify, Style as TableStyle, Width};

/// `text` in `style`.
pub fn paint(text: &str, style: Style) -> String {
    format!("{style}{text}{style:#}")
}

/// Bold text (stripped when stdout is not a terminal).
pub fn bold(text: &str) -> String {
    paint(text, Style::new().bold())
}

/// A rounded table with right-aligned cells below the header, wrapped to fit the terminal.
pub fn table(builder: Builder) -> String {
    table_indented(builder, 0)
}

/// [`table`] for a table printed `indent` columns in.
pub fn table_indented(builder: Builder, indent: usize) -> String {
    let mut t = builder.build();
    t.with(TableStyle::rounded())
        .with(Modify::new(Rows::new(1..)).with(Alignment::right()));
    if let Some(width) = terminal_width() {
        // Cells wrap at word boundaries; a table narrower than the terminal is left as it is.
        t.with(Width::wrap(width.saturating_sub(indent).max(40)).keep_words(true));
    }
    t.to_string()
}

/// The width to fit tables to: `COLUMNS`, else the terminal's, when stdout is a terminal.
/// Piped output (files, CI logs, tests) is never wrapped.
fn terminal_width() -> Option<usize> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse().ok());
    columns.or_else(|| terminal_size::terminal_size().map(|(w, _)| w.0 as usize))
}
