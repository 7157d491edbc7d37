//! Labels of an eval set: `labels.csv` (a header `id,label`, then one row per sample),
//! `labels.jsonl` (one `{"id": ..., "label": ...}` per line), or an array `labels` stacked like
//! the samples. Every sample needs exactly one label, and every label a sample.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::data::tensor::read_npz_entries;
use crate::foundation::error::bad_input;

/// The most bytes a labels file may hold.
const MAX_LABELS_BYTES: u64 = 1 << 30;

/// One sample's label as the file gives it; what it means is the task's to say (a class index,
/// a class name, a transcript, a yes or no).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Label {
    Int(i64),
    Bool(bool),
    Text(String),
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Label::Int(i) => write!(f, "{i}"),
            Label::Bool(b) => write!(f, "{b}"),
            Label::Text(t) => f.write_str(t),
        }
    }
}

/// The labels file inside a set's directory: `labels.csv` or `labels.jsonl` (not both).
pub fn beside(dir: &Path) -> Result<Option<PathBuf>> {
    let found: Vec<PathBuf> = ["labels.csv", "labels.jsonl"]
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| p.exists())
        .collect();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        _ => Err(bad_input(format!(
            "--dataset {}: both labels.csv and labels.jsonl; keep one",
            dir.display()
        ))),
    }
}

/// Reads a labels file (`.csv` or `.jsonl`) and puts its labels in the order of `ids`.
pub fn read(path: &Path, ids: &[String]) -> Result<Vec<Label>> {
    let shown = path.display().to_string();
    crate::foundation::userfile::regular_file(path).map_err(|e| bad_input(format!("labels {shown}: {e}")))?;
    if std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_LABELS_BYTES) {
        return Err(bad_input(format!(
            "labels {shown}: larger than {} MiB",
            MAX_LABELS_BYTES >> 20
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad_input(format!("labels {shown}: {e}")))?;
    // Spreadsheet programs and Windows editors start UTF-8 files with a byte-order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let rows = match path.extension().and_then(|x| x.to_str()) {
        Some("csv") => csv_rows(text),
        Some("jsonl") => jsonl_rows(text),
        _ => Err("a labels file is .csv or .jsonl".to_string()),
    }
    .map_err(|e| bad_input(format!("labels {shown}: {e}")))?;
    in_order(rows, ids).map_err(|e| bad_input(format!("labels {shown}: {e}")))
}

/// `(line, id, label)` of a CSV file with the header `id,label`. Labels stay text: `007` is a
/// transcript to a recognizer and a class to a classifier.
fn csv_rows(text: &str) -> Result<Vec<(usize, String, Label)>, String> {
    let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(text.as_bytes());
    let headers = reader.headers().map_err(|e| e.to_string())?.clone();
    if headers.len() != 2 || &headers[0] != "id" || &headers[1] != "label" {
        return Err(format!(
            "the header must be `id,label`, not `{}`",
            headers.iter().collect::<Vec<_>>().join(",")
        ));
    }
    let mut rows = Vec::new();
    let bytes = text.as_bytes();
    // Newlines before `counted`, carried from record to record: records come in byte order, so
    // the file is counted through once (linear in its size, not quadratic).
    let (mut counted, mut newlines) = (0usize, 0usize);
    for record in reader.records() {
        let record = record.map_err(|e| e.to_string())?;
        // The line the record starts on, as an editor numbers it (blank lines count).
        // (Counted from the byte offset, past the blank lines the reader skipped before the
        // record: its own line count leaves them out.)
        let mut at = record.position().map_or(0, |p| p.byte() as usize).min(bytes.len());
        while at < bytes.len() && (bytes[at] == b'\n' || bytes[at] == b'\r') {
            at += 1;
        }
        let at = at.max(counted);
        newlines += bytes[counted..at].iter().filter(|&&b| b == b'\n').count();
        counted = at;
        let line = 1 + newlines;
        if record.len() != 2 {
            return Err(format!("line {line}: {} fields where `id,label` has 2", record.len()));
        }
        rows.push((line, record[0].to_string(), Label::Text(record[1].to_string())));
    }
    Ok(rows)
}

/// `(line, id, label)` of a JSON-lines file of `{"id": ..., "label": ...}` objects; an id may be
/// a number (a stacked set's position).
fn jsonl_rows(text: &str) -> Result<Vec<(usize, String, Label)>, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Row {
        id: serde_json::Value,
        label: Label,
    }
    let mut rows = Vec::new();
    for (k, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let row: Row = serde_json::from_str(line)
            .map_err(|e| format!("line {}: not {{\"id\": ..., \"label\": ...}}: {e}", k + 1))?;
        let id = match row.id {
            serde_json::Value::String(s) => s,
            serde_json::Value::Number(n) if n.is_u64() => n.to_string(),
            other => return Err(format!("line {}: the id {other} is neither text nor a position", k + 1)),
        };
        rows.push((k + 1, id, row.label));
    }
    Ok(rows)
}

/// The labels in the order of `ids`: every id labelled once, every label an id's.
fn in_order(rows: Vec<(usize, String, Label)>, ids: &[String]) -> Result<Vec<Label>, String> {
    let mut by_id: HashMap<String, (usize, Label)> = HashMap::with_capacity(rows.len());
    for (line, id, label) in rows {
        if let Some((first, _)) = by_id.get(&id) {
            return Err(format!("line {line}: sample {id} is labelled twice (line {first} too)"));
        }
        by_id.insert(id, (line, label));
    }
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        match by_id.remove(id) {
            Some((_, label)) => out.push(label),
            None => return Err(format!("sample {id} has no label")),
        }
    }
    if let Some((id, (line, _))) = by_id.into_iter().min_by_key(|(_, (line, _))| *line) {
        return Err(format!(
            "line {line}: a label for sample {id}, which the set does not have"
        ));
    }
    Ok(out)
}

/// The `labels` array of a stacked set: one integer (or boolean) per sample.
pub fn from_member(path: &Path, count: usize) -> Result<Vec<Label>> {
    let shown = path.display();
    let arrays =
        read_npz_entries(path, &["labels".to_string()]).map_err(|e| bad_input(format!("--dataset {shown}: {e:#}")))?;
    let Some((_, t)) = arrays.into_iter().next() else {
        return Err(bad_input(format!("--dataset {shown}: no array 'labels'")));
    };
    if t.shape != [count] {
        return Err(bad_input(format!(
            "--dataset {shown}: 'labels' has shape {:?}; one label per sample is [{count}]",
            t.shape
        )));
    }
    if t.dtype().is_float() {
        return Err(bad_input(format!(
            "--dataset {shown}: 'labels' holds {} values; labels are integers (classes) or booleans",
            t.dtype().name()
        )));
    }
    (0..count)
        .map(|k| {
            t.data
                .get_i128(k)
                .and_then(|v| i64::try_from(v).ok())
                .map(Label::Int)
                .ok_or_else(|| {
                    bad_input(format!(
                        "--dataset {shown}: 'labels' row {k} is beyond the integers a label can be (up to 2^63 - 1)"
                    ))
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_needs_one_label_and_every_label_a_sample() {
        let ids: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let csv = "id,label\nb,\"7, or 8\"\na,3\n";
        assert_eq!(
            in_order(csv_rows(csv).unwrap(), &ids).unwrap(),
            vec![Label::Text("3".into()), Label::Text("7, or 8".into())]
        );
        let jsonl = "{\"id\": \"a\", \"label\": 1}\n\n{\"id\": \"b\", \"label\": true}\n";
        assert_eq!(
            in_order(jsonl_rows(jsonl).unwrap(), &ids).unwrap(),
            vec![Label::Int(1), Label::Bool(true)]
        );
        let e = |rows| in_order(rows, &ids).unwrap_err();
        assert!(e(csv_rows("id,label\na,1\n").unwrap()).contains("sample b has no label"));
        assert!(e(csv_rows("id,label\na,1\nb,2\nc,3\n").unwrap()).contains("line 4: a label for sample c"));
        // Blank lines count in the line numbers, as an editor shows them.
        let blank = e(csv_rows("id,label\na,1\n\nb,2\n\nc,3\n").unwrap());
        assert!(blank.contains("line 6: a label for sample c"), "{blank}");
        assert!(e(csv_rows("id,label\na,1\na,2\nb,1\n").unwrap()).contains("labelled twice"));
        assert!(csv_rows("name,label\na,1\n").unwrap_err().contains("header"));
        assert!(jsonl_rows("{\"id\": 1.5, \"label\": 1}\n")
            .unwrap_err()
            .contains("neither text"));
        assert!(jsonl_rows("{\"id\": \"a\", \"label\": [1]}\n").is_err());
        // A stacked set's ids are its positions: an id written as a number names one.
        let positions: Vec<String> = ["0", "1"].iter().map(|s| s.to_string()).collect();
        let numbered = "{\"id\": 1, \"label\": 4}\n{\"id\": 0, \"label\": 5}\n";
        assert_eq!(
            in_order(jsonl_rows(numbered).unwrap(), &positions).unwrap(),
            vec![Label::Int(5), Label::Int(4)]
        );
        // Blank lines and line numbers in a large file: counted through once, right at the end.
        let big: String = std::iter::once("id,label\n".to_string())
            .chain((0..5000).map(|k| format!("s{k},{k}\n\n")))
            .collect();
        let rows = csv_rows(&big).unwrap();
        assert_eq!(rows[4999].0, 2 + 2 * 4999);
    }
}
