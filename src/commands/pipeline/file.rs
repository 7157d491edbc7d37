//! The pipeline file (`npu-audit pipeline FILE.toml`): the stages in order, each a model (with
//! its float reference, or the reference derived from a QDQ model), and which earlier stage's
//! output feeds each of its inputs. Checked against the models before anything runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Deserialize;

use crate::data::model::{load_model, Signature};
use crate::foundation::error::bad_input;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(rename = "stage", default)]
    stages: Vec<RawStage>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStage {
    name: String,
    model: PathBuf,
    reference: Option<PathBuf>,
    /// `INPUT = "STAGE.OUTPUT"`.
    #[serde(default)]
    feeds: BTreeMap<String, String>,
}

/// One stage, checked.
#[derive(Debug, Clone)]
pub struct Stage {
    pub name: String,
    /// Paths relative to the pipeline file, resolved.
    pub model: PathBuf,
    pub reference: Option<PathBuf>,
    /// Per input of the model (in its order, for stages after the first): the earlier stage
    /// (index) and its output that feeds it.
    pub feeds: Vec<Feed>,
}

/// An input of a stage fed by an output of an earlier stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Feed {
    pub input: String,
    pub stage: usize,
    pub output: String,
}

/// A stage as the file names it, before its model is read.
#[derive(Debug, Clone)]
pub struct Named {
    pub name: String,
    pub model: PathBuf,
    pub reference: Option<PathBuf>,
    feeds: BTreeMap<String, String>,
}

/// The most a pipeline file may hold. One is a few KB; parsing TOML takes many times its size in
/// memory (a 10 MB file took 758 MB), so a larger one is refused before it is parsed.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Reads and checks a pipeline file against its models (see [`parse`] and [`resolve`]).
pub fn read(path: &Path) -> Result<Vec<Stage>> {
    let at = |e: String| bad_input(format!("{}: {e}", path.display()));
    let text = read_capped(path)
        .map_err(|e| at(e.to_string()))
        .and_then(|b| String::from_utf8(b).map_err(|_| at("not UTF-8 text".into())))?;
    let named = parse(&text, path.parent().unwrap_or(Path::new("."))).map_err(|e| at(format!("{e:#}")))?;
    let sigs = named
        .iter()
        .map(|s| {
            let model = load_model(&s.model).map_err(|e| at(format!("stage {}: {e:#}", s.name)))?;
            Signature::of(&model).map_err(|e| at(format!("stage {}: {e:#}", s.name)))
        })
        .collect::<Result<Vec<_>>>()?;
    resolve(named, &sigs).map_err(|e| at(format!("{e:#}")))
}

/// The file's bytes (standard input for `-`), at most [`MAX_FILE_BYTES`] of them.
fn read_capped(path: &Path) -> std::io::Result<Vec<u8>> {
    crate::foundation::userfile::read_capped(path, MAX_FILE_BYTES).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => std::io::Error::new(
            e.kind(),
            format!("{e}: a pipeline file is a few KB of [[stage]] tables"),
        ),
        _ => e,
    })
}

/// Parses the file's text: at least two stages with unique names of letters, digits, `_` and
/// `-`, the first without feeds; paths are taken relative to `base` (the file's directory).
pub fn parse(text: &str, base: &Path) -> Result<Vec<Named>> {
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let at = line.map_or(String::new(), |l| format!("line {l}: "));
        bad_input(format!("{at}{}", e.message().trim()))
    })?;
    if raw.stages.len() < 2 {
        return Err(bad_input("a pipeline needs at least two [[stage]] tables"));
    }
    let mut named: Vec<Named> = Vec::with_capacity(raw.stages.len());
    for (k, s) in raw.stages.into_iter().enumerate() {
        let plain = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
        if s.name.is_empty() || !s.name.chars().all(plain) || named.iter().any(|x| x.name == s.name) {
            return Err(bad_input(format!(
                "stage {} needs a unique name of letters, digits, '_' and '-' (got '{}')",
                k + 1,
                crate::foundation::console::printable(&s.name)
            )));
        }
        if k == 0 && !s.feeds.is_empty() {
            return Err(bad_input(format!(
                "stage {}: the first stage takes the command's inputs, not feeds",
                s.name
            )));
        }
        named.push(Named {
            name: s.name,
            model: base.join(&s.model),
            reference: s.reference.map(|r| base.join(r)),
            feeds: s.feeds,
        });
    }
    Ok(named)
}

/// Resolves every stage's feeds against the models' signatures (`sigs[k]` is stage `k`'s):
/// every input of every stage after the first fed by an output of an earlier stage, explicitly
/// or by the same name in the stage just before, of the same element type.
pub fn resolve(named: Vec<Named>, sigs: &[Signature]) -> Result<Vec<Stage>> {
    let mut stages: Vec<Stage> = Vec::with_capacity(named.len());
    for (k, (s, sig)) in named.into_iter().zip(sigs).enumerate() {
        let feeds = if k == 0 {
            Vec::new()
        } else {
            feeds_of(&s, sig, &stages, sigs).map_err(|e| bad_input(format!("stage {}: {e}", s.name)))?
        };
        stages.push(Stage {
            name: s.name,
            model: s.model,
            reference: s.reference,
            feeds,
        });
    }
    Ok(stages)
}

/// Every input of `s` with the earlier output that feeds it.
fn feeds_of(s: &Named, sig: &Signature, earlier: &[Stage], sigs: &[Signature]) -> Result<Vec<Feed>, String> {
    if let Some(unknown) = s.feeds.keys().find(|i| !sig.inputs.iter().any(|x| &x.name == *i)) {
        return Err(format!("feeds names '{unknown}', which is not an input of its model"));
    }
    let previous = earlier.len() - 1;
    sig.inputs
        .iter()
        .map(|input| {
            let (stage, output) = match s.feeds.get(&input.name) {
                Some(source) => {
                    let (name, output) = source
                        .split_once('.')
                        .ok_or_else(|| format!("feeds.{} = '{source}' is not STAGE.OUTPUT", input.name))?;
                    let stage = earlier
                        .iter()
                        .position(|x| x.name == name)
                        .ok_or_else(|| format!("feeds.{}: no earlier stage '{name}'", input.name))?;
                    (stage, output.to_string())
                }
                None => (previous, input.name.clone()),
            };
            let out = sigs[stage].outputs.iter().find(|o| o.name == output).ok_or_else(|| {
                format!(
                    "input '{}' is fed by nothing: stage {} has no output '{output}' (set feeds.{} = \"STAGE.OUTPUT\")",
                    input.name, earlier[stage].name, input.name
                )
            })?;
            if !out.can_feed(input) {
                return Err(format!(
                    "input '{}' takes shape {} but {}.{output} is {}",
                    input.name,
                    input.shape_text(),
                    earlier[stage].name,
                    out.shape_text()
                ));
            }
            if out.dtype != input.dtype {
                return Err(format!(
                    "input '{}' takes {} but {}.{output} is {}",
                    input.name,
                    input.dtype.name(),
                    earlier[stage].name,
                    out.dtype.name()
                ));
            }
            Ok(Feed {
                input: input.name.clone(),
                stage,
                output,
            })
        })
        .collect()
}
