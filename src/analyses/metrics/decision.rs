//! What one output decides, step by step or sample by sample: a threshold on every element (a
//! detector), or the top-1 class along a class axis. A stream's decisions and `eval --task
//! decide` read outputs through it.

use std::fmt;

use anyhow::Result;

use super::TopKStats;
use crate::data::tensor::Tensor;
use crate::foundation::error::bad_flag;

impl Decision {
    /// The decision as typed JSON (part of what an eval's records are of).
    pub fn identity(&self) -> serde_json::Value {
        match self {
            Decision::Threshold {
                output,
                above,
                threshold,
            } => serde_json::json!({ "output": output, "above": above, "threshold": threshold }),
            Decision::Top1 { output, axis } => serde_json::json!({ "output": output, "top1_axis": axis }),
        }
    }
}

/// What one step of a stream decides.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Every element of the output above (or below) a threshold: a detector's decision.
    Threshold {
        output: String,
        above: bool,
        threshold: f64,
    },
    /// The top-1 class along the output's class axis (of every row).
    Top1 { output: String, axis: usize },
}

impl Decision {
    /// Parses `--decision OUTPUT>THRESHOLD` or `OUTPUT<THRESHOLD`.
    pub fn parse_threshold(text: &str) -> Result<Decision> {
        let bad = || {
            bad_flag(format!(
                "--decision '{text}' is not OUTPUT>THRESHOLD or OUTPUT<THRESHOLD"
            ))
        };
        let (at, above) = match (text.find('>'), text.find('<')) {
            (Some(i), None) => (i, true),
            (None, Some(i)) => (i, false),
            _ => return Err(bad()),
        };
        let (output, value) = (text[..at].trim(), text[at + 1..].trim());
        let threshold: f64 = value.parse().ok().filter(|v: &f64| v.is_finite()).ok_or_else(bad)?;
        if output.is_empty() {
            return Err(bad());
        }
        Ok(Decision::Threshold {
            output: output.into(),
            above,
            threshold,
        })
    }

    /// The output it reads.
    pub fn output(&self) -> &str {
        match self {
            Decision::Threshold { output, .. } | Decision::Top1 { output, .. } => output,
        }
    }

    /// Whether `out` decides what `gold` decides (every element, or every row's class). Tensors
    /// of other shapes never agree.
    pub fn agrees(&self, out: &Tensor, gold: &Tensor) -> bool {
        if out.shape != gold.shape {
            return false;
        }
        match self {
            Decision::Threshold { above, threshold, .. } => {
                let decide = |v: f64| if *above { v > *threshold } else { v < *threshold };
                (0..gold.len()).all(|i| decide(out.data.get_f64(i)) == decide(gold.data.get_f64(i)))
            }
            Decision::Top1 { axis, .. } => {
                let mut stats = TopKStats::new(gold.shape[*axis]);
                stats.update(&out.data, &gold.data, &gold.shape, *axis);
                stats.top1() == Some(1.0)
            }
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Threshold {
                output,
                above,
                threshold,
            } => write!(f, "{output}{}{threshold}", if *above { '>' } else { '<' }),
            Decision::Top1 { output, .. } => write!(f, "top-1 of {output}"),
        }
    }
}
