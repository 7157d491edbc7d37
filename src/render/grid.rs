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
use tabled::settings::object::{Columns, Object, Rows};
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

/// A word of a phrase wider than this (a path) may be broken across the cell's lines.
const MAX_WORD: usize = 16;

/// What a column holds, declared where the renderer builds the table: it decides how the column
/// may be shortened to fit, so a figure is never cut whatever it looks like and a text that holds
/// digits is still text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnKind {
    /// What tells rows apart (a target id, a stage name), or a word that must be read whole (a
    /// status, a verdict): never shortened.
    Key,
    /// A number or a few (`36.38`, `58/61`, `99.00% (96.43–99.72)`): never shortened.
    Figure,
    /// Words: cut with `…` at the end, never inside a number.
    Text,
    /// A file path: cut from its start (`…/fleet/a_s24`), where the rows differ.
    Path,
    /// A phrase read whole (a verdict in words): wrapped inside the cell at spaces, never cut.
    Words,
    /// A `, `-separated list that is read whole (verdict counts): wrapped inside the cell
    /// between its items, never cut, so the row grows taller instead.
    Wrapped,
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
/// declared ones are [`ColumnKind::Text`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Look {
    frame: Frame,
    right_aligned: bool,
    indent: usize,
    kinds: Vec<ColumnKind>,
    split: Option<Split>,
}

/// How a table too wide for the terminal may become several tables of the same rows, each with
/// the rows' key columns and some of the others: lossless, so it is tried before any text is
/// cut.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Split {
    /// The leading columns that tell rows apart, repeated in every part.
    keys: usize,
    /// Columns that go to the later parts: the first part holds the figures that decide.
    secondary: Vec<usize>,
}

/// The most parts a lossless split may make before cutting text is preferred.
const MAX_PARTS: usize = 3;

impl Look {
    /// Rounded, figures right-aligned: the look of the report tables, its columns of `kinds`.
    pub fn grid(kinds: &[ColumnKind]) -> Self {
        Look {
            frame: Frame::Rounded,
            right_aligned: true,
            indent: 0,
            kinds: kinds.to_vec(),
            split: None,
        }
    }

    /// `frame` with every cell left-aligned, its columns of `kinds`: listings and probe tables.
    pub fn plain(frame: Frame, kinds: &[ColumnKind]) -> Self {
        Look {
            frame,
            right_aligned: false,
            indent: 0,
            kinds: kinds.to_vec(),
            split: None,
        }
    }

    /// The same table, allowed to become several tables when it is too wide: each repeats the
    /// first `keys` columns, the first holds the other columns but `secondary`, which follow in
    /// the next ones (in their order). Piped output is never split.
    pub fn splittable(mut self, keys: usize, secondary: &[usize]) -> Self {
        self.split = Some(Split {
            keys,
            secondary: secondary.to_vec(),
        });
        self
    }

    /// The same table printed `indent` columns in (the indentation is the caller's).
    pub fn indented(mut self, indent: usize) -> Self {
        self.indent = indent;
        self
    }

    /// What column `c` holds.
    fn kind(&self, c: usize) -> ColumnKind {
        self.kinds.get(c).copied().unwrap_or(ColumnKind::Text)
    }
}

/// A rounded table with right-aligned cells below the header, its columns of `kinds`, fitted to
/// the terminal.
pub fn table(builder: Builder, kinds: &[ColumnKind]) -> String {
    table_with(builder, &Look::grid(kinds))
}

/// [`table`] for a table printed `indent` columns in.
pub fn table_indented(builder: Builder, indent: usize, kinds: &[ColumnKind]) -> String {
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

/// A shell command of quoted `words`, printed `indent` columns in: one line off a terminal; on a
/// terminal, wrapped between words with ` \` continuations four columns further in, so it still
/// pastes into a shell as one command.
pub fn command(words: &[String], indent: usize) -> String {
    command_at(words, indent, terminal_width())
}

/// [`command`] at `width` (one line without one).
fn command_at(words: &[String], indent: usize, width: Option<usize>) -> String {
    let lead = " ".repeat(indent);
    let Some(width) = width else {
        return format!("{lead}{}", words.join(" "));
    };
    let mut lines: Vec<String> = Vec::new();
    let mut line = lead.clone();
    for word in &flag_pairs(words) {
        let fresh = line.trim().is_empty();
        // Room for the word and, should another line follow, its ` \`.
        if !fresh && get_text_width(&line) + 1 + get_text_width(word) + 2 > width {
            lines.push(format!("{line} \\"));
            line = format!("{lead}    ");
        } else if !fresh {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines.join("\n")
}

/// `words` with each flag joined to the value after it (`-t cpu`), so no line ends on a flag.
fn flag_pairs(words: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut words = words.iter().peekable();
    while let Some(word) = words.next() {
        match words.peek() {
            Some(value) if word.starts_with('-') && !value.starts_with('-') => {
                out.push(format!("{word} {value}"));
                words.next();
            }
            _ => out.push(word.clone()),
        }
    }
    out
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

/// The width to fit to: `COLUMNS`, else the terminal's column count, when stdout is a terminal.
/// Piped output (files, CI logs, tests) is never fitted.
fn terminal_width() -> Option<usize> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse().ok());
    columns.filter(|&c| c > 0).or_else(window_columns)
}

/// The terminal's column count from its window size. A terminal may set its columns and not its
/// rows (`stty cols 100` under `script` leaves 0 rows), which `terminal_size` takes for no size
/// at all: only the columns are asked for here.
#[cfg(unix)]
fn window_columns() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills the `winsize` it is given and touches nothing else; a descriptor
    // that is not a terminal makes it fail, which is checked.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let status = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    (status == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// The terminal's column count where there is no `TIOCGWINSZ`.
#[cfg(not(unix))]
fn window_columns() -> Option<usize> {
    terminal_size::terminal_size().map(|(w, _)| usize::from(w.0))
}

/// The one fitting routine of every terminal table. `rows[0]` is the header. Without a width the
/// table is drawn as it is; with one, it is drawn whole if it fits, else with its headers
/// wrapped, else (when the look allows) split into a few tables of the same rows, else with its
/// text cells shortened (keys and figures never), else split with its text cells shortened,
/// else one block per row.
pub fn fit(rows: &[Vec<String>], look: &Look, width: Option<usize>) -> String {
    let natural = draw(rows, look);
    let Some(width) = width.map(|w| w.saturating_sub(look.indent)) else {
        return natural;
    };
    if rows.len() < 2 || get_text_width(&natural) <= width {
        return natural;
    }
    let rows = square(rows);
    shrunk(&rows, look, width, Cuts::Lossless)
        .map(|t| vec![t])
        .or_else(|| split(&rows, look, width, Cuts::Lossless).filter(|parts| parts.len() <= MAX_PARTS))
        .or_else(|| shrunk(&rows, look, width, Cuts::Cells).map(|t| vec![t]))
        .or_else(|| split(&rows, look, width, Cuts::Cells))
        .map(|parts| parts.join("\n"))
        .unwrap_or_else(|| blocks(&rows, width))
}

/// What fitting a table may change: nothing a reader loses (headers, phrases and lists wrapped
/// in their cells), or text too (cut with `…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cuts {
    Lossless,
    Cells,
}

/// The table drawn within `width`: as it is, else fitted as `cuts` allows.
fn within(rows: &[Vec<String>], look: &Look, width: usize, cuts: Cuts) -> Option<String> {
    let natural = draw(rows, look);
    if get_text_width(&natural) <= width {
        return Some(natural);
    }
    shrunk(rows, look, width, cuts)
}

/// The table as several tables within `width`, each the key columns and a run of the others:
/// the primary columns first, then the secondary ones, each run packed in its order and each part
/// fitted as `cuts` allows.
fn split(rows: &[Vec<String>], look: &Look, width: usize, cuts: Cuts) -> Option<Vec<String>> {
    let plan = look.split.as_ref()?;
    let n = rows[0].len();
    let keys: Vec<usize> = (0..plan.keys.min(n)).collect();
    let (secondary, primary): (Vec<usize>, Vec<usize>) =
        (plan.keys.min(n)..n).partition(|c| plan.secondary.contains(c));
    let mut groups = pack(rows, look, &keys, &primary, width);
    groups.extend(pack(rows, look, &keys, &secondary, width));
    let parts = groups
        .iter()
        .map(|group| {
            let (part_rows, part_look) = project(rows, look, &[keys.as_slice(), group].concat());
            within(&part_rows, &part_look, width, cuts)
        })
        .collect::<Option<Vec<String>>>()?;
    (parts.len() > 1).then_some(parts)
}

/// `columns` in consecutive groups, each as many as fit `width` beside the key columns with at
/// most their headers wrapped (a column too wide alone is a group of its own).
fn pack(rows: &[Vec<String>], look: &Look, keys: &[usize], columns: &[usize], width: usize) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group: Vec<usize> = Vec::new();
    for &c in columns {
        group.push(c);
        let (part_rows, part_look) = project(rows, look, &[keys, &group].concat());
        if group.len() > 1 && within(&part_rows, &part_look, width, Cuts::Lossless).is_none() {
            group.pop();
            groups.push(std::mem::replace(&mut group, vec![c]));
        }
    }
    if !group.is_empty() {
        groups.push(group);
    }
    groups
}

/// The rows' `columns` and the look of a table of them.
fn project(rows: &[Vec<String>], look: &Look, columns: &[usize]) -> (Vec<Vec<String>>, Look) {
    let part_rows = rows
        .iter()
        .map(|r| columns.iter().map(|&c| r[c].clone()).collect())
        .collect();
    let part_look = Look {
        kinds: columns.iter().map(|&c| look.kind(c)).collect(),
        split: None,
        ..look.clone()
    };
    (part_rows, part_look)
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
        // Words read from their start: text and paths stay left-aligned among the figures.
        let words = |c: &usize| {
            matches!(
                look.kind(*c),
                ColumnKind::Text | ColumnKind::Path | ColumnKind::Wrapped | ColumnKind::Words
            )
        };
        for c in (0..rows.first().map_or(0, Vec::len)).filter(words) {
            t.with(Modify::new(Columns::one(c).not(Rows::first())).with(Alignment::left()));
        }
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

/// A column's natural width, its width with only its header wrapped, and the narrowest it may
/// be drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Column {
    natural: usize,
    body: usize,
    floor: usize,
    /// The narrowest without cutting text: a phrase's or a list's floor, else its body.
    lossless: usize,
}

/// Per column: its natural width, its body's (cells whole, the header wrapped), and its floor: the
/// header's longest unbreakable piece, a key's or a figure's cells at their width, a text's or a
/// path's at [`text_floor`], a wrapped cell's longest item.
fn columns(rows: &[Vec<String>], look: &Look) -> Vec<Column> {
    let n = rows.first().map_or(0, Vec::len);
    (0..n)
        .map(|c| {
            let cells = rows.iter().skip(1).map(|r| r[c].as_str());
            let head = &rows[0][c];
            let head_floor = header_pieces(head)
                .iter()
                .map(|(_, p)| get_text_width(p))
                .max()
                .unwrap_or(0);
            let body = cells.clone().map(get_text_width).fold(head_floor, usize::max);
            let natural = body.max(get_text_width(head));
            let floor = cells
                .map(|cell| match look.kind(c) {
                    ColumnKind::Key | ColumnKind::Figure => get_text_width(cell),
                    ColumnKind::Text | ColumnKind::Path => text_floor(cell),
                    ColumnKind::Wrapped => longest_item(cell),
                    ColumnKind::Words => words_floor(cell),
                })
                .fold(head_floor, usize::max);
            let lossless = match look.kind(c) {
                ColumnKind::Words | ColumnKind::Wrapped => floor,
                _ => body,
            };
            Column {
                natural,
                body,
                floor,
                lossless,
            }
        })
        .collect()
}

/// The narrowest a phrase is wrapped to: its widest word, or [`MAX_WORD`] when a word (a path)
/// is wider, broken after a `/`, `_`, `:` or `.` then.
fn words_floor(cell: &str) -> usize {
    cell.split_whitespace()
        .map(get_text_width)
        .max()
        .unwrap_or(0)
        .min(MAX_WORD)
}

/// The widest item of a wrapped cell: the narrowest it can be.
fn longest_item(cell: &str) -> usize {
    cell.lines()
        .flat_map(|l| list_items(l).into_iter().map(|(_, item)| get_text_width(&item)))
        .max()
        .unwrap_or(0)
}

/// The items of a `, `-separated list, each with its comma and the space before it: a wrapped
/// cell breaks between items (`cpu_fallback 1,` | `reproduced 3`), never inside one.
fn list_items(line: &str) -> Vec<(String, String)> {
    let items: Vec<&str> = line.split(", ").collect();
    let last = items.len() - 1;
    items
        .iter()
        .enumerate()
        .map(|(k, item)| {
            let sep = if k == 0 { "" } else { " " };
            let comma = if k < last { "," } else { "" };
            (sep.to_string(), format!("{item}{comma}"))
        })
        .collect()
}

/// The narrowest a text cell is shortened to: a third of it, at least [`MIN_TEXT`] columns.
fn text_floor(cell: &str) -> usize {
    let w = get_text_width(cell);
    w.min(MIN_TEXT.max(w.div_ceil(3)))
}

/// The table with its headers wrapped and, as `cuts` allows, its cells shortened to fit `width`,
/// if the floors allow.
fn shrunk(rows: &[Vec<String>], look: &Look, width: usize, cuts: Cuts) -> Option<String> {
    let cols = columns(rows, look);
    let natural = get_text_width(&draw(rows, look));
    let overhead = natural.saturating_sub(cols.iter().map(|c| c.natural).sum());
    let widths = column_widths(&cols, width.checked_sub(overhead)?, cuts)?;
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

/// Column widths within `budget`: first only the headers wrap (every column as wide as its
/// cells), the room left given back to them; if that is still too wide, the widest columns are
/// narrowed to one cap, none below its floor (with [`Cuts::Lossless`], text columns not at all),
/// what the cap leaves given back to the narrowed columns. `None` when even the floors do not
/// fit.
fn column_widths(cols: &[Column], budget: usize, cuts: Cuts) -> Option<Vec<usize>> {
    let body: Vec<usize> = cols.iter().map(|c| c.body).collect();
    if body.iter().sum::<usize>() <= budget {
        let natural: Vec<usize> = cols.iter().map(|c| c.natural).collect();
        return Some(give_back(body, &natural, budget));
    }
    let floor = |c: &Column| if cuts == Cuts::Lossless { c.lossless } else { c.floor };
    let at = |cap: usize| -> Vec<usize> { cols.iter().map(|c| c.body.min(cap).max(floor(c))).collect() };
    let top = body.iter().copied().max().unwrap_or(0);
    let widths = (0..=top).rev().map(at).find(|w| w.iter().sum::<usize>() <= budget)?;
    Some(give_back(widths, &body, budget))
}

/// `widths` widened a column at a time, in turn, toward `wanted` while the sum stays within
/// `budget`.
fn give_back(mut widths: Vec<usize>, wanted: &[usize], budget: usize) -> Vec<usize> {
    let mut left = budget.saturating_sub(widths.iter().sum::<usize>());
    while left > 0 {
        let before = left;
        for (w, &want) in widths.iter_mut().zip(wanted) {
            if left > 0 && *w < want {
                *w += 1;
                left -= 1;
            }
        }
        if left == before {
            break;
        }
    }
    widths
}

/// A cell of `kind` shortened to `width` columns: each longer line of a text cut with `…` at its
/// end (never inside a number), of a path at its start, of a list wrapped between items; keys
/// and figures as they are.
fn shorten(cell: &str, width: usize, kind: ColumnKind) -> String {
    if get_text_width(cell) <= width {
        return cell.to_string();
    }
    cell.lines()
        .map(|line| match kind {
            _ if get_text_width(line) <= width => line.to_string(),
            ColumnKind::Key | ColumnKind::Figure => line.to_string(),
            ColumnKind::Text => cut(&strip_ansi(line), width),
            ColumnKind::Path => cut_path(&strip_ansi(line), width),
            ColumnKind::Wrapped => fill(&list_items(line), width, width).join("\n"),
            ColumnKind::Words => fill(&spaced_pieces(line), width, width).join("\n"),
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
    // Too narrow for a value of MIN_TEXT columns beside the names: each value goes under its
    // name instead, two columns in, so no line grows past the width to be wrapped again.
    let stacked = width < name_width + 3 + MIN_TEXT;
    let value_width = if stacked {
        width.saturating_sub(STACK_INDENT).max(1)
    } else {
        width - name_width - 3
    };
    let records: Vec<(String, Vec<String>)> = rows[1..]
        .iter()
        .map(|row| {
            let key = row[0].replace('\n', " ");
            let title = format!("-[ {} ]", [head[0].as_str(), key.as_str()].join(" ").trim());
            let lines = if stacked {
                stacked_lines(&head, row, value_width)
            } else {
                record_lines(&head, row, name_width, value_width)
            };
            (title, lines)
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

/// How far in a value is printed under its name in a record too narrow for `column │ value`.
const STACK_INDENT: usize = 2;

/// A record's `column` lines, each followed by its value wrapped to `value_width`, indented.
fn stacked_lines(head: &[String], row: &[String], value_width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for (name, value) in head.iter().zip(row).skip(1) {
        lines.push(name.clone());
        let parts = value
            .split('\n')
            .flat_map(|l| fill(&spaced_pieces(l), value_width, value_width));
        lines.extend(parts.map(|part| format!("{}{part}", " ".repeat(STACK_INDENT)).trim_end().to_string()));
    }
    lines
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

/// A header's pieces: its words, split again after a `-`, `/`, `:` or `@` outside a number
/// (`bit-identical`, `NaN/Inf`, `qnn:sm8650`; `top-1` stays whole).
fn header_pieces(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (sep, word) in spaced_pieces(&strip_ansi(text).replace('\n', " ")) {
        let chars: Vec<char> = word.chars().collect();
        let numeric = number_marks(&chars);
        let mut start = 0;
        for i in 1..chars.len() {
            if matches!(chars[i - 1], '-' | '/' | ':' | '@') && !(numeric[i - 1] && numeric[i]) {
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
    const TARGET_KINDS: &[ColumnKind] = &[
        ColumnKind::Key,
        ColumnKind::Key,
        ColumnKind::Key,
        ColumnKind::Figure,
        ColumnKind::Text,
        ColumnKind::Figure,
        ColumnKind::Figure,
        ColumnKind::Text,
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
    fn a_block_too_narrow_for_names_and_values_side_by_side_puts_each_value_under_its_name() {
        let t = rows(&[
            &["#", "tensor", "codes ≠ baseline"],
            &["1", "conv1_out_QuantizeLinear_Output", "1 (±1 on 1, 0 on .5, ±2 on 0)"],
        ]);
        let look = Look::grid(&[ColumnKind::Key, ColumnKind::Text, ColumnKind::Words]);
        let out = fit(&t, &look, Some(26));
        assert!(widest(&out) <= 26, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("-[ # 1 ]-"), "{out}");
        assert_eq!(lines[1], "tensor");
        assert_eq!(lines[2], "  conv1_out_QuantizeLinear");
        assert_eq!(lines[3], "  _Output");
        assert_eq!(lines[4], "codes ≠ baseline");
        assert_eq!(&lines[5..], ["  1 (±1 on 1, 0 on .5, ±2", "  on 0)"]);
        // Wide enough for both, the record keeps its `column │ value` lines.
        let wide = blocks(&t, 34);
        assert!(wide.contains("codes ≠ baseline │ 1 (±1 on 1, 0\n"), "{wide}");
    }

    #[test]
    fn figures_never_shrink_so_a_table_of_figures_falls_back_to_blocks() {
        let t = rows(&[
            &["target", "max abs", "max ULP", "SQNR dB", "top-1"],
            &["cpu", "0.1222", "975117568", "36.38", "100.0%"],
            &["qnn:sm8650", "0.1316", "2082928", "36.85", "100.0%"],
        ]);
        let figures = Look::grid(&[
            ColumnKind::Key,
            ColumnKind::Figure,
            ColumnKind::Figure,
            ColumnKind::Figure,
            ColumnKind::Figure,
        ]);
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
        let path = |p: &str, w| shorten(p, w, ColumnKind::Path);
        assert_eq!(path("fixtures/device_reports/fleet/a_s24", 14), "…/fleet/a_s24");
        assert_eq!(path("fixtures/device_reports/fleet/b_s24_round", 8), "…4_round");
        // Keys and figures are never cut, whatever they look like; text with digits is text.
        assert_eq!(shorten("unavailable", 4, ColumnKind::Key), "unavailable");
        assert_eq!(
            shorten("99.00% (96.43–99.72)", 6, ColumnKind::Figure),
            "99.00% (96.43–99.72)"
        );
        assert_eq!(
            shorten("onnxruntime 1.31.1 of 2025", 16, ColumnKind::Text),
            "onnxruntime…"
        );
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

    /// An OUTPUT table of four targets: eleven columns, 126 wide.
    fn outputs() -> Vec<Vec<String>> {
        rows(&[
            &[
                "target",
                "bit-identical",
                "max abs",
                "mean abs",
                "RMSE",
                "max ULP",
                "cosine",
                "SQNR dB",
                "excess dB",
                "top-1",
                "top-5",
                "NaN/Inf",
            ],
            &[
                "cpu", "0/10", "0.1222", "0.06345", "0.07183", "1957463", "0.999901", "36.38", "+0.97", "100.0%",
                "100.0%", "0/0",
            ],
            &[
                "qnn:sm8650",
                "0/10",
                "0.1316",
                "0.05393",
                "0.06808",
                "2082928",
                "0.999897",
                "36.85",
                "+0.50",
                "100.0%",
                "100.0%",
                "0/0",
            ],
            &[
                "cpu:noopt",
                "0/10",
                "0.1222",
                "0.05697",
                "0.06425",
                "1957463",
                "0.999917",
                "37.35",
                "(baseline)",
                "100.0%",
                "100.0%",
                "0/0",
            ],
        ])
    }

    fn output_look() -> Look {
        let mut kinds = vec![ColumnKind::Key];
        kinds.extend([ColumnKind::Figure; 11]);
        Look::grid(&kinds).splittable(1, &[3, 4, 5, 6, 10])
    }

    #[test]
    fn a_splittable_table_too_wide_becomes_two_tables_with_the_deciding_figures_first() {
        let t = outputs();
        let out = fit(&t, &output_look(), Some(100));
        assert!(
            widest(&out) <= 100 && !out.contains("-[") && !out.contains('…'),
            "{out}"
        );
        let parts: Vec<&str> = out.split('╭').filter(|p| !p.is_empty()).collect();
        assert_eq!(parts.len(), 2, "{out}");
        let header = |part: &str| part.lines().nth(1).unwrap_or_default().to_string();
        for column in ["bit-identical", "max abs", "SQNR dB", "excess dB", "top-1", "NaN/Inf"] {
            assert!(header(parts[0]).contains(column), "{column}: {out}");
        }
        for column in ["mean abs", "RMSE", "max ULP", "cosine", "top-5"] {
            assert!(header(parts[1]).contains(column), "{column}: {out}");
        }
        // Every row's key is repeated in each part, every figure whole.
        for part in &parts {
            for id in ["cpu", "qnn:sm8650", "cpu:noopt"] {
                assert!(
                    part.lines()
                        .any(|l| l.contains(&format!("│ {id} │")) || l.contains(&format!(" {id} │"))),
                    "{id}: {part}"
                );
            }
        }
        for figure in ["1957463", "2082928", "0.999917", "36.85", "+0.97", "(baseline)"] {
            assert!(whole(&out, figure), "{figure}: {out}");
        }
        // Piped, and wide enough, the table is one table as it is; not splittable, blocks.
        assert_eq!(fit(&t, &output_look(), None), draw(&t, &output_look()));
        let mut kinds = vec![ColumnKind::Key];
        kinds.extend([ColumnKind::Figure; 11]);
        assert!(fit(&t, &Look::grid(&kinds), Some(100)).starts_with("-[ target cpu ]"));
    }

    #[test]
    fn headers_wrap_before_anything_is_split_or_cut() {
        let t = rows(&[
            &["target", "points lost vs reference", "median vs CPU EP dB"],
            &["cpu", "+1.00", "-17.65"],
        ]);
        let look = Look::grid(&[ColumnKind::Key, ColumnKind::Figure, ColumnKind::Figure]).splittable(1, &[2]);
        let out = fit(&t, &look, Some(40));
        assert!(widest(&out) <= 40 && out.matches('╭').count() == 1, "{out}");
        assert!(out.contains("+1.00") && out.contains("-17.65"), "{out}");
    }

    #[test]
    fn lists_wrap_between_items_and_phrases_between_words_never_cut() {
        let t = rows(&[
            &["chipset", "reports", "verdicts", "why"],
            &[
                "SM8650",
                "6",
                "garbage 1, reproduced 3, rounding 1, unexplained 1",
                "the cheapest variant that meets the policy on qnn:sm8650",
            ],
        ]);
        let look = Look::grid(&[
            ColumnKind::Key,
            ColumnKind::Figure,
            ColumnKind::Wrapped,
            ColumnKind::Words,
        ]);
        let out = fit(&t, &look, Some(60));
        assert!(widest(&out) <= 60 && !out.contains('…') && !out.contains("-["), "{out}");
        for item in ["garbage 1,", "reproduced 3,", "rounding 1,", "unexplained 1"] {
            assert!(out.contains(item), "{item} split in\n{out}");
        }
        let words: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split('│').nth(4))
            .flat_map(str::split_whitespace)
            .collect();
        assert_eq!(
            words.join(" "),
            "why the cheapest variant that meets the policy on qnn:sm8650"
        );
        assert_eq!(
            list_items("a 1, b 2"),
            [("".into(), "a 1,".into()), (" ".into(), "b 2".into())]
        );
    }

    #[test]
    fn a_command_wraps_between_flags_and_values_with_continuations() {
        let words: Vec<String> = "npu-audit eval --shard 1/3 --out shard-1.json model.onnx -t cpu -t qnn:sm8650"
            .split(' ')
            .map(String::from)
            .collect();
        assert_eq!(command_at(&words, 2, None), format!("  {}", words.join(" ")));
        let out = command_at(&words, 2, Some(40));
        assert_eq!(
            out,
            "  npu-audit eval --shard 1/3 \\\n      --out shard-1.json model.onnx \\\n      -t cpu -t qnn:sm8650"
        );
        assert!(widest(&out) <= 40, "{out}");
    }
}
