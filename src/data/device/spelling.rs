//! The file names a `qnn-net-run` or `snpe-net-run` output may have inside `Result_N/`. Tools and
//! apps spell an output name differently: Qualcomm's converters replace every character other
//! than letters, digits and `_` (`save_infer_model_scale_0_tmp_1.raw`), `qnn-net-run` itself only
//! the `/` (`save_infer_model_scale_0.tmp_1.raw`), `snpe-net-run` keeps each `/` as a
//! subdirectory (`save_infer_model/scale_0.tmp_1.raw`). Every spelling that names exactly one
//! output is accepted, and the report says which one matched; a file two outputs could claim, or
//! an output with two files, is refused rather than guessed.

use std::path::Path;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// How an output's file name was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Spelling {
    /// Every character other than letters, digits and `_` written as `_`, `_` before a leading
    /// digit (Qualcomm's converters).
    Sanitized,
    /// Runs of such characters written as one `_`.
    Collapsed,
    /// Only `/` written as `_` (`qnn-net-run`).
    SlashAsUnderscore,
    /// The output's name as it is.
    AsNamed,
    /// Each `/` a subdirectory (`snpe-net-run`).
    Subdirectories,
}

/// Which file of `Result_0/` holds an output, and how its name was spelled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutputFile {
    pub output: String,
    /// The file, relative to `Result_N/` (`/`-separated).
    pub file: String,
    pub spelling: Spelling,
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn lead(s: String) -> String {
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{s}")
    } else {
        s
    }
}

fn collapsed(output: &str) -> String {
    let mut out = String::new();
    let mut in_run = false;
    for c in output.chars() {
        if is_word(c) {
            out.push(c);
        } else if !in_run {
            out.push('_');
        }
        in_run = !is_word(c);
    }
    out
}

/// `name` with each `/` a directory, when every part is a plain file or directory name.
fn as_subdirectories(output: &str) -> Option<String> {
    let parts: Vec<&str> = output.trim_start_matches('/').split('/').collect();
    let plain = |p: &&str| !p.is_empty() && *p != "." && *p != ".." && !p.contains(['\\', '\0']);
    (parts.len() > 1 && parts.iter().all(plain)).then(|| parts.join("/"))
}

/// Every file an output may be written as, relative to `Result_N/`, most likely first, each
/// once.
pub fn spellings(output: &str) -> Vec<(String, Spelling)> {
    let per_char: String = output.chars().map(|c| if is_word(c) { c } else { '_' }).collect();
    // The name as it is comes before the other spellings it may coincide with, so that a file
    // named exactly as the output is said to be so.
    let plain_file = !output.is_empty() && !output.contains(['/', '\\', '\0']) && output != "." && output != "..";
    let mut names = Vec::new();
    if plain_file {
        names.push((output.to_string(), Spelling::AsNamed));
    }
    names.extend([
        (lead(per_char.clone()), Spelling::Sanitized),
        (lead(collapsed(output)), Spelling::Collapsed),
        (per_char, Spelling::Sanitized),
        (output.replace('/', "_"), Spelling::SlashAsUnderscore),
    ]);
    if let Some(dirs) = as_subdirectories(output) {
        names.push((dirs, Spelling::Subdirectories));
    }
    let mut out: Vec<(String, Spelling)> = Vec::new();
    for (name, how) in names {
        let file = format!("{name}.raw");
        if !out.iter().any(|(f, _)| *f == file) {
            out.push((file, how));
        }
    }
    out
}

/// Whether `rel` is a file under `dir`, looked at without following any link: a directory on the
/// way that is a link is refused (a report is read as it is), one that is a file means `rel` is
/// not there.
fn present(dir: &Path, rel: &str) -> Result<bool> {
    let mut path = dir.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for (k, part) in parts.iter().enumerate() {
        path.push(part);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            return Ok(false);
        };
        if k + 1 == parts.len() {
            return Ok(true);
        }
        if meta.file_type().is_symlink() {
            bail!(
                "{} is a symbolic link (a report is read as it is, never through links)",
                parts[..=k].join("/")
            );
        }
        if !meta.is_dir() {
            return Ok(false);
        }
    }
    Ok(false)
}

/// The file of each output in `result` (the outputs in order), resolved so that every file
/// belongs to one output; names the outputs and files when that cannot be told.
pub fn resolve(result: &Path, outputs: &[String]) -> Result<Vec<OutputFile>> {
    let mut found: Vec<Vec<(String, Spelling)>> = Vec::new();
    for o in outputs {
        let mut here = Vec::new();
        for (file, how) in spellings(o) {
            if present(result, &file)? {
                here.push((file, how));
            }
        }
        found.push(here);
    }
    let mut chosen: Vec<Option<(String, Spelling)>> = vec![None; outputs.len()];
    // Settle outputs whose files no other unsettled output could claim, until nothing moves:
    // `a.b` and `a_b` with `a.b.raw` and `a_b.raw` settle `a.b` first, then `a_b`.
    loop {
        let mut moved = false;
        for k in 0..outputs.len() {
            if chosen[k].is_some() {
                continue;
            }
            let own: Vec<&(String, Spelling)> = found[k]
                .iter()
                .filter(|(f, _)| {
                    !chosen.iter().flatten().any(|(c, _)| c == f)
                        && !(0..outputs.len())
                            .any(|j| j != k && chosen[j].is_none() && found[j].iter().any(|(g, _)| g == f))
                })
                .collect();
            if let [one] = own.as_slice() {
                chosen[k] = Some((*one).clone());
                moved = true;
            } else if own.len() > 1 {
                let files: Vec<&str> = own.iter().map(|(f, _)| f.as_str()).collect();
                bail!(
                    "output '{}' has {} files ({}): which one is it?",
                    outputs[k],
                    files.len(),
                    files.join(", ")
                );
            }
        }
        if !moved {
            break;
        }
    }
    outputs
        .iter()
        .zip(chosen)
        .zip(&found)
        .map(|((o, c), f)| match c {
            Some((file, spelling)) => Ok(OutputFile {
                output: o.clone(),
                file,
                spelling,
            }),
            None if f.is_empty() => bail!("no {} for output '{o}'", spellings(o)[0].0),
            None => {
                let file = &f[0].0;
                let others: Vec<&str> = outputs
                    .iter()
                    .zip(&found)
                    .filter(|(p, g)| *p != o && g.iter().any(|(x, _)| x == file))
                    .map(|(p, _)| p.as_str())
                    .collect();
                bail!(
                    "{file} could be output '{o}' or '{}': the file names do not tell them apart",
                    others.join("', '")
                )
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(o: &str) -> Vec<String> {
        spellings(o).into_iter().map(|(f, _)| f).collect()
    }

    #[test]
    fn every_spelling_of_a_paddle_output_name() {
        assert_eq!(
            names("save_infer_model/scale_0.tmp_1"),
            vec![
                "save_infer_model_scale_0_tmp_1.raw",
                "save_infer_model_scale_0.tmp_1.raw",
                "save_infer_model/scale_0.tmp_1.raw",
            ]
        );
        assert_eq!(names("/conv1/Conv_output_0")[0], "_conv1_Conv_output_0.raw");
        assert!(names("/conv1/Conv_output_0").contains(&"conv1/Conv_output_0.raw".to_string()));
        assert_eq!(names("127"), vec!["127.raw", "_127.raw"]);
        assert!(names("onnx::Conv_497").contains(&"onnx_Conv_497.raw".to_string()));
        assert!(names("onnx::Conv_497").contains(&"onnx::Conv_497.raw".to_string()));
        // A name that would climb out of Result_N/ has no subdirectory spelling: every spelling is
        // one file name inside it.
        assert!(names("../x").iter().all(|n| !n.contains('/')), "{:?}", names("../x"));
        assert!(
            names("a/../b").iter().all(|n| !n.contains('/')),
            "{:?}",
            names("a/../b")
        );
    }

    fn touch(dir: &Path, rel: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, [0u8; 4]).unwrap();
    }

    #[test]
    fn files_resolve_to_one_output_each_or_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let outs = vec!["a.b".to_string(), "a_b".to_string()];
        touch(d.path(), "a.b.raw");
        touch(d.path(), "a_b.raw");
        let got = resolve(d.path(), &outs).unwrap();
        assert_eq!(got[0].file, "a.b.raw");
        assert_eq!(got[0].spelling, Spelling::AsNamed);
        assert_eq!(got[1].file, "a_b.raw");

        let d = tempfile::tempdir().unwrap();
        touch(d.path(), "a_b.raw");
        let e = resolve(d.path(), &outs).unwrap_err().to_string();
        assert!(e.contains("could be output 'a.b' or 'a_b'"), "{e}");

        let d = tempfile::tempdir().unwrap();
        touch(d.path(), "m/x.y.raw");
        touch(d.path(), "m_x_y.raw");
        let e = resolve(d.path(), &["m/x.y".to_string()]).unwrap_err().to_string();
        assert!(e.contains("has 2 files"), "{e}");

        let d = tempfile::tempdir().unwrap();
        touch(d.path(), "m/x.y.raw");
        let got = resolve(d.path(), &["m/x.y".to_string()]).unwrap();
        assert_eq!(got[0].spelling, Spelling::Subdirectories);
    }
}
