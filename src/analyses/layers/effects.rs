//! Fusion honesty: what exposing extra outputs did to a target's session. An extra output can
//! stop an EP from fusing the nodes around it, which changes the very numbers being audited, so
//! every tapped session's placement is compared with the untapped one's, and the model's own
//! outputs of every tapped run with the untapped run's, bit for bit.

use std::collections::BTreeMap;

use crate::analyses::placement::assign::base_name;
use crate::data::tensor::Tensor;
use crate::execution::exec::assignment::AssignedSubgraph;
use crate::execution::exec::{JobResult, OutputFile};
use crate::report::compare::TapEffects;

/// How many changed nodes a report lists by name.
const LISTED: usize = 20;

/// Accumulates the comparison over the tapped sessions of one target.
#[derive(Debug, Clone)]
pub struct EffectsAcc {
    untapped: BTreeMap<(String, String), usize>,
    partitions_untapped: usize,
    partitions_tapped: usize,
    /// (node, EP) -> (count untapped, fewest and most in a tapped session that differed).
    changed: BTreeMap<(String, String), (usize, usize, usize)>,
    outputs_identical: bool,
    /// Tapped sessions compared; none means there is nothing to say.
    sessions: usize,
}

/// How many nodes of each name each EP ran. Names are taken without the `_token_N` and
/// `/duplicated` marks ONNX Runtime gives the nodes it creates (their numbering differs between
/// sessions), so only real differences count.
fn node_eps(placement: &[AssignedSubgraph]) -> BTreeMap<(String, String), usize> {
    let mut m = BTreeMap::new();
    for s in placement {
        for n in &s.nodes {
            *m.entry((base_name(&n.name).to_string(), s.ep.clone())).or_default() += 1;
        }
    }
    m
}

/// Whether two output files hold the same bits.
fn same_bits(a: &OutputFile, b: &OutputFile) -> bool {
    match (Tensor::read_npy(&a.path), Tensor::read_npy(&b.path)) {
        (Ok(x), Ok(y)) => x.shape == y.shape && x.dtype() == y.dtype() && x.data.to_le_bytes() == y.data.to_le_bytes(),
        _ => false,
    }
}

impl EffectsAcc {
    /// Starts from the untapped session of the target.
    pub fn new(untapped: &JobResult) -> EffectsAcc {
        EffectsAcc {
            untapped: node_eps(&untapped.placement),
            partitions_untapped: untapped.placement.len(),
            partitions_tapped: 0,
            changed: BTreeMap::new(),
            outputs_identical: true,
            sessions: 0,
        }
    }

    /// Adds one tapped session; `outputs` are the model's own output names.
    pub fn add(&mut self, untapped: &JobResult, tapped: &JobResult, outputs: &[String]) {
        self.sessions += 1;
        self.partitions_tapped = self.partitions_tapped.max(tapped.placement.len());
        let now = node_eps(&tapped.placement);
        for key in self.untapped.keys().chain(now.keys()) {
            let (before, after) = (
                self.untapped.get(key).copied().unwrap_or(0),
                now.get(key).copied().unwrap_or(0),
            );
            if before != after {
                let e = self.changed.entry(key.clone()).or_insert((before, after, after));
                e.1 = e.1.min(after);
                e.2 = e.2.max(after);
            }
        }
        for (before, after) in untapped.outputs.iter().zip(&tapped.outputs) {
            for name in outputs {
                let a = before.iter().find(|f| &f.name == name);
                let b = after.iter().find(|f| &f.name == name);
                if !matches!((a, b), (Some(a), Some(b)) if same_bits(a, b)) {
                    self.outputs_identical = false;
                }
            }
        }
    }

    /// The report's view; `None` when no tapped session ran to compare.
    pub fn finish(self) -> Option<TapEffects> {
        (self.sessions > 0).then_some(())?;
        Some(TapEffects {
            partitions_untapped: self.partitions_untapped,
            partitions_tapped: self.partitions_tapped,
            nodes_changed_count: self.changed.len(),
            nodes_changed: self
                .changed
                .into_iter()
                .take(LISTED)
                .map(|((node, ep), (before, lo, hi))| {
                    let after = if lo == hi {
                        lo.to_string()
                    } else {
                        format!("{lo}..{hi}")
                    };
                    format!("{node} on {ep}: {before} -> {after}")
                })
                .collect(),
            outputs_identical: self.outputs_identical,
        })
    }
}
