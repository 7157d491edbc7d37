//! The terminal's building blocks, shared by every terminal rendering: bold text, tables fitted to
//! the terminal's width and long lines wrapped to it. ANSI styles are stripped by `anstream` when
//! stdout is not a terminal or `NO_COLOR` is set.
//!
//! Nothing is fitted when stdout is not a terminal: piped output (files, CI logs, tests) is drawn
//! at its natural width. On a terminal, a table that is too wide first shortens its text cells
//! (names, runtime strings, notes) with `…`, never a figure, a status or a row's key; if it is
//! still too wide, every row becomes a block of `column │ value` lines (as `psql`'s `\x` shows
//! records), each value whole. Long lines wrap at spaces with a hanging indent. No number is ever
//! broken across lines or cut.

use anstyle::Style;
use tabled::builder::Builder;
use tabled::grid::util::string::{get_char_width, get_text_width};
use tabled::settings::object::Rows;
use tabled::settings::{Alignment, Modify, Style as TableStyle};

/// `text` in `style`.
pub fn paint(text: &str, style: Style) -> String {
    format!("{style}{text}{style:#}")
}

/// Bold text (stripped when stdout is not a terminal).
pub fn bold(text: &str) -> String {
    paint(text, Style::new().bold())
}

/// A text cell is never shortened below this many columns.
const MIN_TEXT: usize = 12;

/// What a column holds, declared where the renderer builds the table: it decides how the column
/// may be shortened to fit, so a figure is never cut whatever it looks like and a text that holds
/// digits is still text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// What tells rows apart (a target id, a stage name), or a word that must be read whole (a
    /// status, a verdict): never shortened.
    Key,
    /// A number or a few (`36.38`, `58/61`, `99.00% (96.43–99.72)`): never shortened.
    Figure,
    /// Words: cut with `…` at the end, never inside a number.
    Text,
    /// A file path: cut from its start (`…/fleet/a_s24`), where the rows differ.
    Path,
}

/// The lines a table's frame draws: the renderers' tables differ only in this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Rounded box drawing around and between every cell.
    Rounded,
    /// `psql`'s: `|` between columns, a rule under the header.
    Psql,
    /// No lines at all, columns apart by their padding.
    Blank,
}

/// How a terminal table is drawn and fitted: its frame, whether the cells below the header are
/// right-aligned, how far in it is printed, and what each column holds (columns past the
/// declared ones are [`Kind::Text`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Look {
    frame: Frame,
    right_aligned: bool,
    indent: usize,
    kinds: Vec<Kind>,
}

impl Look {
    /// Rounded, figures right-aligned: the look of the report tables, its columns of `kinds`.
    pub fn grid(kinds: &[Kind]) -> Self {
        Look {
            frame: Frame::Rounded,
            right_aligned: true,
            indent: 0,
            kinds: kinds.to_vec(),
        }
    }

    /// `frame` with every cell left-aligned, its columns of `kinds`: listings and probe tables.
    pub fn plain(frame: Frame, kinds: &[Kind]) -> Self {
        Look {
            frame,
            right_aligned: false,
            indent: 0,
            kinds: kinds.to_vec(),
        }
    }

    /// The same table printed `indent` columns in (the indentation is the caller's).
    pub fn indented(mut self, indent: usize) -> Self {
        self.indent = indent;
        self
    }

    /// What column `c` holds.
    fn kind(&self, c: usize) -> Kind {
        self.kinds.get(c).copied().unwrap_or(Kind::Text)
    }
}

/// A rounded table with right-aligned cells below the header, its columns of `kinds`, fitted to
/// the terminal.
pub fn table(builder: Builder, kinds: &[Kind]) -> String {
    table_with(builder, &Look::grid(kinds))
}

/// [`table`] for a table printed `indent` columns in.
pub fn table_indented(builder: Builder, indent: usize, kinds: &[Kind]) -> String {
    table_with(builder, &Look::grid(kinds).indented(indent))
}

/// A table drawn as `look` says, fitted to the terminal (never when piped).
pub fn table_with(builder: Builder, look: &Look) -> String {
    let rows: Vec<Vec<String>> = builder.into();
    fit(&rows, look, terminal_width())
}

/// `text` with every line wider than the terminal wrapped at spaces and continued under a
/// hanging indent; text that is not printed on a terminal is returned as it is.
pub fn prose(text: &str) -> String {
    wrap_lines(text, terminal_width())
}

/// A paragraph whose line breaks are for piped output only: on a terminal it is joined into one
/// line and wrapped to the terminal's width under the first line's hanging indent.
pub fn paragraph(text: &str) -> String {
    reflow(text, terminal_width())
}

/// [`paragraph`] at `width` (as it is without one).
fn reflow(text: &str, width: Option<usize>) -> String {
    if width.is_none() {
        return text.to_string();
    }
    let joined: Vec<&str> = text
        .lines()
        .enumerate()
        .map(|(k, l)| if k == 0 { l.trim_end() } else { l.trim() })
        .collect();
    wrap_lines(&joined.join(" "), width)
}

/// The width to fit to: `COLUMNS`, else the terminal's, when stdout is a terminal. Piped output
/// (files, CI logs, tests) is never fitted.
fn terminal_width() -> Option<usize> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse().ok());
    columns.or_else(|| terminal_size::terminal_size().map(|(w, _)| w.0 as usize))
}

/// The one fitting routine of every terminal table. `rows[0]` is the header. Without a width the
/// table is drawn as it is; with one, it is drawn whole if it fits, else with its text cells
/// shortened (keys and figures never), else one block per row.
pub fn fit(rows: &[Vec<String>], look: &Look, width: Option<usize>) -> String {
    let natural = draw(rows, look);
    let Some(width) = width.map(|w| w.saturating_sub(look.indent)) else {
        return natural;
    };
    if rows.len() < 2 || get_text_width(&natural) <= width {
        return natural;
    }
    let rows = square(rows);
    let overhead = get_text_width(&natural).saturating_sub(columns(&rows, look).iter().map(|c| c.natural).sum());
    shrunk(&rows, look, width, overhead).unwrap_or_else(|| blocks(&rows, width))
}

/// The table in its frame, at its natural width.
fn draw(rows: &[Vec<String>], look: &Look) -> String {
    let mut t = Builder::from(rows.to_vec()).build();
    match look.frame {
        Frame::Rounded => t.with(TableStyle::rounded()),
        Frame::Psql => t.with(TableStyle::psql()),
        Frame::Blank => t.with(TableStyle::blank()),
    };
    if look.right_aligned {
        t.with(Modify::new(Rows::new(1..)).with(Alignment::right()));
    }
    t.to_string()
}

/// Every row as long as the longest (missing cells empty).
fn square(rows: &[Vec<String>]) -> Vec<Vec<String>> {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    rows.iter()
        .map(|r| {
            let mut r = r.clone();
            r.resize(n, String::new());
            r
        })
        .collect()
}

/// A column's natural width and the narrowest it may be drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Column {
    natural: usize,
    floor: usize,
}

/// Per column: its natural width, and its floor: the header's longest unbreakable piece, a key's
/// or a figure's cells at their width, a text's or a path's at [`text_floor`].
fn columns(rows: &[Vec<String>], look: &Look) -> Vec<Column> {
    let n = rows.first().map_or(0, Vec::len);
    (0..n)
        .map(|c| {
            let cells = rows.iter().skip(1).map(|r| r[c].as_str());
            let head = &rows[0][c];
            let natural = cells.clone().map(get_text_width).fold(get_text_width(head), usize::max);
            let head_floor = header_pieces(head)
                .iter()
                .map(|(_, p)| get_text_width(p))
                .max()
                .unwrap_or(0);
            let floor = cells
                .map(|cell| match look.kind(c) {
                    Kind::Key | Kind::Figure => get_text_width(cell),
                    Kind::Text | Kind::Path => text_floor(cell),
                })
                .fold(head_floor, usize::max);
            Column { natural, floor }
        })
        .collect()
}

/// The narrowest a text cell is shortened to: a third of it, at least [`MIN_TEXT`] columns.
fn text_floor(cell: &str) -> usize {
    let w = get_text_width(cell);
    w.min(MIN_TEXT.max(w.div_ceil(3)))
}

/// The table with its text cells shortened to fit `width`, if the floors allow.
fn shrunk(rows: &[Vec<String>], look: &Look, width: usize, overhead: usize) -> Option<String> {
    let cols = columns(rows, look);
    let widths = column_widths(&cols, width.checked_sub(overhead)?)?;
    let cut: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .map(|(r, row)| {
            row.iter()
                .zip(&widths)
                .enumerate()
                .map(|(c, (cell, &w))| {
                    if r == 0 {
                        fill(&header_pieces(cell), w, w).join("\n")
                    } else {
                        shorten(cell, w, look.kind(c))
                    }
                })
                .collect()
        })
        .collect();
    let drawn = draw(&cut, look);
    (get_text_width(&drawn) <= width).then_some(drawn)
}

/// Column widths within `budget`: the widest columns narrowed to one cap, none below its floor,
/// what the cap leaves given back to the narrowed columns; `None` when even the floors do not fit.
fn column_widths(cols: &[Column], budget: usize) -> Option<Vec<usize>> {
    let at = |cap: usize| -> Vec<usize> { cols.iter().map(|c| c.natural.min(cap).max(c.floor)).collect() };
    let top = cols.iter().map(|c| c.natural).max().unwrap_or(0);
    let mut widths = (0..=top).rev().map(at).find(|w| w.iter().sum::<usize>() <= budget)?;
    let mut left = budget - widths.iter().sum::<usize>();
    while left > 0 {
        let before = left;
        for (w, c) in widths.iter_mut().zip(cols) {
            if left > 0 && *w < c.natural {
                *w += 1;
                left -= 1;
            }
        }
        if left == before {
            break;
        }
    }
    Some(widths)
}

/// A cell of `kind` shortened to `width` columns: each longer line of a text cut with `…` at its
/// end (never inside a number), of a path at its start; keys and figures as they are.
fn shorten(cell: &str, width: usize, kind: Kind) -> String {
    if get_text_width(cell) <= width {
        return cell.to_string();
    }
    cell.lines()
        .map(|line| match kind {
            _ if get_text_width(line) <= width => line.to_string(),
            Kind::Key | Kind::Figure => line.to_string(),
            Kind::Text => cut(&strip_ansi(line), width),
            Kind::Path => cut_path(&strip_ansi(line), width),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `line` (plain text) cut to `width` columns including the `…`; the cut backs off to before a
/// number it would split, and to the first word when nothing would be left.
fn cut(line: &str, width: usize) -> String {
    let chars: Vec<char> = line.chars().collect();
    let numeric = number_marks(&chars);
    let (mut end, mut used) = (0, 0);
    while end < chars.len() && used + get_char_width(chars[end]) < width {
        used += get_char_width(chars[end]);
        end += 1;
    }
    while end > 0 && end < chars.len() && numeric[end - 1] && numeric[end] {
        end -= 1;
    }
    let kept: String = chars[..end].iter().collect();
    let kept = kept.trim_end().trim_end_matches([',', ';', '(', '[']).trim_end();
    if kept.is_empty() {
        return format!("{}…", line.split_whitespace().next().unwrap_or(""));
    }
    format!("{kept}…")
}

/// A path cut to `width` columns from its start (`…/fleet/a_s24`): its end is what tells rows
/// apart, and whole components are kept when they fit.
fn cut_path(line: &str, width: usize) -> String {
    let chars: Vec<char> = line.chars().collect();
    let (mut start, mut used) = (chars.len(), 0);
    while start > 0 && used + get_char_width(chars[start - 1]) < width {
        used += get_char_width(chars[start - 1]);
        start -= 1;
    }
    let tail: String = chars[start..].iter().collect();
    let tail = match tail.find('/') {
        Some(k) if k > 0 && k + 1 < tail.len() => &tail[k..],
        _ => tail.as_str(),
    };
    format!("…{tail}")
}

/// Per character: whether it belongs to a number, a run of digits and `. , % + - − ± ~ ≤ ≥ < > e E
/// /` holding at least one digit (`36.38`, `1.31.1`, `-1.5e-3`, `3/10`, `100.0%`, `±1`). No line
/// is broken between two marked characters.
fn number_marks(chars: &[char]) -> Vec<bool> {
    let part = |c: char| c.is_ascii_digit() || ".,%+-−±~≤≥<>eE/".contains(c);
    let mut marks = vec![false; chars.len()];
    let mut start = 0;
    while start < chars.len() {
        let end = (start..chars.len()).find(|&i| !part(chars[i])).unwrap_or(chars.len());
        if chars[start..end].iter().any(char::is_ascii_digit) {
            marks[start..end].iter_mut().for_each(|m| *m = true);
        }
        start = end + 1;
    }
    marks
}

/// One record per row, each value whole: `-[ target cpu ]---` then `column │ value` lines, long
/// values wrapped at spaces within `width`; every record's rule as wide as the widest line.
fn blocks(rows: &[Vec<String>], width: usize) -> String {
    let head: Vec<String> = rows[0].iter().map(|h| strip_ansi(h).replace('\n', " ")).collect();
    let name_width = head.iter().skip(1).map(|h| get_text_width(h)).max().unwrap_or(0);
    let value_width = width.saturating_sub(name_width + 3).max(MIN_TEXT);
    let records: Vec<(String, Vec<String>)> = rows[1..]
        .iter()
        .map(|row| {
            let key = row[0].replace('\n', " ");
            let title = format!("-[ {} ]", [head[0].as_str(), key.as_str()].join(" ").trim());
            (title, record_lines(&head, row, name_width, value_width))
        })
        .collect();
    let rule = records
        .iter()
        .flat_map(|(title, lines)| lines.iter().chain([title]).map(|l| get_text_width(l) + 1))
        .max()
        .unwrap_or(0)
        .min(width);
    let mut out: Vec<String> = Vec::new();
    for (title, lines) in records {
        let dashes = rule.saturating_sub(get_text_width(&title)).max(1);
        out.push(format!("{title}{}", "-".repeat(dashes)));
        out.extend(lines);
    }
    out.join("\n")
}

/// A record's `column │ value` lines, values wrapped to `value_width` under their column.
fn record_lines(head: &[String], row: &[String], name_width: usize, value_width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for (name, value) in head.iter().zip(row).skip(1) {
        let parts = value
            .split('\n')
            .flat_map(|l| fill(&spaced_pieces(l), value_width, value_width));
        for (k, part) in parts.enumerate() {
            let label = if k == 0 { name.as_str() } else { "" };
            let pad = " ".repeat(name_width - get_text_width(label));
            lines.push(format!("{label}{pad} │ {part}").trim_end().to_string());
        }
    }
    lines
}

/// `text` with every line longer than `width` wrapped (none without a width).
fn wrap_lines(text: &str, width: Option<usize>) -> String {
    let Some(width) = width else {
        return text.to_string();
    };
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, end) = line.strip_suffix('\n').map_or((line, ""), |b| (b, "\n"));
        if get_text_width(body) <= width {
            out.push_str(line);
            continue;
        }
        out.push_str(&wrap_line(body, width).join("\n"));
        out.push_str(end);
    }
    out
}

/// One long line wrapped at spaces: the first line at its own indentation, the rest under a
/// hanging indent; a word wider than a line (a path) is broken, a number never.
fn wrap_line(line: &str, width: usize) -> Vec<String> {
    let lead = line.len() - line.trim_start_matches(' ').len();
    let hang = hanging_indent(line, lead, width);
    let pieces = spaced_pieces(&line[lead..]);
    let first = width.saturating_sub(lead).max(MIN_TEXT);
    let rest = width.saturating_sub(hang).max(MIN_TEXT);
    fill(&pieces, first, rest)
        .into_iter()
        .enumerate()
        .map(|(k, l)| format!("{}{l}", " ".repeat(if k == 0 { lead } else { hang })))
        .collect()
}

/// Where a wrapped line continues: under the value of a `key   value` line (a key, then two or
/// more spaces), else four columns in from the line's own indentation; at most half the width.
fn hanging_indent(line: &str, lead: usize, width: usize) -> usize {
    let rest = &line[lead..];
    let aligned = rest.find(' ').and_then(|end| {
        let after = &rest[end..];
        let gap = after.len() - after.trim_start_matches(' ').len();
        (gap >= 2 && !after.trim().is_empty()).then(|| lead + get_text_width(&rest[..end]) + gap)
    });
    aligned.filter(|&c| c <= width / 2).unwrap_or(lead + 4).min(width / 2)
}

/// The words of a line, each with the spaces before it.
fn spaced_pieces(text: &str) -> Vec<(String, String)> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let word_at = rest.len() - rest.trim_start_matches(' ').len();
        let (sep, tail) = rest.split_at(word_at);
        let word_len = tail.find(' ').unwrap_or(tail.len());
        let (word, after) = tail.split_at(word_len);
        if !word.is_empty() {
            pieces.push((sep.to_string(), word.to_string()));
        }
        rest = after;
    }
    pieces
}

/// A header's pieces: its words, split again after a `-` or `/` outside a number
/// (`bit-identical`, `NaN/Inf`; `top-1` stays whole).
fn header_pieces(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (sep, word) in spaced_pieces(&strip_ansi(text).replace('\n', " ")) {
        let chars: Vec<char> = word.chars().collect();
        let numeric = number_marks(&chars);
        let mut start = 0;
        for i in 1..chars.len() {
            if matches!(chars[i - 1], '-' | '/') && !(numeric[i - 1] && numeric[i]) {
                let sep = if start == 0 { sep.clone() } else { String::new() };
                out.push((sep, chars[start..i].iter().collect()));
                start = i;
            }
        }
        let sep = if start == 0 { sep } else { String::new() };
        out.push((sep, chars[start..].iter().collect()));
    }
    out
}

/// Pieces laid out greedily in lines of `first` columns, then `rest`; a piece wider than `rest`
/// is broken first (never inside a number).
fn fill(pieces: &[(String, String)], first: usize, rest: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let (mut line, mut used, mut limit) = (String::new(), 0, first);
    let broken = pieces.iter().flat_map(|(sep, word)| {
        let parts = if get_text_width(word) > rest {
            break_word(word, rest)
        } else {
            vec![word.clone()]
        };
        parts
            .into_iter()
            .enumerate()
            .map(move |(k, p)| (if k == 0 { sep.clone() } else { String::new() }, p))
    });
    for (sep, word) in broken {
        let w = get_text_width(&word);
        if !line.is_empty() && used + sep.len() + w > limit {
            lines.push(std::mem::take(&mut line));
            (used, limit) = (0, rest);
        }
        if !line.is_empty() {
            line.push_str(&sep);
            used += sep.len();
        }
        line.push_str(&word);
        used += w;
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// A word wider than `width` (a path, a long name) in pieces of at most `width` columns, broken
/// preferably after `/ _ : , ; = .`, never inside a number (a number wider than `width` stays
/// whole).
fn break_word(word: &str, width: usize) -> Vec<String> {
    let chars: Vec<char> = strip_ansi(word).chars().collect();
    let numeric = number_marks(&chars);
    let allowed = |i: usize| i == chars.len() || !(numeric[i - 1] && numeric[i]);
    let mut parts = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let mut end = start;
        let mut used = 0;
        while end < chars.len() && used + get_char_width(chars[end]) <= width.max(1) {
            used += get_char_width(chars[end]);
            end += 1;
        }
        let soft = (start + width / 2 + 1..=end)
            .rev()
            .find(|&i| allowed(i) && "/_:,;=.".contains(chars[i - 1]));
        let hard = (start + 1..=end).rev().find(|&i| allowed(i));
        let stop = soft
            .or(hard)
            .unwrap_or_else(|| (end..=chars.len()).find(|&i| allowed(i)).unwrap_or(chars.len()));
        parts.push(chars[start..stop].iter().collect());
        start = stop;
    }
    parts
}

/// `text` without ANSI escape sequences (CSI styles, OSC links).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\x07' {
                        break;
                    }
                    if c == '\x1b' {
                        chars.next();
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(data: &[&[&str]]) -> Vec<Vec<String>> {
        data.iter().map(|r| r.iter().map(|c| c.to_string()).collect()).collect()
    }

    /// What the columns of [`targets`] hold.
    const TARGET_KINDS: &[Kind] = &[
        Kind::Key,
        Kind::Key,
        Kind::Key,
        Kind::Figure,
        Kind::Text,
        Kind::Figure,
        Kind::Figure,
        Kind::Text,
    ];

    /// The compare TARGETS table of the issue: ids, statuses, runtimes, timings, fingerprints.
    fn targets() -> Vec<Vec<String>> {
        rows(&[
            &[
                "target",
                "status",
                "EP",
                "nodes on EP",
                "runtime",
                "create ms",
                "run ms",
                "fingerprint",
            ],
            &[
                "cpu",
                "ok",
                "CPU",
                "53/53",
                "onnxruntime 1.31.1",
                "8.9",
                "0.32",
                "requant half-even, conv half-even, float fp32",
            ],
            &[
                "qnn:sm8650  8 Gen 3 v75",
                "ok",
                "QNN",
                "58/61",
                "onnxruntime-qnn 2.7.0 on onnxruntime 1.31.1",
                "401.2",
                "28.85",
                "requant half-up, conv half-up, float fp16",
            ],
            &[
                "openvino",
                "failed",
                "OpenVINO",
                "-",
                "onnxruntime-openvino 1.24.1",
                "-",
                "-",
                "-",
            ],
        ])
    }

    fn widest(text: &str) -> usize {
        text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
    }

    /// Whether `figure` occurs in `text` with no digit, `.` or `%` on either side.
    fn whole(text: &str, figure: &str) -> bool {
        let edge = |c: Option<char>| c.is_none_or(|c| !(c.is_ascii_digit() || c == '.' || c == '%'));
        text.match_indices(figure)
            .any(|(i, _)| edge(text[..i].chars().next_back()) && edge(text[i + figure.len()..].chars().next()))
    }

    #[test]
    fn without_a_width_or_within_it_the_table_is_drawn_as_it_is() {
        let t = targets();
        let natural = draw(&t, &Look::grid(TARGET_KINDS));
        assert_eq!(fit(&t, &Look::grid(TARGET_KINDS), None), natural);
        assert_eq!(fit(&t, &Look::grid(TARGET_KINDS), Some(widest(&natural))), natural);
        assert!(
            natural.contains("│ requant half-even, conv half-even, float fp32 │"),
            "{natural}"
        );
    }

    #[test]
    fn text_cells_are_cut_with_an_ellipsis_and_figures_statuses_and_keys_kept_whole() {
        let t = targets();
        let out = fit(&t, &Look::grid(TARGET_KINDS), Some(110));
        assert!(widest(&out) <= 110, "{out}");
        assert!(out.contains('…') && !out.contains("-["), "{out}");
        for figure in ["53/53", "58/61", "8.9", "0.32", "401.2", "28.85"] {
            assert!(whole(&out, figure), "{figure} not whole in\n{out}");
        }
        let row_of = |id: &str| out.lines().find(|l| l.contains(id)).unwrap_or_default().to_string();
        assert!(row_of("qnn:sm8650  8 Gen 3 v75").contains("│     ok │"), "{out}");
        assert!(row_of("openvino").contains("│ failed │"), "{out}");
        // Headers wrap at their words instead of being cut.
        assert!(
            out.lines().any(|l| l.contains("│ nodes ")) && !out.contains("nodes…"),
            "{out}"
        );
        // A runtime string is cut before a number, never inside one.
        assert!(!out.contains("2.…") && !out.contains("1.3…"), "{out}");
    }

    #[test]
    fn at_40_columns_every_row_becomes_a_block_with_every_value_whole() {
        let t = targets();
        let out = fit(&t, &Look::grid(TARGET_KINDS), Some(40));
        assert!(widest(&out) <= 40, "{out}");
        assert!(!out.contains('…'), "{out}");
        let lines: Vec<&str> = out.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("-[ target qnn:sm8650  8 Gen 3 v75 ]-"))
            .unwrap_or_else(|| panic!("no block for qnn:sm8650 in\n{out}"));
        assert_eq!(lines[at + 1], "status      │ ok");
        assert_eq!(lines[at + 3], "nodes on EP │ 58/61");
        assert_eq!(lines[at + 4], "runtime     │ onnxruntime-qnn 2.7.0 on");
        assert_eq!(lines[at + 5], "            │ onnxruntime 1.31.1");
        assert!(
            out.contains("-[ target openvino ]-") && out.contains("status      │ failed"),
            "{out}"
        );
    }

    #[test]
    fn figures_never_shrink_so_a_table_of_figures_falls_back_to_blocks() {
        let t = rows(&[
            &["target", "max abs", "max ULP", "SQNR dB", "top-1"],
            &["cpu", "0.1222", "975117568", "36.38", "100.0%"],
            &["qnn:sm8650", "0.1316", "2082928", "36.85", "100.0%"],
        ]);
        let figures = Look::grid(&[Kind::Key, Kind::Figure, Kind::Figure, Kind::Figure, Kind::Figure]);
        let out = fit(&t, &figures, Some(40));
        assert!(out.starts_with("-[ target cpu ]-"), "{out}");
        assert!(out.contains("\nmax ULP │ 975117568\n"), "{out}");
        let natural = draw(&t, &figures);
        assert_eq!(
            fit(&t, &figures.clone().indented(4), Some(widest(&natural) + 4)),
            natural
        );
    }

    #[test]
    fn a_cut_never_splits_a_number_or_leaves_nothing() {
        assert_eq!(cut("onnxruntime-qnn 2.7.0 on onnxruntime", 19), "onnxruntime-qnn…");
        assert_eq!(cut("requant half-even, conv half-even", 20), "requant half-even…");
        assert_eq!(cut("qnn:sm8650@2.3.0+ort1.31.1", 14), "qnn:sm8650@…");
        assert_eq!(cut("1957463 differ", 5), "1957463…");
        // A sign stays with its number; a path keeps its end, whole components first.
        assert_eq!(cut("drift ±12 steps", 8), "drift…");
        let path = |p: &str, w| shorten(p, w, Kind::Path);
        assert_eq!(path("fixtures/device_reports/fleet/a_s24", 14), "…/fleet/a_s24");
        assert_eq!(path("fixtures/device_reports/fleet/b_s24_round", 8), "…4_round");
        // Keys and figures are never cut, whatever they look like; text with digits is text.
        assert_eq!(shorten("unavailable", 4, Kind::Key), "unavailable");
        assert_eq!(shorten("99.00% (96.43–99.72)", 6, Kind::Figure), "99.00% (96.43–99.72)");
        assert_eq!(shorten("onnxruntime 1.31.1 of 2025", 16, Kind::Text), "onnxruntime…");
    }

    #[test]
    fn long_lines_wrap_at_spaces_under_a_hanging_indent_and_keep_numbers_whole() {
        let text = "  qnn:sm8650 probs: ±1 LSB in 10.000%, ±2 or more in 20.000% of codes (max 4 LSB): more than \
                    rounding explains, different arithmetic; requantization rounds half-up\nshort\n";
        let out = wrap_lines(text, Some(40));
        assert!(widest(&out) <= 40, "{out}");
        assert!(
            out.starts_with("  qnn:sm8650 probs: ±1 LSB in 10.000%,\n      ±2"),
            "{out}"
        );
        assert!(out.ends_with("\nshort\n"), "{out}");
        for figure in ["10.000%", "20.000%"] {
            assert!(whole(&out, figure), "{out}");
        }
        let keyed = wrap_lines(
            "  sqnr_db         10·log10(Σr² / Σ(o - r)²); an exact match is +inf dB",
            Some(40),
        );
        assert_eq!(keyed, "  sqnr_db         10·log10(Σr² / Σ(o -\n                  r)²); an exact match\n                  is +inf dB");
        assert_eq!(wrap_lines(text, None), text);
        let rules = "RULES  half-even: ties to even;\n       floor: toward -inf.";
        assert_eq!(reflow(rules, None), rules);
        assert_eq!(
            reflow(rules, Some(30)),
            "RULES  half-even: ties to\n       even; floor: toward\n       -inf."
        );
    }

    #[test]
    fn a_word_wider_than_the_line_breaks_after_a_separator_never_in_a_number() {
        let path = "/onnxruntime_src/onnxruntime/core/session/plugin_ep/ep_plugin_provider_interfaces.cc:71";
        let parts = break_word(path, 30);
        assert_eq!(parts.concat(), path);
        assert!(parts.iter().all(|p| p.chars().count() <= 30), "{parts:?}");
        assert!(!parts.iter().any(|p| p.ends_with('7')), "{parts:?}");
        assert_eq!(break_word("12345678901234", 5), ["12345678901234"]);
        assert_eq!(header_pieces("bit-identical top-1 NaN/Inf").len(), 5);
    }
}
