//! The terminal tables of `runtime list` and `runtime gc`.

use tabled::builder::Builder;

use super::grid::{prose, table_with, ColumnKind, Frame, Look};

use crate::commands::runtime_cache::{version_span, CachedBuild, RuntimeRow};

/// Renders `runtime list` as a table; with `all`, what the catalogue records about each plugin
/// release follows it (the cores it runs on, where it fails and the runtime's words).
pub fn runtime_table(rows: &[RuntimeRow], all: bool) -> String {
    let mut b = Builder::default();
    b.push_record([
        "key",
        "package",
        "release",
        "wheel (pinned SHA-256)",
        "state",
        "library",
    ]);
    for r in rows {
        b.push_record([
            r.key.clone(),
            r.package.clone(),
            format!("{}{}", r.version, if r.default { " (default)" } else { "" }),
            r.wheel_sha256
                .as_ref()
                .map_or("not pinned for this platform".into(), |s| {
                    s[..16.min(s.len())].to_string()
                }),
            r.state.clone(),
            r.library.clone().unwrap_or_default(),
        ]);
    }
    // The release tells a key's rows apart and the state is the row's status: never shortened.
    use ColumnKind::{Key, Path, Text};
    let mut out = table_with(b, &Look::plain(Frame::Rounded, &[Key, Key, Key, Text, Key, Path]));
    if all {
        for r in rows.iter().filter(|r| !r.runs_on.is_empty() || !r.refused.is_empty()) {
            out.push_str(&format!(
                "\n{} {}{}: runs on onnxruntime {}",
                r.package,
                r.version,
                r.qnn_sdk.as_ref().map_or(String::new(), |q| format!(" (QNN SDK {q})")),
                version_span(&r.runs_on)
            ));
            for refusal in &r.refused {
                out.push_str(&format!("\n    fails on {refusal}"));
            }
            if let Some(m) = &r.measured {
                out.push_str(&format!("\n    measured {m}"));
            }
        }
    }
    prose(&out)
}

/// Renders what `runtime gc` removed (or would remove) and kept.
pub fn gc_table(rows: &[CachedBuild], dry_run: bool) -> String {
    let mut b = Builder::default();
    b.push_record(["package", "release", "MB", "action", "why"]);
    let mut freed = 0u64;
    for r in rows {
        let remove = r.removed || (dry_run && r.remove);
        if remove {
            freed += r.bytes;
        }
        b.push_record([
            r.package.clone(),
            r.version.clone(),
            format!("{:.0}", r.bytes as f64 / 1e6),
            match (remove, dry_run) {
                (true, true) => "would remove".into(),
                (true, false) => "removed".into(),
                (false, _) => "kept".into(),
            },
            r.why.clone(),
        ]);
    }
    use ColumnKind::{Figure, Key, Text};
    let t = table_with(b, &Look::plain(Frame::Rounded, &[Key, Key, Figure, Key, Text]));
    prose(&format!(
        "{t}\n{} {:.0} MB",
        if dry_run { "would free" } else { "freed" },
        freed as f64 / 1e6
    ))
}
